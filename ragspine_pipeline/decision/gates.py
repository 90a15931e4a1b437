"""Gates: absolute thresholds on metrics, SPEC §3.1 and §4.

A gate list given by the user is the complete gate set for the run (it replaces the defaults).
Rates of failure pass at or below their threshold; every other metric passes at or above it.
Gates compare unrounded values; rounding is for display only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

LOWER_IS_BETTER = frozenset({"under_refusal", "over_refusal", "fabrication"})
SHORT_NAMES = {"under": "under_refusal", "over": "over_refusal", "recall": "recall@k"}
DEFAULT_GATES: dict[str, float] = {
    "precision": 0.80,
    "chr": 0.75,
    "under_refusal": 0.05,
    "over_refusal": 0.10,
    "compliance": 0.98,
}


class GateSpecError(ValueError):
    """A gate list that cannot be used (unknown metric, malformed threshold)."""


@dataclass(frozen=True)
class Gate:
    """``metric`` must be at least (``min``) or at most (``max``) ``threshold``.

    Without an explicit direction, rates of failure are ``max`` gates and every other metric ``min``.
    A ``hard`` gate that fails blocks the release; a ``soft`` one is reported as a warning.
    """

    metric: str
    threshold: float
    direction: str | None = None  # "min" or "max"
    severity: str = "hard"  # "hard" or "soft"

    @property
    def hard(self) -> bool:
        return self.severity == "hard"

    @property
    def is_max(self) -> bool:
        return self.direction == "max" if self.direction else self.metric in LOWER_IS_BETTER

    @property
    def op(self) -> str:
        return "<=" if self.is_max else ">="

    def passes(self, value: float) -> bool:
        return value <= self.threshold if self.is_max else value >= self.threshold


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float
    passed: bool


def canonical_metric(name: str, known: Iterable[str]) -> str:
    """Resolve short names (``under``, ``over``, ``recall``, ``recall@5``) to a known metric name."""
    name = name.strip()
    name = SHORT_NAMES.get(name, name)
    if name.startswith("recall@"):
        name = "recall@k"
    known = set(known)
    if name not in known:
        raise GateSpecError(f"unknown metric '{name}' (known: {', '.join(sorted(known))})")
    return name


def parse_gates(spec: str, known: Iterable[str]) -> list[Gate]:
    """Parse ``name=threshold,name=threshold``; the result is the complete gate set for the run."""
    known = list(known)
    gates: dict[str, Gate] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, raw = item.partition("=")
        if not sep:
            raise GateSpecError(f"gate '{item.strip()}' is not name=threshold")
        metric = canonical_metric(name, known)
        try:
            threshold = float(raw)
        except ValueError:
            raise GateSpecError(f"gate '{name.strip()}': threshold '{raw.strip()}' is not a number") from None
        if not math.isfinite(threshold):
            raise GateSpecError(f"gate '{name.strip()}': threshold must be a finite number")
        if metric in gates:
            raise GateSpecError(f"gate '{metric}' is given twice")
        gates[metric] = Gate(metric, threshold)
    if not gates:
        raise GateSpecError("the gate list is empty")
    return list(gates.values())


def default_gates() -> list[Gate]:
    return [Gate(metric, threshold) for metric, threshold in DEFAULT_GATES.items()]


def evaluate_gates(gates: Iterable[Gate], metrics: Mapping[str, float]) -> list[GateResult]:
    """Each gate whose metric the run measured, against the unrounded value (see :func:`unmeasured`)."""
    return [
        GateResult(gate, metrics[gate.metric], gate.passes(metrics[gate.metric]))
        for gate in gates
        if gate.metric in metrics
    ]


def unmeasured(gates: Iterable[Gate], metrics: Mapping[str, float]) -> list[Gate]:
    """The gates whose metric the run did not measure (e.g. a judged metric when the judge step failed).
    They fail: a gate never passes for want of a number."""
    return [gate for gate in gates if gate.metric not in metrics]

"""Gates: absolute thresholds on metrics (docs/decisions.md).

A gate list given by the user is the complete gate set for the run (it replaces the defaults).
Rates of failure pass at or below their threshold; every other metric passes at or above it.
Gates compare unrounded values; rounding is for display only.

Without a gate list the defaults are those of the dialects the data carries: :data:`DEFAULT_GATES`
(the grounded WFGY gates) and :data:`DEFAULT_QA_GATES` (RAGSpine's QA gates and the fabrication count);
``decision.evaluation.default_gates_for`` says which apply to a run.

A gate on a metric that does not apply to the run (its denominator is 0, e.g. ``claim_containment``
when no answerable case has a gold claim) is *not applicable*: its result is ``passed=None``, it never
blocks and reports show it as n/a. A gate on a metric the run did not measure at all fails
(:func:`unmeasured`).

The one resolver of metric names: every name a user writes (``--gates``, the gates config, a
baseline) goes through :func:`canonical_metric`: short names resolve everywhere, an unknown name is an
error listing the known ones, and two names of one metric in one mapping are an error
(:func:`canonical_names`).
"""

from __future__ import annotations

import math
import re
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
"""The grounded (WFGY) defaults."""
DEFAULT_QA_GATES: dict[str, float] = {
    "numeric_accuracy": 0.95,
    "citation_validity": 0.95,
    "refusal_appropriateness": 0.95,
    "clarification_appropriateness": 0.90,
    "fabrication": 0.0,
}
"""The RAGSpine QA defaults: the four pass rates, and no answer that should refuse may state a number."""


NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
"""A threshold as a decimal number (no ``nan``, ``inf``, ``true`` or digit separators)."""
_COMPARISON = re.compile(r"[<>:!]|==")
"""What a gate written as a comparison holds (``precision>=0.8``, ``under<0.05``, ``chr: 0.7``)."""


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
    """A gate against the run's unrounded value.

    ``passed`` is None when the gate's metric does not apply to the run (``applicable`` False, its
    ``denominator`` 0): such a gate neither passes nor fails, and never blocks. ``denominator`` is the
    number of cases the metric is over (None for metrics without one, e.g. the fabrication count).
    """

    gate: Gate
    value: float
    passed: bool | None
    applicable: bool = True
    denominator: int | None = None


def canonical_metric(name: str, known: Iterable[str] | None = None) -> str:
    """The metric ``name`` stands for: short names (``under``, ``over``, ``recall``, ``recall@5``)
    resolve to their metric, surrounding spaces are ignored.

    With ``known``, a name that resolves to none of them raises :class:`GateSpecError` listing the known
    names and the short names; without it, unknown names are returned as they are (resolved, not checked).
    """
    name = name.strip()
    name = SHORT_NAMES.get(name, name)
    if name.startswith("recall@"):
        name = "recall@k"
    if known is not None:
        known = set(known)
        if name not in known:
            short = _short_names(known)
            short = f"; short names: {short}" if short else ""
            raise GateSpecError(f"unknown metric '{name}' (known: {', '.join(sorted(known))}{short})")
    return name


def _short_names(known: set[str]) -> str:
    """The short names that stand for ``known`` metrics, each with its metric, as an error lists them."""
    written = {"recall": "recall or recall@5"}
    return ", ".join(
        f"{written.get(short, short)} for {metric}"
        for short, metric in SHORT_NAMES.items()
        if metric in known
    )


def canonical_names(names: Iterable[str], known: Iterable[str] | None = None) -> dict[str, str]:
    """``{name as written: metric}`` for the names of one mapping (a gates block, a baseline entry).

    Each name is resolved by :func:`canonical_metric`; two names that resolve to the same metric (``under``
    and ``under_refusal``) raise :class:`GateSpecError`: one of the two values would silently win.
    """
    known = None if known is None else list(known)
    resolved: dict[str, str] = {}
    by_metric: dict[str, str] = {}
    for name in names:
        metric = canonical_metric(name, known)
        if metric in by_metric:
            raise GateSpecError(f"'{by_metric[metric]}' and '{name}' both name the metric '{metric}'")
        by_metric[metric] = name
        resolved[name] = metric
    return resolved


def parse_gates(spec: str, known: Iterable[str]) -> list[Gate]:
    """Parse ``name=threshold,name=threshold``; the result is the complete gate set for the run."""
    known = list(known)
    gates: dict[str, Gate] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, raw = item.partition("=")
        if not sep or _COMPARISON.search(item):
            raise GateSpecError(_not_name_value(item.strip()))
        metric = canonical_metric(name, known)
        if not NUMBER.fullmatch(raw.strip()):
            raise GateSpecError(f"gate '{name.strip()}': threshold '{raw.strip()}' is not a number")
        threshold = float(raw)
        if not math.isfinite(threshold):
            raise GateSpecError(f"gate '{name.strip()}': threshold must be a finite number")
        if metric in gates:
            raise GateSpecError(f"gate '{metric}' is given twice")
        gates[metric] = Gate(metric, threshold)
    if not gates:
        raise GateSpecError("the gate list is empty")
    return list(gates.values())


def _not_name_value(item: str) -> str:
    """The error for a gate that is not ``name=value``: the same gate written right, when it can be."""
    name, *rest = re.split(r"\s*[<>:!=]+\s*", item, maxsplit=1)
    value = rest[0] if rest else ""
    example = f"{name}={value}" if name and NUMBER.fullmatch(value) else "precision=0.8"
    if not _COMPARISON.search(item):
        return f"'{item}': write name=value, e.g. {example}"
    *some, last = sorted(LOWER_IS_BETTER)
    return (
        f"'{item}': write name=value, e.g. {example}; the direction is fixed per metric "
        f"(at most for {', '.join(some)} and {last}; at least for any other)"
    )


def default_gates(*, grounded: bool = True, qa: bool = False) -> list[Gate]:
    """The default gates of the dialects named: ``grounded`` (:data:`DEFAULT_GATES`), ``qa``
    (:data:`DEFAULT_QA_GATES`), in that order."""
    chosen = {**(DEFAULT_GATES if grounded else {}), **(DEFAULT_QA_GATES if qa else {})}
    return [Gate(metric, threshold) for metric, threshold in chosen.items()]


def evaluate_gates(
    gates: Iterable[Gate], metrics: Mapping[str, float], denominators: Mapping[str, int] | None = None
) -> list[GateResult]:
    """Each gate whose metric the run measured, against the unrounded value (see :func:`unmeasured`).

    ``denominators``: how many cases each metric is over; a gate on a metric whose denominator is 0
    does not apply (``passed=None``). Metrics not listed (counts, judged scores) always apply.
    """
    denominators = denominators or {}
    results = []
    for gate in gates:
        if gate.metric not in metrics:
            continue
        value, n = metrics[gate.metric], denominators.get(gate.metric)
        passed = None if n == 0 else gate.passes(value)
        results.append(GateResult(gate, value, passed, applicable=n != 0, denominator=n))
    return results


def unmeasured(gates: Iterable[Gate], metrics: Mapping[str, float]) -> list[Gate]:
    """The gates whose metric the run did not measure (e.g. a judged metric when the judge step failed).
    They fail: a gate never passes for want of a number."""
    return [gate for gate in gates if gate.metric not in metrics]

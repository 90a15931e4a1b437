"""Gates: absolute thresholds on metrics (docs/decisions.md).

A gate list given by the user is the complete gate set for the run (it replaces the defaults).
A threshold must lie in the range of its metric's kind (:data:`RANGES`: a rate in [0, 1], a count or a
statistic at least 0): any other is a one-line :class:`GateSpecError` naming the gate, its value and the
range, wherever the gate comes from (``--gates`` or the gates config: :class:`Gate` checks itself).
Rates of failure pass at or below their threshold; every other metric passes at or above it (each
metric's direction is in the registry, ``ragspine_pipeline.metrics``). Gates compare unrounded values;
rounding is for display only.

Without a gate list the defaults are those of the dialects the data carries: :data:`DEFAULT_GATES`
(the grounded WFGY gates) and :data:`DEFAULT_QA_GATES` (RAGSpine's QA gates and the fabrication count),
both read from the registry; ``decision.run_gates.default_gates_for`` says which apply to a run.

A gate on a metric that does not apply to the run (its value is None: its denominator is 0, e.g.
``claim_containment`` when no answerable case has a gold claim) is *not applicable*: its result is
``passed=None``, it never blocks and reports show it as n/a. A gate on a metric the run did not measure
at all fails (:func:`unmeasured`).

The one resolver of metric names: every name a user writes (``--gates``, the gates config, a baseline,
a stored report or production summary) goes through :func:`canonical_metric`, in the :class:`Scope` it
is read in. Short names and old names resolve to their metric; an old name whose metric depends on the
run (``faithfulness``) resolves by the run's evidence registry, and is an error naming both metrics
where that is not known; an unknown name is an error listing the known ones; two names of one metric in
one mapping are an error (:func:`canonical_names`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ragspine_pipeline import metrics as registry
from ragspine_pipeline.metrics import GOLDEN_FAMILIES, MetricResult, Scope

V = TypeVar("V")
_GOLDEN = registry.family(*GOLDEN_FAMILIES)
LOWER_IS_BETTER = frozenset(m.name for m in _GOLDEN if m.lower_is_better)
SHORT_NAMES = {short: m.name for m in _GOLDEN for short in m.short_names}
DEFAULT_GATES: dict[str, float] = registry.default_gates("grounded")
"""The grounded (WFGY) defaults."""
DEFAULT_QA_GATES: dict[str, float] = registry.default_gates("qa")
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

    def __post_init__(self) -> None:
        bound = "max" if self.is_max else "min"
        if problem := threshold_problem(self.metric, self.threshold, self.direction or bound):
            raise GateSpecError(problem)


RANGES: dict[str, tuple[float, float]] = {
    "rate": (0.0, 1.0),
    "count": (0.0, math.inf),
    "statistic": (0.0, math.inf),
}
"""The thresholds a gate on each kind of metric may have (``metrics.Metric.kind``): a rate is a share of
cases, in [0, 1]; a count, or a statistic such as a latency or a token count, is never negative. A judged
score keeps its own scale."""


def _range_text(low: float, high: float) -> str:
    return f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"


def threshold_problem(metric: str, threshold: float, bound: str, written: str | None = None) -> str | None:
    """Why ``threshold`` cannot be a ``bound`` (min or max) of a gate on ``metric`` (a canonical name;
    ``written``: the name as the user wrote it), as one line naming the gate, the value and the range the
    metric's kind allows; None when it can. A metric the registry does not hold is not checked."""
    known = registry.BY_NAME.get(metric)
    if known is None or known.kind not in RANGES:
        return None
    low, high = RANGES[known.kind]
    if low <= threshold <= high:
        return None
    label = f"'{metric}'" if written is None or written == metric else f"'{written}' ({metric})"
    return (
        f"gate {label}: {bound} {threshold:g} is out of range: {metric} is a {known.kind}, its "
        f"thresholds must be {_range_text(low, high)}"
    )


@dataclass(frozen=True)
class GateResult:
    """A gate against the run's unrounded result of its metric.

    ``passed`` is None when the metric does not apply to the run (its value is None, its denominator
    0): such a gate neither passes nor fails, and never blocks. The value, numerator and denominator a
    report shows beside the verdict are those of ``result``, the metric the gate judged.
    """

    gate: Gate
    result: MetricResult
    passed: bool | None

    @property
    def value(self) -> float | None:
        return self.result.value

    @property
    def applicable(self) -> bool:
        return self.result.applies

    @property
    def denominator(self) -> int | None:
        return self.result.denominator


def canonical_metric(name: str, known: Iterable[str] | None = None, scope: Scope = Scope.GOLDEN) -> str:
    """The metric ``name`` stands for when read in ``scope``: short names (``under``, ``over``,
    ``recall``, ``recall@5``) and old names (``faithfulness``, a production summary's ``compliance``)
    resolve to their metric (``ragspine_pipeline.metrics``); surrounding spaces are ignored.

    An old name that stands for two metrics in ``scope`` (``faithfulness`` in a golden run whose
    evidence registry is not known) raises :class:`GateSpecError` naming both. With ``known``, a name
    that resolves to none of them raises :class:`GateSpecError` listing the known names and the short
    names; without it, unknown names are returned as they are (resolved, not checked).
    """
    name = name.strip()
    if name.startswith("recall@") and scope in registry.GOLDEN_SCOPES:
        name = "recall@k"  # the cut-off is the run's k, whatever N a name carries
    targets = registry.alias_targets(name, scope)
    if len(targets) > 1:
        choices = " or ".join(f"{target} ({_where(name, target)})" for target in targets)
        raise GateSpecError(f"'{name}' is ambiguous: it means {choices}; write the one you mean")
    name = targets[0] if targets else name
    if known is not None:
        known = set(known)
        if name not in known:
            short = _short_names(known)
            short = f"; short names: {short}" if short else ""
            raise GateSpecError(f"unknown metric '{name}' (known: {', '.join(sorted(known))}{short})")
    return name


def _where(alias: str, target: str) -> str:
    """Where ``alias`` stands for ``target``: its scopes, but the one whose registry is not known."""
    scopes = registry.metric(target).other_names()[alias] - {Scope.GOLDEN}
    return "in a " + " or ".join(sorted(scopes))


def _short_names(known: set[str]) -> str:
    """The short names that stand for ``known`` metrics, each with its metric, as an error lists them."""
    written = {"recall": "recall or recall@5"}
    return ", ".join(
        f"{written.get(short, short)} for {metric}"
        for short, metric in SHORT_NAMES.items()
        if metric in known
    )


def canonical_names(
    names: Iterable[str], known: Iterable[str] | None = None, scope: Scope = Scope.GOLDEN
) -> dict[str, str]:
    """``{name as written: metric}`` for the names of one mapping (a gates block, a baseline entry).

    Each name is resolved by :func:`canonical_metric` in ``scope``; two names that resolve to the same
    metric (``under`` and ``under_refusal``) raise :class:`GateSpecError`: one of the two values would
    silently win.
    """
    known = None if known is None else list(known)
    resolved: dict[str, str] = {}
    by_metric: dict[str, str] = {}
    for name in names:
        metric = canonical_metric(name, known, scope)
        if metric in by_metric:
            raise GateSpecError(f"'{by_metric[metric]}' and '{name}' both name the metric '{metric}'")
        by_metric[metric] = name
        resolved[name] = metric
    return resolved


def canonical_keys(values: Mapping[str, V], scope: Scope) -> dict[str, V]:
    """``values`` keyed by the metric each name stands for in ``scope``: a stored report, run history or
    production summary written under old names reads under the current ones. A name the registry does
    not hold is kept as it is; where an old and a current name of one metric are both present, the
    current one's value is kept."""
    out: dict[str, V] = {}
    for name, value in values.items():
        metric = canonical_metric(name, scope=scope)
        if metric == name or metric not in out:
            out[metric] = value
    return out


def parse_gates(spec: str, known: Iterable[str], scope: Scope = Scope.GOLDEN) -> list[Gate]:
    """Parse ``name=threshold,name=threshold`` (names read in ``scope``); the result is the complete gate
    set for the run."""
    known = list(known)
    gates: dict[str, Gate] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, raw = item.partition("=")
        if not sep or _COMPARISON.search(item):
            raise GateSpecError(_not_name_value(item.strip()))
        metric = canonical_metric(name, known, scope)
        if not NUMBER.fullmatch(raw.strip()):
            raise GateSpecError(f"gate '{name.strip()}': threshold '{raw.strip()}' is not a number")
        threshold = float(raw)
        if not math.isfinite(threshold):
            raise GateSpecError(f"gate '{name.strip()}': threshold must be a finite number")
        if metric in gates:
            raise GateSpecError(f"gate '{metric}' is given twice")
        bound = "max" if metric in LOWER_IS_BETTER else "min"
        if problem := threshold_problem(metric, threshold, bound, name.strip()):  # the name as written
            raise GateSpecError(problem)
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
    gates: Iterable[Gate], metrics: Mapping[str, MetricResult | float | None]
) -> list[GateResult]:
    """Each gate whose metric the run measured, against its unrounded result (see :func:`unmeasured`).

    ``metrics``: the run's result of each metric (a bare number or None stands for a result without
    numerator and denominator). A gate on a metric whose value is None does not apply (``passed=None``).
    """
    results = []
    for gate in gates:
        if gate.metric not in metrics:
            continue
        result = metrics[gate.metric]
        if not isinstance(result, MetricResult):
            result = MetricResult(gate.metric, result)
        passed = None if result.value is None else gate.passes(result.value)
        results.append(GateResult(gate, result, passed))
    return results


def unmeasured(gates: Iterable[Gate], metrics: Mapping[str, object]) -> list[Gate]:
    """The gates whose metric the run did not measure (e.g. a judged metric when the judge step failed).
    They fail: a gate never passes for want of a number."""
    return [gate for gate in gates if gate.metric not in metrics]

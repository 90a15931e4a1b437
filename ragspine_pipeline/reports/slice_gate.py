"""Which slices the slice gate judges, and how each fared: one rule for the HTML and the Markdown report.

The slice gate blocks a release when a slice with at least ``min_n`` cases has a releasable rate below
``min_rate``. A slice with fewer than ``min_n`` cases is *not gated*: it is shown, never blocks, and
no report says it holds. The release decision (``release.failed_slices``) is the authority on what
blocked; the rule is applied here only to a report without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ragspine_pipeline.reports.charts import finite

# Slice statuses: ``fail`` blocks the release; ``warn`` is below the drawn line without blocking (the
# line is assumed, or the decision did not list it); ``ungated`` has fewer than ``min_n`` cases; ``na``
# has no releasable rate.
UNGATED = "ungated"


@dataclass(frozen=True)
class SliceGate:
    min_rate: float
    min_n: int
    stated: bool  # False: the report carries no slice gate and ``min_rate`` is an assumed line

    def not_gated_text(self) -> str:
        return f"not gated (n < {self.min_n})"


def _mapping(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def slice_gate_of(report: Mapping, fallback: float) -> SliceGate:
    """The report's slice gate (its own, else its decision's), else a failed slice's rate, else
    ``fallback`` with ``stated`` False."""
    release = _mapping(report.get("release"))
    gate = _mapping(report.get("slice_gate")) or _mapping(release.get("slice_gate"))
    rates = [finite(_mapping(s).get("min_rate")) for s in release.get("failed_slices") or []]
    rate = next((r for r in [finite(gate.get("min_rate")), *rates] if r is not None), None)
    min_n = finite(gate.get("min_n"))
    return SliceGate(fallback if rate is None else rate, 1 if min_n is None else int(min_n), rate is not None)


def slice_status(dimension: str, value: str, entry: Mapping, gate: SliceGate, release: Mapping) -> str:
    """``fail``, ``warn``, ``ungated``, ``pass`` or ``na`` (see the statuses above)."""
    rate, n = finite(entry.get("releasable_rate")), finite(entry.get("n")) or 0
    if isinstance(release.get("failed_slices"), list):  # the decision is the authority on what blocked
        listed = map(_mapping, release["failed_slices"])
        failed = any(s.get("dimension") == dimension and s.get("value") == value for s in listed)
    else:
        failed = rate is not None and rate < gate.min_rate and n >= gate.min_n
    if failed:
        return "fail"
    if rate is None:
        return "na"
    if n < gate.min_n:
        return UNGATED
    return "warn" if rate < gate.min_rate else "pass"


def worst_first(values: Mapping) -> list[tuple[str, Mapping]]:
    """A dimension's slices, lowest releasable rate first (missing last); among equals the larger slice,
    then by name."""

    def key(item: tuple[str, Mapping]) -> tuple:
        rate = finite(item[1].get("releasable_rate"))
        return (2.0 if rate is None else rate, -(finite(item[1].get("n")) or 0), item[0])

    return sorted(((str(v), _mapping(e)) for v, e in values.items()), key=key)


def ungated_slices(report: Mapping, gate: SliceGate) -> list[str]:
    """``dimension=value`` of every slice the gate does not judge (fewer than ``min_n`` cases)."""
    release = _mapping(report.get("release"))
    return [
        f"{dimension}={value}"
        for dimension, values in _mapping(report.get("slices")).items()
        for value, entry in worst_first(_mapping(values))
        if slice_status(str(dimension), value, entry, gate, release) == UNGATED
    ]

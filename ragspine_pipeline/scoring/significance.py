"""Significance-aware regressions of the nightly production metrics (SPEC §3.5, §4).

Sampled production metrics differ from night to night by chance alone, so a drop is flagged only when
it is statistically significant: a **one-sided pooled two-proportion z-test** of today's rate against a
**trailing baseline** (the same metric and slice pooled over the previous ``window`` days, default 7),
at level ``alpha`` (default 0.05). Only rates whose today's and baseline's denominators both reach
``min_n`` are tested; the others are reported as untested with the reason, never flagged.

"Worse" depends on the metric: compliance, citation validity, admissibility and lexical faithfulness
should not fall; the refusal rate and the fabrication rate should not rise (:data:`WORSE_WHEN`).
Each (metric, slice) is its own test at level ``alpha``: with many slices some false alarm in a night is
expected, which is why the flag is a WARN and an alert, never a release block.

The tests in ``tests/scoring/test_significance.py`` simulate nights: with no change the false-alarm rate
stays near ``alpha``; a 5-point drop of a 90 % rate in a slice of 400 samples a night (baseline 7 × 400)
is detected in about 90 % of nights (measured: 5.7 % false alarms, 89.6 % detection, seed 7).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

WORSE_WHEN = {
    "compliance": "lower",
    "citation_validity": "lower",
    "admissible_rate": "lower",
    "lexical_faithfulness": "lower",
    "refusal_rate": "higher",
    "fabrication": "higher",  # its rate: fabricating refusals among refusals
}
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_N = 100
DEFAULT_WINDOW = 7


def drop_p_values(
    successes: np.ndarray | int,
    n: np.ndarray | int,
    base_successes: np.ndarray | int,
    base_n: np.ndarray | int,
    worse: str = "lower",
) -> np.ndarray:
    """One-sided p-values that today's proportion is worse than the baseline's (pooled z-test).

    Vectorised over arrays of equal shape. Where the pooled proportion is 0 or 1 (no variation at all)
    there is no evidence of a change: the p-value is 1.
    """
    x1, n1, x0, n0 = (np.asarray(v, dtype=float) for v in (successes, n, base_successes, base_n))
    pooled = (x1 + x0) / (n1 + n0)
    se = np.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n0))
    diff = x1 / n1 - x0 / n0
    if worse == "lower":
        diff = -diff
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, diff / np.where(se > 0, se, 1.0), -np.inf)
    return norm.sf(z)


@dataclass(frozen=True)
class DropTest:
    """Today's rate of one metric in one slice against its trailing baseline."""

    metric: str
    dimension: str | None  # None: all traffic
    value: str | None
    current: float
    current_n: int
    baseline: float | None
    baseline_n: int
    baseline_days: int
    p_value: float | None  # None when not tested
    significant: bool
    reason: str  # "tested", or why not

    @property
    def slice_name(self) -> str:
        return "all traffic" if self.dimension is None else f"{self.dimension}={self.value}"

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "slice": self.slice_name,
            "current": round(self.current, 4),
            "current_n": self.current_n,
            "baseline": None if self.baseline is None else round(self.baseline, 4),
            "baseline_n": self.baseline_n,
            "baseline_days": self.baseline_days,
            "p_value": None if self.p_value is None else round(self.p_value, 6),
            "significant": self.significant,
            "reason": self.reason,
        }


def significant_drops(
    today: dict,
    history: Sequence[dict],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_n: int = DEFAULT_MIN_N,
    window: int = DEFAULT_WINDOW,
) -> list[DropTest]:
    """Every rate of ``today`` (a daily summary of ``scoring.production``, overall and per slice) tested
    against the previous ``window`` summaries of ``history`` (any order; later days than today and
    today itself are ignored)."""
    past = sorted((d for d in history if d.get("day", "") < today.get("day", "")), key=lambda d: d["day"])
    past = past[-window:]
    tests = []
    for dimension, value, metrics in _rates(today):
        for metric, worse in WORSE_WHEN.items():
            now = _successes(metrics.get(metric))
            if now is None:
                continue
            base = [_successes(_slice_metrics(day, dimension, value).get(metric)) for day in past]
            base = [b for b in base if b is not None]
            tests.append(_test(metric, worse, dimension, value, now, base, alpha, min_n))
    return tests


def _test(metric, worse, dimension, value, now, base, alpha, min_n) -> DropTest:
    x1, n1 = now
    x0, n0 = sum(b[0] for b in base), sum(b[1] for b in base)
    current = x1 / n1 if n1 else 0.0
    baseline = x0 / n0 if n0 else None
    common = dict(
        metric=metric,
        dimension=dimension,
        value=value,
        current=current,
        current_n=n1,
        baseline=baseline,
        baseline_n=n0,
        baseline_days=len(base),
    )
    if not base:
        return DropTest(**common, p_value=None, significant=False, reason="no baseline days")
    if n1 < min_n or n0 < min_n:
        reason = f"too few samples (today {n1}, baseline {n0}; at least {min_n} each)"
        return DropTest(**common, p_value=None, significant=False, reason=reason)
    p_value = float(drop_p_values(x1, n1, x0, n0, worse))
    return DropTest(**common, p_value=p_value, significant=p_value < alpha, reason="tested")


def _rates(summary: dict):
    yield None, None, summary.get("metrics", {})
    for dimension, values in (summary.get("slices") or {}).items():
        for value, entry in values.items():
            yield dimension, value, entry.get("metrics", {})


def _slice_metrics(summary: dict, dimension: str | None, value: str | None) -> dict:
    if dimension is None:
        return summary.get("metrics", {})
    return ((summary.get("slices") or {}).get(dimension) or {}).get(value, {}).get("metrics", {})


def _successes(entry: dict | None) -> tuple[int, int] | None:
    """``(successes, n)`` of a rate entry: ``successes`` when recorded, else the fabrication count or
    the rounded ``value × n`` of summaries written before ``successes`` existed."""
    if not entry or not entry.get("n"):
        return None
    n = int(entry["n"])
    if "successes" in entry:
        return int(entry["successes"]), n
    if "rate" in entry:  # the fabrication count: value is the count itself
        return int(entry["value"]), n
    return round(float(entry["value"]) * n), n

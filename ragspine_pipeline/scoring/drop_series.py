"""The series the nightly drop tests read: every production rate of every slice, night by night, as
binomial counts read from the daily summaries (``scoring.production``), and the all-traffic rate at the
reference nights' traffic mix (``scoring.mix``). The tests themselves: ``scoring.significance``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date

import numpy as np

from ragspine_pipeline.scoring.drop_results import ALL_TRAFFIC, USUAL_MIX
from ragspine_pipeline.scoring.drop_settings import WORSE_WHEN
from ragspine_pipeline.scoring.mix import Mix, standardised, strata

Counts = tuple[float, float, int]  # (successes counted so that lower is worse, effective n, raw n)


@dataclass(frozen=True)
class Series:
    """One rate of one slice, night by night."""

    metric: str
    group: str  # what τ² is pooled over: all traffic, one dimension, or the mix-adjusted rate alone
    slice: str  # ALL_TRAFFIC, USUAL_MIX or "dimension=value"
    counts: dict[date, Counts]

    @property
    def key(self) -> str:
        """``metric@slice``: what a test, an alert row and an incident's rate are named by."""
        return f"{self.metric}@{self.slice}"

    def since(self, first: date) -> Series:
        """The series without its nights before ``first`` (a level a person accepted as the new one)."""
        kept = {d: c for d, c in self.counts.items() if d >= first}
        return Series(self.metric, self.group, self.slice, kept)


def read_series(today: dict, by_day: Mapping[date, dict]) -> Iterator[Series]:
    """Every (metric, slice) rate of ``today``, with its counts on every day of ``by_day`` that has it."""
    for dimension, value, metrics in rates(today):
        slice_name = ALL_TRAFFIC if dimension is None else f"{dimension}={value}"
        for metric, worse in WORSE_WHEN.items():
            if entry_counts(metrics.get(metric), worse) is None:
                continue
            counts = {}
            for day, summary in by_day.items():
                entry = entry_counts(slice_metrics(summary, dimension, value).get(metric), worse)
                if entry is not None:
                    counts[day] = entry
            yield Series(metric, ALL_TRAFFIC if dimension is None else dimension, slice_name, counts)


def adjusted_series(metric: str, by_day: Mapping[date, dict], reference: list[date], mix: Mix) -> Series:
    """The all-traffic rate of every night at the ``reference`` nights' mix of ``mix.dimension``
    (``scoring.mix``): the rate at the usual mix."""
    worse = WORSE_WHEN[metric]
    per_day = {
        d: strata(summary, mix.dimension, metric, lambda entry: entry_counts(entry, worse))
        for d, summary in by_day.items()
    }
    return Series(metric, "mix-adjusted", USUAL_MIX, standardised(per_day, reference))


def rates(summary: dict):
    """``(dimension, value, metrics)`` of all traffic (``None, None``) and of every slice."""
    yield None, None, summary.get("metrics", {})
    for dimension, values in (summary.get("slices") or {}).items():
        for value, entry in values.items():
            yield dimension, value, entry.get("metrics", {})


def slice_metrics(summary: dict, dimension: str | None, value: str | None) -> dict:
    if dimension is None:
        return summary.get("metrics", {})
    return ((summary.get("slices") or {}).get(dimension) or {}).get(value, {}).get("metrics", {})


def entry_counts(entry: dict | None, worse: str) -> Counts | None:
    """``(successes, effective n, n)`` of a rate entry, successes counted so that lower is worse.

    ``successes`` is exact when recorded (the fabrication entry's ``value`` is its count); summaries
    written before it existed give the rounded ``value × n``. With an ``effective_n`` (claims clustered
    in answers) the successes are scaled to it: the same rate over fewer independent observations.
    """
    if not entry or not entry.get("n"):
        return None
    n = int(entry["n"])
    if "successes" in entry:
        x = int(entry["successes"])
    elif "rate" in entry:  # the fabrication count
        x = int(entry["value"])
    else:
        x = round(float(entry["value"]) * n)
    effective = float(entry.get("effective_n") or n)
    x_eff = x * effective / n
    return (x_eff if worse == "lower" else effective - x_eff), effective, n


def own_direction(rate: float, worse: str) -> float:
    """Counts are kept as "lower is worse"; a higher-is-worse rate is shown as itself."""
    return rate if worse == "lower" else 1.0 - rate


def arrays(s: Series, days: list[date]) -> tuple[np.ndarray, np.ndarray]:
    """The series' successes and effective n on those of ``days`` it has."""
    present = [s.counts[d] for d in days if d in s.counts]
    return np.array([c[0] for c in present], dtype=float), np.array([c[1] for c in present], dtype=float)

"""The all-traffic rate at a fixed traffic mix: direct standardisation over one tag dimension.

The all-traffic rate of a night is the average of its slices' rates weighted by that night's traffic
mix, so it moves when the mix moves even if no slice changed: a new workflow with a worse rate, or a
weekend on which a worse slice carries more of the traffic. The *mix-adjusted* rate weighs each slice's
rate by its share in the reference nights instead (direct standardisation):

    adjusted = Σ_s w_s · p_s        (Σ_s w_s = 1, over the slices of the reference nights)

where ``p_s`` is the slice's rate that night and ``w_s`` its share of the rate's denominator over the
reference nights. Traffic with no value for the dimension is one more stratum (``untagged``: all
traffic minus the dimension's slices). A slice new since the reference nights has no weight: its traffic
does not move the adjusted rate. A slice of the reference nights with no traffic that night (it
disappeared) counts at its rate over the reference nights: its traffic is gone, not worse, so the
adjusted rate stays at the usual mix and the move of the all-traffic rate is the mix's. The adjusted
rate's sampling variance is ``Σ w_s² p̃_s(1 − p̃_s)/n_s`` (``p̃ = (x + ½)/(n + 1)`` so a slice at 0 % or
100 % still counts; an absent slice with its reference counts); it is expressed as an effective count
(successes and n of a binomial rate with that rate and variance), so the drop test treats it like any
other series. A night whose present slices carry less than half of the reference weight has no
adjusted rate.

The dimension is the one whose traffic mix moved most tonight (total variation distance between
tonight's shares of traces and the reference nights'), and the slice whose share moved most is what an
alert on the raw rate alone names ("traffic mix changed: workflow=x grew from 10.0 % to 31.0 %").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

UNTAGGED = "untagged"
Counts = tuple[float, float, int]  # (successes counted so that lower is worse, effective n, n)


@dataclass(frozen=True)
class Mix:
    """The reference traffic mix of one dimension, and how tonight's differs from it."""

    dimension: str
    reference: dict[str, float]  # stratum -> share of traces over the reference nights
    tonight: dict[str, float]  # stratum -> share of traces tonight

    @property
    def moved(self) -> float:
        """Total variation distance between the two mixes (0: the same, 1: disjoint)."""
        strata = self.reference.keys() | self.tonight.keys()
        return sum(abs(self.tonight.get(s, 0.0) - self.reference.get(s, 0.0)) for s in strata) / 2

    def shift(self) -> str:
        """The stratum whose share moved most: ``workflow=x grew from 10.0 % to 31.0 %``."""
        strata = sorted(self.reference.keys() | self.tonight.keys())

        def moved(stratum: str) -> tuple[float, bool]:  # the largest move; of equal ones, a growth
            change = self.tonight.get(stratum, 0.0) - self.reference.get(stratum, 0.0)
            return round(abs(change), 9), change > 0

        top = max(strata, key=moved)
        before, after = self.reference.get(top, 0.0), self.tonight.get(top, 0.0)
        name = f"{self.dimension} {UNTAGGED}" if top == UNTAGGED else f"{self.dimension}={top}"
        verb = "grew" if after >= before else "fell"
        return f"{name} {verb} from {100 * before:.1f} % to {100 * after:.1f} %"


def trace_mix(today: Mapping, reference: Iterable[Mapping]) -> Mix | None:
    """The dimension whose share of traces moved most between the ``reference`` summaries and ``today``
    (None without slices, or without reference traffic)."""
    best = None
    for dimension in sorted((today.get("slices") or {}).keys()):
        before = _shares([_trace_counts(s, dimension) for s in reference])
        after = _shares([_trace_counts(today, dimension)])
        if before and after:
            mix = Mix(dimension, before, after)
            if best is None or mix.moved > best.moved:
                best = mix
    return best


def standardised(
    strata_by_day: Mapping[object, Mapping[str, Counts]], reference_days: Iterable[object]
) -> dict[object, Counts]:
    """Each day's rate at the reference mix, as effective counts (module docstring): ``strata_by_day``
    maps a day to each stratum's counts of one rate; the weights are the strata's shares of the rate's n
    over ``reference_days``."""
    totals: dict[str, float] = {}
    pooled: dict[str, tuple[float, float]] = {}  # stratum -> (x, effective n) over the reference nights
    for day in reference_days:
        for stratum, c in strata_by_day.get(day, {}).items():
            totals[stratum] = totals.get(stratum, 0.0) + c[2]
            x, n_eff = pooled.get(stratum, (0.0, 0.0))
            pooled[stratum] = (x + c[0], n_eff + c[1])
    usable = {s: n for s, n in totals.items() if n > 0 and pooled[s][1] > 0}
    whole = sum(usable.values())
    if whole <= 0:
        return {}
    weights = {s: n / whole for s, n in usable.items()}
    out = {}
    for day, strata in strata_by_day.items():
        present = {s: c for s, c in strata.items() if s in weights and c[1] > 0}
        if sum(weights[s] for s in present) < 0.5:
            continue
        rate = smooth = variance = 0.0
        for s, share in weights.items():
            x, n_eff = present[s][:2] if s in present else pooled[s]
            p = (x + 0.5) / (n_eff + 1)
            rate += share * x / n_eff
            smooth += share * p
            variance += share**2 * p * (1 - p) / n_eff
        n_eff = smooth * (1 - smooth) / variance
        out[day] = (rate * n_eff, n_eff, sum(c[2] for c in present.values()))
    return out


def strata(summary: Mapping, dimension: str, metric: str, counts: Callable) -> dict[str, Counts]:
    """One rate's counts per stratum of ``dimension`` in one night's summary, the untagged rest included
    (``counts`` reads a metric entry, as ``scoring.significance`` does)."""
    whole = counts((summary.get("metrics") or {}).get(metric))
    if whole is None:
        return {}
    out = {}
    for value, entry in ((summary.get("slices") or {}).get(dimension) or {}).items():
        c = counts((entry.get("metrics") or {}).get(metric))
        if c is not None:
            out[value] = c
    rest = tuple(w - sum(c[i] for c in out.values()) for i, w in enumerate(whole))
    if rest[1] > 0.5 and rest[2] > 0:
        out[UNTAGGED] = (min(max(rest[0], 0.0), rest[1]), rest[1], int(rest[2]))
    return out


def _trace_counts(summary: Mapping, dimension: str) -> dict[str, int]:
    values = (summary.get("slices") or {}).get(dimension) or {}
    counts = {value: int(entry.get("n") or 0) for value, entry in values.items()}
    rest = int(summary.get("n") or 0) - sum(counts.values())
    if rest > 0:
        counts[UNTAGGED] = rest
    return counts


def _shares(days: list[dict[str, int]]) -> dict[str, float]:
    totals: dict[str, int] = {}
    for day in days:
        for stratum, n in day.items():
            totals[stratum] = totals.get(stratum, 0) + n
    whole = sum(totals.values())
    return {s: n / whole for s, n in totals.items() if n > 0} if whole else {}

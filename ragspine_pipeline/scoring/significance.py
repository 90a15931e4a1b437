r"""Nightly drop tests of the production rates: which changes are real, and which are noise.

Every night each production rate (compliance, retrieved citations, admissibility, lexical faithfulness,
refusal rate, fabrication) is compared, in every slice and in all traffic, with its own recent past. Three
things make a naive per-rate test page people on most quiet nights, and each is handled here:

**Between-day variation.** A real service's rates move from day to day by more than binomial sampling
explains (traffic mix, load, upstream changes). Each rate is put on Anscombe's variance-stabilising
scale, ``y = asin(sqrt((x + 3/8) / (n + 3/4)))``, where a day's sampling variance is ``v = 1/(4n + 2)``
whatever the rate (Anscombe 1948) and the normal approximation holds even for rare events — a Wald test
on the log-odds with the observed count's variance is tens of times too confident when a rare failure
becomes less rare. The day's value is modelled as ``y_day = μ + u_day + e_day`` with a between-day
effect ``u_day ~ N(0, τ²)`` and sampling noise ``e_day ~ N(0, v)``. τ² is estimated by the
DerSimonian–Laird moment estimator (DerSimonian & Laird 1986, the random-effects estimator of
meta-analysis) over the previous ``variance_window`` nights, pooled over the slices of one dimension
(all traffic is its own group): ``τ² = max(0, (ΣQ − Σ(k − 1)) / Σ(Σw − Σw²/Σw))`` with ``w = 1/v`` and
``Q = Σ w (y − ȳ_w)²`` per slice, over the nights the screen below keeps.

**One bad night must not blind the test for weeks.** A night far off its series (an outage at half
the rate, a broken deploy rolled back the next morning) would, kept in the windows, inflate τ² a
hundredfold and pull the level towards itself for as long as it stays in them (four weeks of
``variance_window``): a real drop a week later would go unseen. So the nights are screened first, by a
stateless, iterated screen (``between_day_variance``): starting from a robust fit — each series'
median night and the τ² at which the group's standardised residuals ``|y − median|/sqrt(v + τ²)`` have
the median absolute value of a standard normal, ``Φ⁻¹(3/4)`` (a MAD estimate, unmoved by up to half the
nights) — a night whose residual exceeds ``SCREEN = 4`` standard deviations ``sqrt(v + τ²)`` is set
aside, τ² is re-estimated by DerSimonian–Laird and the level by the random-effects mean over the kept
nights, and the screen is repeated with them until the kept nights no longer change. The screen is a
trimmed DerSimonian–Laird rather than an M-estimate because on a clean window it changes nothing: a
normal night passes 4 standard deviations with probability 1 − 6·10⁻⁵, so τ² and the level are then
exactly DerSimonian–Laird's and the random-effects mean, with their full efficiency (a median or MAD
alone would need ~1.6–2.7× the nights for the same precision); the robust start is what keeps two or
three aberrant nights from masking one another. Set-aside nights are left out of the level window too
(``set_aside`` counts them), and of the trailing value and n a test reports. A lasting change is an
aberrant night only briefly: as its nights fill the window they move the robust fit (in 8 simulated
histories a lasting 5-point drop alerted on the same nights with and without the screen, in one a night
longer).

**Tonight against the trailing level.** The trailing level is the random-effects mean of the previous
``window`` nights, ``μ̂ = Σ w* y / Σ w*`` with ``w* = 1/(v + τ²)`` and variance ``1/Σ w*``. Tonight's
``y`` is tested one-sided: ``z = (μ̂ − y) / sqrt(v + τ² + 1/Σ w*)`` (sign flipped for rates where higher
is worse), ``p = 1 − Φ(z)``. A slice too small for one night to say much is also tested over its last
``recent_nights`` nights pooled (counts added, between-day variance ``τ²/r``) against the ``window``
nights before them, and over its last ``sustained_nights`` nights against the ``variance_window`` nights
before them: a sustained drop in a small slice, or of a rare failure, shows within a few nights or at
most a week. An earlier night of such a window more than ``SCREEN`` standard deviations from its level
is not pooled (``pooled_nights``): it alerted on its own night, and pooled it would make every window
that holds it look like a drop — one outage would stay an open incident for a week.

**Weekly patterns.** Where a rate's history shows one — its weekend and weekday random-effects levels
over the variance window differ at the two-sided ``WEEKLY_ALPHA`` (1 %), each over at least ``min_days``
nights — the rate is compared day type to day type: τ² is estimated with one level per day type (its
weekend and weekday nights are two series to the estimator) and tonight is compared with the last
``window`` kept nights of its own type within the variance window (``by_day_type``); a pooled window
spanning both types with the mix of both levels, weighted by their shares of its observations.
Otherwise a weekend that differs would look like a drop every week and inflate τ² for every night.

**A moving traffic mix.** Every all-traffic test carries, beside the raw rate, the rate at the
reference mix (``mix_adjusted``, direct standardisation over the dimension whose mix moved most:
``scoring.mix``), tested the same way but outside the night's family. When the raw rate alerts and
its mix-adjusted twin would not have (not rejected at the level the raw test was, or not large enough)
and the mix explains at least half the drop, the alert says "traffic mix changed: <slice> grew from a %
to b %" (``note``).

**Many tests a night.** All the night's tests (metrics × slices × the one- and multi-night windows) are one
family, controlled with the weighted Benjamini–Hochberg procedure (Genovese, Roeder & Wasserman 2006) at
false-discovery rate ``fdr``: all-traffic tests carry ``all_traffic_weight`` times the weight of a slice
test, because all traffic is what most people watch and has the most data, and the all-traffic one-night
test ``all_traffic_tonight_weight`` times that again, because a drop of all traffic is to be caught the
night it happens while the multi-night windows are for what one night cannot show (weights normalised to
mean 1; ``test_weight``). A night's budget is small (``fdr`` 0.02: a quiet night alerts on about one
night in a hundred) and spent where it buys the most.
Each test reports its adjusted p-value (``q_value``); a test is significant when ``q ≤ fdr``. With no real
change every test is a true null, and the procedure then keeps the chance of *any* alert in a night at
or below ``fdr`` (for independent or positively dependent tests, as a slice and all traffic are).

A significant test alerts only when the change is large enough — a real but tiny change pages nobody.
With ``d`` = ``worse_by`` (how much worse, in rate points) and ``f`` the trailing *failure share* (``1 − x``
for a rate where lower is worse, ``x`` where higher is worse; ``d`` is also how much the failure share
grew), it alerts when ``d ≥ min_drop`` or, with a ``min_relative_change`` r set, ``d > 0`` and ``d ≥ r·f``
(the failure share grew by at least r of itself; a share that was 0 and grew counts). The absolute
threshold alone would hide a doubling of a rare failure (2 % → 4 % is worse by exactly the default two
points); the relative one alone would page on a tiny move of a common one. Both can be set per rate
(``effect``). The thresholds only filter significant tests, so the false-discovery guarantee above holds
whatever they are. Rates are tested only when tonight's window and the trailing window
each hold at least ``min_n`` (effective) observations and at least ``min_days`` trailing nights exist;
every other rate is listed as untested with the reason, never silently skipped.

Lexical faithfulness counts claims, and the claims of one answer are not independent: its daily entry
carries an ``effective_n`` (the cluster-robust design effect, ``scoring.production``), and the test uses
``effective_n`` observations at the observed rate instead of the raw claim count.

The error rates are measured by simulation through the whole nightly path in ``bench/bench_drift_alarms.py``
(results in ``bench/RESULTS.md``) and pinned by ``tests/scoring/test_significance.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date, timedelta
from statistics import NormalDist

import numpy as np

from ragspine_pipeline.scoring.drop_settings import DAYS, WORSE_WHEN, DropSettings
from ragspine_pipeline.scoring.mix import Mix, standardised, strata, trace_mix
from ragspine_pipeline.scoring.random_effects import (
    SCREEN,
    between_day_variance,
    variance_stabilised,
    weighted_bh,
)

ALL_TRAFFIC = "all traffic"
# A series' weekend and weekday levels differ (a weekly pattern) when their difference is significant
# at this two-sided level over the variance window.
WEEKLY_ALPHA = 0.01
METHOD = (
    "random-effects test on the arcsine scale (DerSimonian–Laird between-day variance over the nights "
    "a robust 4-sigma screen keeps), "
    "weighted Benjamini–Hochberg over the night's tests"
)


@dataclass(frozen=True)
class MixAdjusted:
    """The all-traffic rate standardised to the reference nights' mix of ``dimension``
    (``scoring.mix``), tested like the raw rate; ``shift`` names the slice whose share moved most."""

    dimension: str
    current: float
    trailing: float | None
    worse_by: float | None
    z: float | None
    p_value: float | None
    shift: str


@dataclass(frozen=True)
class DropTest:
    """One rate of one slice over the last ``nights`` nights against the ``window`` nights before them.

    ``current`` and ``trailing`` are proportions in the metric's own direction (the refusal rate is the
    refusal rate); ``worse_by`` is how much worse tonight is, in rate points (negative: better).
    ``trailing``, ``trailing_n`` and ``trailing_days`` are over the trailing nights the screen kept;
    ``set_aside`` counts the ones it left out.
    """

    metric: str
    slice: str  # "all traffic" or "dimension=value"
    nights: int
    current: float
    current_n: int
    trailing: float | None
    trailing_n: int
    trailing_days: int
    worse_by: float | None
    tau2: float | None  # between-day variance on the variance-stabilised (arcsine) scale
    z: float | None
    p_value: float | None
    q_value: float | None = None  # weighted Benjamini–Hochberg adjusted p-value
    significant: bool = False
    alert: bool = False
    reason: str = "tested"  # "tested", or why not
    set_aside: int = 0  # trailing nights of the level window left out as aberrant
    by_day_type: bool = False  # compared with trailing nights of its own day type (a weekly pattern)
    pooled_nights: int = 1  # of the window's nights, those pooled (an earlier aberrant night is not)
    mix_adjusted: MixAdjusted | None = None  # all traffic only: the rate at the reference traffic mix
    note: str | None = None  # "traffic mix changed: …" when only the raw all-traffic rate alerts

    @property
    def tested(self) -> bool:
        return self.p_value is not None

    @property
    def key(self) -> str:
        """What an alert about this rate is de-duplicated by (the window does not matter)."""
        return f"{self.metric}@{self.slice}"

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in ("current", "trailing", "worse_by"):
            out[name] = None if out[name] is None else round(out[name], 4)
        for name in ("tau2", "z"):
            out[name] = None if out[name] is None else round(out[name], 4)
        for name in ("p_value", "q_value"):
            out[name] = None if out[name] is None else float(f"{out[name]:.4g}")
        adjusted = out["mix_adjusted"]
        if adjusted is not None:
            for name in ("current", "trailing", "worse_by", "z"):
                adjusted[name] = None if adjusted[name] is None else round(adjusted[name], 4)
            p = adjusted["p_value"]
            adjusted["p_value"] = None if p is None else float(f"{p:.4g}")
        return out


@dataclass(frozen=True)
class NightTests:
    """Every drop test of one night, the settings they ran with, and which of them alert."""

    day: str
    tests: list[DropTest]
    settings: DropSettings

    @property
    def tested(self) -> list[DropTest]:
        return [t for t in self.tests if t.tested]

    @property
    def alerts(self) -> list[DropTest]:
        """The alerting tests, one per rate and slice (the smallest q-value when several windows alert),
        worst first."""
        best: dict[str, DropTest] = {}
        for test in self.tests:
            if test.alert and (test.key not in best or test.q_value < best[test.key].q_value):
                best[test.key] = test
        return sorted(best.values(), key=lambda t: (t.q_value, -t.worse_by, t.key))

    def to_dict(self) -> dict:
        tested = self.tested
        return {
            "method": METHOD,
            **self.settings.model_dump(),
            "tested": len(tested),
            "untested": len(self.tests) - len(tested),
            "significant": sum(t.significant for t in tested),
            "alerts": [t.to_dict() for t in self.alerts],
            "tests": [t.to_dict() for t in sorted(self.tests, key=_display_order)],
        }


def _display_order(test: DropTest) -> tuple:
    return (test.p_value is None, test.q_value if test.q_value is not None else 2.0, test.key, test.nights)


# -- the tests -------------------------------------------------------------------------------------


def drop_tests(today: dict, history: Sequence[dict], settings: DropSettings | None = None) -> NightTests:
    """Every rate of ``today`` (a daily summary of ``scoring.production`` with its ``day``, overall and per
    slice) tested against the earlier summaries in ``history`` (any order; today and later days ignored),
    with the night's error control applied. See the module docstring for the model."""
    settings = settings or DropSettings()
    day = date.fromisoformat(today["day"])
    oldest = (day - timedelta(days=settings.history_nights)).isoformat()
    by_day = {date.fromisoformat(d["day"]): d for d in history if oldest <= d.get("day", "") < today["day"]}
    by_day[day] = today
    reference = [day - timedelta(days=back) for back in range(1, settings.window + 1)]
    mix = trace_mix(today, [by_day[d] for d in reference if d in by_day])
    # The series do not depend on the window: read once, tested over each window.
    series = list(_series(today, by_day))
    adjusted = {}
    if mix is not None:
        for s in series:
            if s.slice == ALL_TRAFFIC:
                adjusted[s.metric] = _adjusted_series(s.metric, by_day, reference, mix)
    tests = []
    for nights in settings.windows:
        first = day - timedelta(days=nights)  # the last trailing night
        window = _Window(
            nights=nights,
            recent=[day - timedelta(days=back) for back in range(nights)],
            level=[first - timedelta(days=back) for back in range(_level_nights(nights, settings))],
            spread=[first - timedelta(days=back) for back in range(settings.variance_window)],
        )
        tests += _window_tests(series, adjusted, window, settings, mix)
    tests = _control(tests, settings)
    return NightTests(day=today["day"], tests=tests, settings=settings)


def _level_nights(nights: int, settings: DropSettings) -> int:
    """Trailing nights of a window's level: ``window``; for the sustained window (longer than the
    recent one) the whole ``variance_window``, a week against the four weeks before it."""
    longer = nights > settings.recent_nights and nights == settings.sustained_nights
    return settings.variance_window if longer else settings.window


@dataclass(frozen=True)
class _Window:
    nights: int  # tonight alone or the last few nights pooled
    recent: list[date]  # those nights
    level: list[date]  # the trailing nights the level is estimated from, most recent first
    spread: list[date]  # the trailing nights τ² (and a weekly pattern) is estimated from


@dataclass(frozen=True)
class _Series:
    metric: str
    group: str  # what tau² is pooled over: all traffic, or one dimension
    slice: str
    counts: dict[date, tuple[float, float, int]]  # day -> (worse-is-lower successes, effective n, raw n)


@dataclass(frozen=True)
class _Fit:
    """A group's between-day variance, and per series the nights set aside and whether its reference is
    by day type."""

    tau2: float
    aberrant: list[set[date]]
    weekly: list[bool]


def _series(today: dict, by_day: dict[date, dict]) -> Iterator[_Series]:
    """Every (metric, slice) rate of today, with its counts on every day that has it."""
    for dimension, value, metrics in _rates(today):
        slice_name = ALL_TRAFFIC if dimension is None else f"{dimension}={value}"
        for metric, worse in WORSE_WHEN.items():
            if entry_counts(metrics.get(metric), worse) is None:
                continue
            counts = {}
            for day, summary in by_day.items():
                entry = entry_counts(_slice_metrics(summary, dimension, value).get(metric), worse)
                if entry is not None:
                    counts[day] = entry
            yield _Series(metric, ALL_TRAFFIC if dimension is None else dimension, slice_name, counts)


def _window_tests(
    series: list[_Series],
    adjusted: dict[str, _Series],
    window: _Window,
    settings: DropSettings,
    mix: Mix | None,
) -> list[DropTest]:
    groups: dict[tuple[str, str], list[_Series]] = {}
    for s in series:
        groups.setdefault((s.metric, s.group), []).append(s)
    tests = []
    for members in groups.values():
        fit = _fit(members, window.spread, settings)
        for i, s in enumerate(members):
            test = _test(s, window, fit, i, settings)
            if s.slice == ALL_TRAFFIC and mix is not None:
                test = replace(test, mix_adjusted=_mix_adjusted(adjusted[s.metric], window, settings, mix))
            tests.append(test)
    return tests


def _adjusted_series(metric: str, by_day: dict[date, dict], reference: list[date], mix: Mix) -> _Series:
    """The all-traffic rate of every night at the ``reference`` nights' mix (``scoring.mix``)."""
    worse = WORSE_WHEN[metric]
    per_day = {
        d: strata(summary, mix.dimension, metric, lambda entry: entry_counts(entry, worse))
        for d, summary in by_day.items()
    }
    return _Series(metric, "mix-adjusted", ALL_TRAFFIC, standardised(per_day, reference))


def _mix_adjusted(adjusted: _Series, window: _Window, settings: DropSettings, mix: Mix) -> MixAdjusted | None:
    """The mix-adjusted rate (:func:`_adjusted_series`) tested over ``window`` like any rate."""
    if not adjusted.counts:
        return None
    test = _test(adjusted, window, _fit([adjusted], window.spread, settings), 0, settings)
    return MixAdjusted(
        dimension=mix.dimension,
        current=test.current,
        trailing=test.trailing,
        worse_by=test.worse_by,
        z=test.z,
        p_value=test.p_value,
        shift=mix.shift(),
    )


def _fit(members: list[_Series], days: list[date], settings: DropSettings) -> _Fit:
    """The group's τ² and screen, each series by day type where its history shows a weekly pattern (its
    weekend and weekday levels differ at ``WEEKLY_ALPHA``, each type over at least ``min_days`` nights)."""
    plain = [False] * len(members)
    tau2, aberrant = _screened_tau2(members, days, plain, settings)
    if settings.weekly == "off":
        return _Fit(tau2, aberrant, plain)
    split_tau2, split_aberrant = _screened_tau2(members, days, [True] * len(members), settings)
    weekly = [
        _weekly_pattern(s, days, split_aberrant[i], split_tau2, settings) for i, s in enumerate(members)
    ]
    if not any(weekly):
        return _Fit(tau2, aberrant, plain)
    tau2, aberrant = _screened_tau2(members, days, weekly, settings)
    return _Fit(tau2, aberrant, weekly)


def _screened_tau2(
    members: list[_Series], days: list[date], by_type: list[bool], settings: DropSettings
) -> tuple[float, list[set[date]]]:
    """The group's between-day variance over ``days`` and, per series, the nights the screen set aside;
    a series ``by_type`` is two series to the estimator (its weekend nights and its weekday nights, each
    with its own level)."""
    rows, owners = [], []
    for i, s in enumerate(members):
        for kind in ("weekend", "weekday") if by_type[i] else (None,):
            rows.append([s.counts.get(d) if kind in (None, _day_type(d, settings)) else None for d in days])
            owners.append(i)
    x = np.array([[c[0] if c else np.nan for c in row] for row in rows], dtype=float)
    n = np.array([[c[1] if c else np.nan for c in row] for row in rows], dtype=float)
    y, v = variance_stabilised(x, n)
    tau2, kept = between_day_variance(y, v)
    aberrant: list[set[date]] = [set() for _ in members]
    for r, i in enumerate(owners):
        present = np.isfinite(y[r])
        aberrant[i] |= {d for d, p, keep in zip(days, present, kept[r], strict=True) if p and not keep}
    return tau2, aberrant


def _weekly_pattern(
    s: _Series, days: list[date], aberrant: set[date], tau2: float, settings: DropSettings
) -> bool:
    """Do the series' weekend and weekday random-effects levels over ``days`` differ at ``WEEKLY_ALPHA``?"""
    levels = []
    for kind in ("weekend", "weekday"):
        kept = [d for d in days if d in s.counts and d not in aberrant and _day_type(d, settings) == kind]
        if len(kept) < settings.min_days:
            return False
        y, v = variance_stabilised(*_arrays(s, kept))
        w = 1 / (v + tau2)
        levels.append((float(np.sum(w * y) / np.sum(w)), float(1 / np.sum(w))))
    (a, var_a), (b, var_b) = levels
    return bool(abs(a - b) / np.sqrt(var_a + var_b) > NormalDist().inv_cdf(1 - WEEKLY_ALPHA / 2))


def _day_type(day: date, settings: DropSettings) -> str:
    return "weekend" if DAYS[day.weekday()] in settings.weekend else "weekday"


def _test(s: _Series, window: _Window, fit: _Fit, i: int, settings: DropSettings) -> DropTest:
    """Tonight's window of ``s`` against its trailing level: of the ``level`` nights the screen kept, or,
    with a weekly pattern, of the last ``window`` kept nights of each day type tonight's window holds
    (weighted by their share of tonight's observations)."""
    worse, tau2, aberrant, weekly = WORSE_WHEN[s.metric], fit.tau2, fit.aberrant[i], fit.weekly[i]
    references = {
        kind: _reference(s, window, aberrant, kind, settings)
        for kind in (("weekend", "weekday") if weekly else (None,))
    }
    levels = {kind: _level(s, days, tau2) for kind, (days, _) in references.items()}
    have = [s.counts.get(d) for d in window.recent]
    pooled = _pooled(s, window, tau2, levels, weekly, settings) if all(have) else window.recent
    x_now = sum(s.counts[d][0] for d in pooled) if all(have) else 0.0
    n_now = sum(s.counts[d][1] for d in pooled) if all(have) else 0.0
    shares: dict[str | None, float] = {}
    for d in pooled:
        kind = _day_type(d, settings) if weekly else None
        shares[kind] = shares.get(kind, 0.0) + (s.counts[d][1] if all(have) else 1.0)
    shares = {kind: share / sum(shares.values()) for kind, share in shares.items()}
    kept = {kind: references[kind][0] for kind in shares}
    used = sorted({d for days in kept.values() for d in days})
    trailing_parts = [(shares[k], _arrays(s, days)) for k, days in kept.items()]
    n_base = sum(float(n.sum()) for _, (_, n) in trailing_parts)
    trailing = None
    if all(n.sum() > 0 for _, (_, n) in trailing_parts):
        trailing = _own_direction(sum(a * float(x.sum() / n.sum()) for a, (x, n) in trailing_parts), worse)
    current = _own_direction(x_now / n_now if n_now else 0.0, worse)
    common = dict(
        metric=s.metric,
        slice=s.slice,
        nights=window.nights,
        current=current,
        current_n=sum(s.counts[d][2] for d in pooled if d in s.counts),
        trailing=trailing,
        trailing_n=sum(s.counts[d][2] for d in used),
        trailing_days=len(used),
        worse_by=None
        if trailing is None
        else (trailing - current if worse == "lower" else current - trailing),
        tau2=tau2,
        set_aside=sum(references[kind][1] for kind in shares),
        by_day_type=weekly,
        pooled_nights=len(pooled),
    )
    fewest = min(len(days) for days in kept.values())
    reason = None
    if not all(have):
        reason = f"{sum(1 for c in have if not c)} of the last {window.nights} night(s) missing"
    elif fewest < settings.min_days:
        of_type = " of its day type" if weekly else ""
        reason = f"{fewest} trailing night(s){of_type}, at least {settings.min_days} needed"
    elif n_now < settings.min_n or n_base < settings.min_n:
        reason = (
            f"too few observations (tonight {n_now:.0f}, trailing {n_base:.0f}; "
            f"at least {settings.min_n} each)"
        )
    if reason is not None:
        return DropTest(**common, z=None, p_value=None, reason=reason)
    mu = sum(shares[k] * levels[k][0] for k in shares)
    variance = sum(shares[k] ** 2 * levels[k][1] for k in shares)
    y_now, v_now = variance_stabilised(np.array([x_now]), np.array([n_now]))
    z = (mu - float(y_now[0])) / np.sqrt(float(v_now[0]) + tau2 / len(pooled) + variance)
    return DropTest(**common, z=float(z), p_value=0.5 * math.erfc(float(z) / math.sqrt(2)))  # 1 − Φ(z)


def _reference(
    s: _Series, window: _Window, aberrant: set[date], kind: str | None, settings: DropSettings
) -> tuple[list[date], int]:
    """The trailing nights a level is estimated from, and how many the screen set aside among them: the
    ``level`` nights kept, or of one day type (``kind``) the last ``window`` kept ones within ``spread``."""
    nights = window.level if kind is None else window.spread
    span = [d for d in nights if d in s.counts and kind in (None, _day_type(d, settings))]
    kept = [d for d in span if d not in aberrant][: len(window.level)]
    oldest = kept[-1] if kind is not None and kept else None  # older nights of the type are not used
    return kept, sum(d in aberrant and (oldest is None or d >= oldest) for d in span)


def _level(s: _Series, days: list[date], tau2: float) -> tuple[float, float] | None:
    """The random-effects mean of ``days`` on the arcsine scale and its variance (None: no nights)."""
    x, n = _arrays(s, days)
    if not len(x):
        return None
    y, v = variance_stabilised(x, n)
    w = 1 / (v + tau2)
    return float(np.sum(w * y) / np.sum(w)), float(1 / np.sum(w))


def _pooled(
    s: _Series,
    window: _Window,
    tau2: float,
    levels: dict[str | None, tuple[float, float] | None],
    weekly: bool,
    settings: DropSettings,
) -> list[date]:
    """The window's nights that are pooled: tonight, and each earlier night of the window unless it is
    more than ``SCREEN`` standard deviations from its level — an outage alerted on its own night, and
    pooled it would make every multi-night window that holds it look like a drop for days."""
    pooled = [window.recent[0]]
    for d in window.recent[1:]:
        level = levels.get(_day_type(d, settings) if weekly else None)
        if level is not None:
            y, v = variance_stabilised(np.array([s.counts[d][0]]), np.array([s.counts[d][1]]))
            if abs(float(y[0]) - level[0]) > SCREEN * np.sqrt(float(v[0]) + tau2 + level[1]):
                continue
        pooled.append(d)
    return pooled


def _control(tests: list[DropTest], settings: DropSettings) -> list[DropTest]:
    """Weighted Benjamini–Hochberg over the tested ones: q-values, significance and alerts."""
    tested = [i for i, t in enumerate(tests) if t.tested]
    if not tested:
        return tests
    p = np.array([tests[i].p_value for i in tested])
    weights = np.array([test_weight(tests[i].slice, tests[i].nights, settings) for i in tested])
    q = weighted_bh(p, weights)
    out = list(tests)
    for i, q_value in zip(tested, q, strict=True):
        test = tests[i]
        significant = bool(q_value <= settings.fdr)
        big_enough = settings.large_enough(test)
        out[i] = replace(
            test,
            q_value=float(q_value),
            significant=significant,
            alert=significant and big_enough,
            reason=test.reason if big_enough or not significant else _too_small(test, settings),
        )
    # The night's rejection threshold on p / weight (weights normalised to mean 1, as in the procedure):
    # would the mix-adjusted twin of an alerting all-traffic test have been rejected at it?
    normalised = weights * len(weights) / weights.sum()
    rejected = [p_i / w_i for p_i, w_i, i in zip(p, normalised, tested, strict=True) if out[i].significant]
    threshold = max(rejected, default=0.0)
    for i, w_i in zip(tested, normalised, strict=True):
        if out[i].alert and out[i].mix_adjusted is not None:
            out[i] = replace(out[i], note=_mix_note(out[i], threshold * w_i, settings))
    return out


def test_weight(slice_name: str, nights: int, settings: DropSettings) -> float:
    """A test's weight in the night's procedure (before normalising), by its slice and window: 1 for a
    slice; ``all_traffic_weight`` for all traffic, times ``all_traffic_tonight_weight`` for its one-night
    test; times ``sustained_weight`` for the sustained window."""
    weight = 1.0
    if slice_name == ALL_TRAFFIC:
        weight = settings.all_traffic_weight
        if nights == 1:
            weight *= settings.all_traffic_tonight_weight
    sustained = nights == settings.sustained_nights and nights > settings.recent_nights
    return weight * settings.sustained_weight if sustained else weight


def _mix_note(test: DropTest, level: float, settings: DropSettings) -> str | None:
    """ "traffic mix changed: …" when the all-traffic rate alerts but its mix-adjusted twin would not (at
    the p-value ``level`` the raw test was rejected at, and large enough) and the mix accounts for at
    least half of the drop."""
    adjusted = test.mix_adjusted
    if adjusted.worse_by is None or adjusted.p_value is None:
        return None
    alerts = adjusted.p_value <= level and settings.large_enough(
        replace(test, current=adjusted.current, trailing=adjusted.trailing, worse_by=adjusted.worse_by)
    )
    if alerts or test.worse_by - adjusted.worse_by < test.worse_by / 2:
        return None
    return f"traffic mix changed: {adjusted.shift}"


def _too_small(test: DropTest, settings: DropSettings) -> str:
    min_drop, relative = settings.thresholds(test.metric)
    reason = f"significant, but worse by less than min_drop {min_drop:g}"
    if relative is not None:
        reason += f" and its failure share grew by less than min_relative_change {relative:g} of itself"
    return reason


# -- reading daily summaries -----------------------------------------------------------------------


def _own_direction(rate: float, worse: str) -> float:
    """Counts are kept as "lower is worse"; a higher-is-worse rate is shown as itself."""
    return rate if worse == "lower" else 1.0 - rate


def _arrays(s: _Series, days: list[date]) -> tuple[np.ndarray, np.ndarray]:
    present = [s.counts[d] for d in days if d in s.counts]
    return np.array([c[0] for c in present], dtype=float), np.array([c[1] for c in present], dtype=float)


def _rates(summary: dict):
    yield None, None, summary.get("metrics", {})
    for dimension, values in (summary.get("slices") or {}).items():
        for value, entry in values.items():
            yield dimension, value, entry.get("metrics", {})


def _slice_metrics(summary: dict, dimension: str | None, value: str | None) -> dict:
    if dimension is None:
        return summary.get("metrics", {})
    return ((summary.get("slices") or {}).get(dimension) or {}).get(value, {}).get("metrics", {})


def entry_counts(entry: dict | None, worse: str) -> tuple[float, float, int] | None:
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

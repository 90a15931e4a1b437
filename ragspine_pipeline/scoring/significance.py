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
``scoring.mix``; a slice that disappeared counts at its reference rate). When tonight's mix differs from
the reference nights' by at least ``mix_shift`` of the traffic (total variation distance), the rate at
the usual mix is a test of the night's family too (slice ``all traffic at the usual mix``; it and the raw
all-traffic test share the all-traffic test's weight): a real drop behind a mix change is a drop, and a
drop that only the usual mix shows (every slice worse while the worse slices lose traffic) alerts at
all. An alerting all-traffic test then says both: "traffic mix changed (slice=s0 grew from 12.5 % to
36.0 %) and the rate at the usual mix fell 2.9 points" when its twin alerts too, "traffic mix changed:
…" when the mix accounts for at least half of the drop and its twin does not alert (``note``). Below
``mix_shift`` the twin is tested outside the family, at the level the raw test was rejected at, for the
note alone.

**Correlated nights.** Night effects often come in runs (a degraded upstream for a few days). Each
night the residuals' lag-1 autocovariance over the variance window, pooled over the night's rates, less
one standard error, gives the correlation ρ allowed for (0 for an uncorrelated history in most nights);
τ² is scaled up by ``(k − 1)/(k − f)`` (DerSimonian–Laird's deviations from the window's own mean hold
less of a correlated variance; ``f = 1 + 2 Σ (1 − j/k) ρ^j``), and the variance of tonight's window
against its level is ``v + Σ a² v + τ² c'Rc`` with ``R = ρ^|i − j|`` between nights i and j and ``c`` the
nights' weights (+ tonight's window, − the level's): with ρ = 0 the independent formula above. A pooled
window of correlated nights varies more than its nights' count suggests; a level right before tonight
moves with it.

**Many tests a night.** All the night's tests (metrics × slices × the one- and multi-night windows) are
controlled together at false-discovery rate ``fdr``, in two stages (``scoring.night_family``): first the
rates (every test of one metric is one group), then the tests of the rates that moved — weighted
Benjamini–Hochberg at each stage (Genovese, Roeder & Wasserman 2006; Benjamini & Bogomolov 2014).
All-traffic tests carry ``all_traffic_weight`` times the weight of a slice test, because all traffic is
what most people watch and has the most data, and the all-traffic one-night test
``all_traffic_tonight_weight`` times that again, because a drop of all traffic is to be caught the
night it happens while the multi-night windows are for what one night cannot show (weights normalised to
mean 1; ``test_weight``). A night's budget is small (``fdr`` 0.02: a quiet night alerts on about one
night in a hundred) and spent where it buys the most. With one real change the two stages are the flat
procedure exactly; an outage, which drops one rate in every slice and window, no longer lowers the bar
for the rates it did not touch. Each test reports its adjusted p-value (``q_value``); a test is
significant when ``q ≤ fdr``. With no real change every test is a true null, and the chance of *any*
alert in a night stays at or below ``fdr`` (for independent or positively dependent tests, as a slice
and all traffic are).

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

**Incidents are judged against the level they dropped from.** Tonight's tests compare with the
trailing nights, which learn a lasting drop within weeks: once they have, the drop no longer shows
against them. So a rate of an open incident (``incidents``: the :class:`FrozenLevel` its opening test
measured, held fixed) is also tested against that level every night (``returns``): pooled over as many
nights as the opening test pooled, ``z = (level − y) / sqrt(v + τ²/r + var(level))``, and *back* when
``z ≤ recovery_sd`` (the alerts' incident logic closes an incident after two such nights running). A
level a person accepted as the new one (``accepted``: a rate and the night its incident opened) is the
rate's history from that night on: its earlier nights are left out of its series.

The error rates are measured by simulation through the whole nightly path in ``bench/bench_drift_alarms.py``
(results in ``bench/RESULTS.md``) and pinned by ``tests/scoring/test_significance.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date, timedelta

from ragspine_pipeline.scoring.drop_model import Window, fit, night_rho, return_test, test
from ragspine_pipeline.scoring.drop_results import (
    METHOD,
    DropTest,
    FrozenLevel,
    MixAdjusted,
    NightTests,
    ReturnTest,
)
from ragspine_pipeline.scoring.drop_series import (
    ALL_TRAFFIC,
    USUAL_MIX,
    Series,
    adjusted_series,
    entry_counts,
    read_series,
)
from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.mix import Mix, trace_mix
from ragspine_pipeline.scoring.night_family import control, test_weight

__all__ = [
    "ALL_TRAFFIC",
    "METHOD",
    "USUAL_MIX",
    "DropTest",
    "FrozenLevel",
    "MixAdjusted",
    "NightTests",
    "ReturnTest",
    "drop_tests",
    "entry_counts",
    "test_weight",
]


def drop_tests(
    today: dict,
    history: Sequence[dict],
    settings: DropSettings | None = None,
    incidents: Mapping[str, FrozenLevel] | None = None,
    accepted: Mapping[str, str] | None = None,
) -> NightTests:
    """Every rate of ``today`` (a daily summary of ``scoring.production`` with its ``day``, overall and per
    slice) tested against the earlier summaries in ``history`` (any order; today and later days ignored),
    with the night's error control applied; and every rate of the open ``incidents`` (by
    ``metric@slice``) against the level it dropped from. ``accepted`` (``metric@slice`` → the ISO night
    from which a person accepted its level) leaves a rate's earlier nights out. See the module
    docstring for the model."""
    settings = settings or DropSettings()
    day = date.fromisoformat(today["day"])
    oldest = (day - timedelta(days=settings.history_nights)).isoformat()
    by_day = {date.fromisoformat(d["day"]): d for d in history if oldest <= d.get("day", "") < today["day"]}
    by_day[day] = today
    reference = [day - timedelta(days=back) for back in range(1, settings.window + 1)]
    mix = trace_mix(today, [by_day[d] for d in reference if d in by_day])
    since = {key: date.fromisoformat(first) for key, first in (accepted or {}).items()}

    def own(s: Series) -> Series:
        return s.since(since[s.key]) if s.key in since else s

    # The series do not depend on the window: read once, tested over each window.
    series = [own(s) for s in read_series(today, by_day)]
    adjusted = {}
    if mix is not None:
        for s in series:
            if s.slice == ALL_TRAFFIC:
                adjusted[s.metric] = own(adjusted_series(s.metric, by_day, reference, mix))
    moved = mix is not None and mix.moved >= settings.mix_shift
    tests = []
    for nights in settings.windows:
        window = Window.of(day, nights, _level_nights(nights, settings), settings.variance_window)
        tests += _window_tests(series, adjusted, window, settings, mix if moved else None, mix)
    tests = control(tests, settings, mix)
    by_key = {s.key: s for s in series} | {s.key: s for s in adjusted.values()}
    returns = [
        return_test(by_key.get(key), level, day, settings) for key, level in sorted((incidents or {}).items())
    ]
    return NightTests(day=today["day"], tests=tests, settings=settings, returns=returns)


def _level_nights(nights: int, settings: DropSettings) -> int:
    """Trailing nights of a window's level: ``window``; for the sustained window (longer than the
    recent one) the whole ``variance_window``, a week against the four weeks before it."""
    longer = nights > settings.recent_nights and nights == settings.sustained_nights
    return settings.variance_window if longer else settings.window


def _window_tests(
    series: list[Series],
    adjusted: dict[str, Series],
    window: Window,
    settings: DropSettings,
    moved: Mix | None,
    mix: Mix | None,
) -> list[DropTest]:
    """Every series tested over ``window``; each all-traffic test with its rate at the usual mix
    (``mix_adjusted``), and that rate a test of its own when the mix ``moved``."""
    groups: dict[tuple[str, str], list[Series]] = {}
    for s in series:
        groups.setdefault((s.metric, s.group), []).append(s)
    fits = {key: fit(members, window.spread, settings) for key, members in groups.items()}
    rho = night_rho(fits.values())
    tests = []
    for key, members in groups.items():
        for i, s in enumerate(members):
            result = test(s, window, fits[key], i, settings, rho)
            twin = adjusted.get(s.metric) if s.slice == ALL_TRAFFIC and mix is not None else None
            if twin is not None and twin.counts:
                at_mix = test(twin, window, fit([twin], window.spread, settings), 0, settings, rho)
                result = replace(result, mix_adjusted=_mix_adjusted(at_mix, mix))
                if moved is not None:
                    tests.append(at_mix)
            tests.append(result)
    return tests


def _mix_adjusted(at_mix: DropTest, mix: Mix) -> MixAdjusted:
    """What an all-traffic test carries of its rate at the usual mix."""
    return MixAdjusted(
        dimension=mix.dimension,
        current=at_mix.current,
        trailing=at_mix.trailing,
        worse_by=at_mix.worse_by,
        z=at_mix.z,
        p_value=at_mix.p_value,
        shift=mix.shift(),
    )

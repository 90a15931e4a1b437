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
nights before them: a sustained drop in a small slice shows within a few nights.

**Many tests a night.** All the night's tests (metrics × slices × the one- and multi-night windows) are one
family, controlled with the weighted Benjamini–Hochberg procedure (Genovese, Roeder & Wasserman 2006) at
false-discovery rate ``fdr``: all-traffic tests carry ``all_traffic_weight`` times the weight of a slice
test (weights normalised to mean 1), because all traffic is what most people watch and has the most data.
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

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date, timedelta

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from ragspine_pipeline.metrics import family
from ragspine_pipeline.scoring.random_effects import (
    between_day_variance,
    variance_stabilised,
    weighted_bh,
)

# Every production proportion, and which way it worsens (the count of fabricating refusals by its rate
# among refusals), from the registry (``ragspine_pipeline.metrics``).
WORSE_WHEN = {
    m.name: "higher" if m.lower_is_better else "lower"
    for m in family("production")
    if m.kind in ("rate", "count")
}
ALL_TRAFFIC = "all traffic"
METHOD = (
    "random-effects test on the arcsine scale (DerSimonian–Laird between-day variance over the nights "
    "a robust 4-sigma screen keeps), "
    "weighted Benjamini–Hochberg over the night's tests"
)


class EffectThresholds(BaseModel):
    """One rate's own effect thresholds (``production: {effect: {<rate>: ...}}``); a key left out takes the
    default of the section, ``min_relative_change: null`` turns the relative threshold off for the rate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_drop: float | None = Field(default=None, strict=True, ge=0, le=1, allow_inf_nan=False)
    min_relative_change: float | None = Field(default=None, strict=True, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _given(self) -> EffectThresholds:
        if not self.model_fields_set:
            raise ValueError("give min_drop or min_relative_change (or both)")
        if "min_drop" in self.model_fields_set and self.min_drop is None:
            raise ValueError("min_drop must be a number (leave it out to use the section's)")
        return self


class DropSettings(BaseModel):
    """How the nightly drop tests are run (the ``production:`` section of the gates config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fdr: float = Field(
        default=0.03, gt=0, lt=1, strict=True, description="false-discovery rate over the night's tests"
    )
    min_drop: float = Field(
        default=0.02,
        strict=True,
        ge=0,
        le=1,
        description="smallest worsening that alerts (0.02: two rate points)",
    )
    min_relative_change: float | None = Field(
        default=0.5,
        strict=True,
        ge=0,
        allow_inf_nan=False,
        description="or smallest growth of the failure share that alerts, relative to itself (0.5: by half; "
        "null: off)",
    )
    effect: dict[str, EffectThresholds] = Field(
        default_factory=dict, description="per-rate min_drop / min_relative_change overriding the above"
    )
    window: int = Field(
        default=14, ge=1, strict=True, description="trailing nights the level is estimated from"
    )
    variance_window: int = Field(
        default=28,
        ge=2,
        strict=True,
        description="trailing nights the between-day variance is estimated from",
    )
    recent_nights: int = Field(
        default=3,
        ge=1,
        strict=True,
        description="nights pooled by the multi-night test (1: one-night tests only)",
    )
    min_days: int = Field(
        default=5, ge=2, strict=True, description="trailing nights needed before a rate is tested"
    )
    min_n: int = Field(default=100, ge=1, strict=True, description="observations needed tonight and trailing")
    all_traffic_weight: float = Field(
        default=4.0,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="weight of an all-traffic test relative to a slice test",
    )

    @field_validator("effect")
    @classmethod
    def _known_rates(cls, effect: dict[str, EffectThresholds]) -> dict[str, EffectThresholds]:
        unknown = sorted(set(effect) - set(WORSE_WHEN))
        if unknown:
            raise ValueError(
                f"unknown production rate {unknown[0]!r}; the rates tested nightly: {', '.join(WORSE_WHEN)}"
            )
        return effect

    @field_serializer("effect")
    def _as_given(self, effect: dict[str, EffectThresholds]) -> dict[str, dict]:
        # Only the keys a rate sets: a key left out inherits, so a dump must read back the same.
        return {metric: own.model_dump(exclude_unset=True) for metric, own in effect.items()}

    def thresholds(self, metric: str) -> tuple[float, float | None]:
        """``(min_drop, min_relative_change)`` for ``metric``: its own ``effect`` entry, else the defaults."""
        own = self.effect.get(metric)
        if own is None:
            return self.min_drop, self.min_relative_change
        given = own.model_fields_set
        return (
            own.min_drop if "min_drop" in given else self.min_drop,
            own.min_relative_change if "min_relative_change" in given else self.min_relative_change,
        )

    def large_enough(self, test: DropTest) -> bool:
        """Is the change of ``test`` big enough to alert when significant: worse by at least ``min_drop``,
        or its failure share grew (``worse_by > 0``) by at least ``min_relative_change`` of the trailing
        failure share (the module docstring)?"""
        if test.worse_by is None or test.trailing is None:
            return False
        min_drop, relative = self.thresholds(test.metric)
        if test.worse_by >= min_drop:
            return True
        failure_share = test.trailing if WORSE_WHEN[test.metric] == "higher" else 1.0 - test.trailing
        return relative is not None and test.worse_by > 0 and test.worse_by >= relative * failure_share

    @model_validator(mode="after")
    def _windows(self) -> DropSettings:
        if self.variance_window < self.window:
            raise ValueError("variance_window must be at least window")
        if self.min_days > self.window:
            raise ValueError("min_days cannot exceed window")
        return self


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
        """The alerting tests, one per rate and slice (the smallest q-value when both windows alert),
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
    oldest = (day - timedelta(days=settings.variance_window + settings.recent_nights)).isoformat()
    by_day = {date.fromisoformat(d["day"]): d for d in history if oldest <= d.get("day", "") < today["day"]}
    by_day[day] = today
    windows = [1] if settings.recent_nights == 1 else [1, settings.recent_nights]
    tests = []
    for nights in windows:
        recent = [day - timedelta(days=back) for back in range(nights)]
        first = day - timedelta(days=nights)  # the last trailing night
        level = [first - timedelta(days=back) for back in range(settings.window)]
        spread = [first - timedelta(days=back) for back in range(settings.variance_window)]
        tests += _window_tests(today, by_day, nights, recent, level, spread, settings)
    tests = _control(tests, settings)
    return NightTests(day=today["day"], tests=tests, settings=settings)


@dataclass(frozen=True)
class _Series:
    metric: str
    group: str  # what tau² is pooled over: all traffic, or one dimension
    slice: str
    counts: dict[date, tuple[float, float, int]]  # day -> (worse-is-lower successes, effective n, raw n)


def _series(today: dict, by_day: dict[date, dict]) -> Iterator[_Series]:
    """Every (metric, slice) rate of today, with its counts on every day that has it."""
    for dimension, value, metrics in _rates(today):
        slice_name = ALL_TRAFFIC if dimension is None else f"{dimension}={value}"
        for metric, worse in WORSE_WHEN.items():
            if _counts(metrics.get(metric), worse) is None:
                continue
            counts = {}
            for day, summary in by_day.items():
                entry = _counts(_slice_metrics(summary, dimension, value).get(metric), worse)
                if entry is not None:
                    counts[day] = entry
            yield _Series(metric, ALL_TRAFFIC if dimension is None else dimension, slice_name, counts)


def _window_tests(
    today: dict,
    by_day: dict[date, dict],
    nights: int,
    recent: list[date],
    level: list[date],
    spread: list[date],
    settings: DropSettings,
) -> list[DropTest]:
    series = list(_series(today, by_day))
    groups: dict[tuple[str, str], list[_Series]] = {}
    for s in series:
        groups.setdefault((s.metric, s.group), []).append(s)
    tests = []
    for members in groups.values():
        tau2, aberrant = _screened_tau2(members, spread)
        tests += [_test(s, nights, recent, level, tau2, aberrant[i], settings) for i, s in enumerate(members)]
    return tests


def _screened_tau2(members: list[_Series], days: list[date]) -> tuple[float, list[set[date]]]:
    """The group's between-day variance over ``days`` and, per series, the nights the screen set aside."""
    counts = [[s.counts.get(d) for d in days] for s in members]
    x = np.array([[c[0] if c else np.nan for c in row] for row in counts], dtype=float)
    n = np.array([[c[1] if c else np.nan for c in row] for row in counts], dtype=float)
    y, v = variance_stabilised(x, n)
    tau2, kept = between_day_variance(y, v)
    aberrant = [
        {d for d, present, keep in zip(days, np.isfinite(y[i]), kept[i], strict=True) if present and not keep}
        for i in range(len(members))
    ]
    return tau2, aberrant


def _test(
    s: _Series,
    nights: int,
    recent: list[date],
    level: list[date],
    tau2: float,
    aberrant: set[date],
    settings: DropSettings,
) -> DropTest:
    # Imported here: scipy.stats costs half a second of start-up to every importer of DropSettings (the
    # gates config, hence every `ragspine-eval score`); only the nightly test itself needs it.
    from scipy.stats import norm

    worse = WORSE_WHEN[s.metric]
    have = [s.counts.get(d) for d in recent]
    x_now = sum(c[0] for c in have if c) if all(have) else 0.0
    n_now = sum(c[1] for c in have if c) if all(have) else 0.0
    raw_now = sum(c[2] for c in have if c)
    kept = [d for d in level if d not in aberrant]
    x_base, n_base = _arrays(s, kept)
    raw_base = sum(s.counts[d][2] for d in kept if d in s.counts)
    current = _own_direction(x_now / n_now if n_now else 0.0, worse)
    trailing = _own_direction(float(x_base.sum() / n_base.sum()), worse) if n_base.sum() > 0 else None
    common = dict(
        metric=s.metric,
        slice=s.slice,
        nights=nights,
        current=current,
        current_n=raw_now,
        trailing=trailing,
        trailing_n=raw_base,
        trailing_days=len(x_base),
        worse_by=None
        if trailing is None
        else (trailing - current if worse == "lower" else current - trailing),
        tau2=tau2,
        set_aside=sum(d in s.counts for d in aberrant.intersection(level)),
    )
    reason = None
    if not all(have):
        reason = f"{sum(1 for c in have if not c)} of the last {nights} night(s) missing"
    elif len(x_base) < settings.min_days:
        reason = f"{len(x_base)} trailing night(s), at least {settings.min_days} needed"
    elif n_now < settings.min_n or n_base.sum() < settings.min_n:
        reason = (
            f"too few observations (tonight {n_now:.0f}, trailing {n_base.sum():.0f}; "
            f"at least {settings.min_n} each)"
        )
    if reason is not None:
        return DropTest(**common, z=None, p_value=None, reason=reason)
    y_base, v_base = variance_stabilised(x_base, n_base)
    w = 1 / (v_base + tau2)
    mu = float(np.sum(w * y_base) / np.sum(w))
    y_now, v_now = variance_stabilised(np.array([x_now]), np.array([n_now]))
    z = (mu - float(y_now[0])) / np.sqrt(float(v_now[0]) + tau2 / nights + 1 / float(np.sum(w)))
    return DropTest(**common, z=float(z), p_value=float(norm.sf(z)))


def _control(tests: list[DropTest], settings: DropSettings) -> list[DropTest]:
    """Weighted Benjamini–Hochberg over the tested ones: q-values, significance and alerts."""
    tested = [i for i, t in enumerate(tests) if t.tested]
    if not tested:
        return tests
    p = np.array([tests[i].p_value for i in tested])
    weights = np.array(
        [settings.all_traffic_weight if tests[i].slice == ALL_TRAFFIC else 1.0 for i in tested]
    )
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
    return out


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


def _counts(entry: dict | None, worse: str) -> tuple[float, float, int] | None:
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

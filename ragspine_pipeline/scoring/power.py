r"""What a sample can detect: the smallest drop each test catches with a given power, and the sample a
target drop needs. Pure functions of scipy.stats; ``ragspine-eval plan`` prints them and
``bench/bench_plan.py`` checks them by simulation through the real tests.

**The nightly drop test** (``scoring.significance``), one rate at level ``p`` with ``n`` observations a
night, tonight against the ``window`` nights before it (each of ``n`` too). On Anscombe's arcsine scale a
night's sampling variance is ``v = 1/(4n + 2)`` whatever the rate; with between-day variance ``τ²`` the
trailing random-effects mean has variance ``(v + τ²)/window``, so the test's standard error is

    se = sqrt((v + τ²) · (1 + 1/window))

and a drop of ``d`` points moves the statistic by ``Δ = asin(√p) − asin(√(p − d))`` (the rate's own
direction: ``p`` is the level of a rate where lower is worse; for the refusal or fabrication rate give
one minus it). The one-sided test at per-test level ``α`` catches it with power
``Φ(Δ/se − z_α)``; the drop caught with power ``1 − β`` solves ``Δ = (z_α + z_β) · se``. Approximations:
``asin(√p)`` for Anscombe's ``asin(√((x + 3/8)/(n + 3/4)))`` (exact as ``n`` grows), ``τ²`` known (the
test estimates it from 28 nights), and the night's Benjamini–Hochberg control as a per-test level
``α = fdr / tests`` — what BH gives one rate that drops among ``tests`` tests that do not (slightly
conservative: a second rejection would loosen it). ``tests`` is the night's summed test weights divided
by the test's own weight (``night_family.test_weight``: the all-traffic one-night test weighs
``all_traffic_weight × all_traffic_tonight_weight`` slice tests); give ``α`` instead when known.
An alert also needs the drop to reach ``min_drop`` (or ``min_relative_change`` of the failure share);
the figures here are the statistical limit.

**The release gate's paired baseline test** (``decision.paired``) on a golden set of ``n`` cases. Model:
each case independently regresses (passed in the baseline run, fails now) with probability ``f + d`` and
improves with probability ``f``, where ``f`` is the flip rate *per direction* of an unchanged system
(0 for a deterministic one; a stochastic system under test flips some cases both ways between identical
runs) and ``d`` the true drop of the pass rate. The gate blocks when the exact one-sided McNemar test
gives ``P(X ≥ b | b + c, ½) < alpha`` and the net drop ``(b − c)/n > margin``. The power is computed
exactly: the flips ``k = b + c ~ Binomial(n, 2f + d)``, ``b | k ~ Binomial(k, (f + d)/(2f + d))``, summed
over every ``k``. The **strict** comparison (the default ``baseline_test``) blocks whenever the pass rate is
below the baseline's, ``b > c``, under the same model: it catches small drops but blocks an unchanged
system that flips cases with probability ``P(b > c | d = 0)``, reported beside it.

The inverses (the sample size for a target drop and power) search the same functions: the smallest ``n``
at which the power reaches the target (the exact test's power is a slightly saw-toothed function of
``n``; the search returns the first ``n`` of the first run that reaches it).

**The nightly sample size from a target** (``SampleTarget``, ``production: {sample: ...}`` in the gates
config; ``nightly_sample_plan``): each all-traffic rate's level and ``τ²`` are estimated from the previous
nights' summaries with ``scoring.significance``'s own estimators, the per-test ``α`` from the latest
night's tests, and the night's size is ``nightly_sample_size`` of the target over the rate's observations
per trace, capped by ``max``, never below the fixed size. **The release report's figure**
(``decision.detectable.detectable_drop``) is ``paired_detectable_drop`` at 80 % power for the run's cases
and baseline test, at the flip rate ``RELEASE_FLIP_RATE`` assumes (0 for strict: then in closed form).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragspine_pipeline.scoring.drop_series import ALL_TRAFFIC, entry_counts
from ragspine_pipeline.scoring.drop_settings import (
    DEFAULT_POWER,
    DEFAULT_SAMPLE_CAP,
    WORSE_WHEN,
    DropSettings,
    SampleTarget,
)
from ragspine_pipeline.scoring.night_family import test_weight
from ragspine_pipeline.scoring.random_effects import between_day_variance, variance_stabilised

# scipy is imported where it is used: it costs half a second of start-up, and ``ragspine-eval plan``
# and the nightly path import this module.
__all__ = ["DEFAULT_POWER", "DEFAULT_SAMPLE_CAP", "SampleTarget"]  # re-exported: where they were

DEFAULT_WINDOW = 14  # ``DropSettings.window``
MAX_CASES = 200_000  # the golden-set search gives up above this many cases
# The flip rate (per direction) the release report assumes for its detectable drop: the strict comparison
# is for a deterministic system (no flips), the paired test for one that samples (``ragspine-eval plan``'s
# default).
RELEASE_FLIP_RATE = {"strict": 0.0, "paired": 0.05}


@dataclass(frozen=True)
class NightlyDesign:
    """One production rate's nightly drop test (see the module docstring)."""

    rate: float  # the rate's level, lower is worse
    alpha: float  # per-test one-sided level
    tau2: float = 0.0  # between-day variance on the arcsine scale
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        if not 0 < self.rate <= 1:
            raise ValueError("the rate's level must be in (0, 1]")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")
        if self.tau2 < 0 or self.window < 1:
            raise ValueError("tau2 must be ≥ 0 and window ≥ 1")


@dataclass(frozen=True)
class PairedDesign:
    """The release gate's paired baseline test (``decision.paired``) under the flip model."""

    flip_rate: float = 0.0  # per direction, of an unchanged system
    alpha: float = 0.02  # ``PairedSettings.alpha``
    margin: float = 0.02  # ``PairedSettings.margin``
    strict: bool = False  # the strict comparison instead: blocks when b > c

    def __post_init__(self) -> None:
        if not 0 <= self.flip_rate < 0.5:
            raise ValueError("the flip rate must be in [0, 0.5)")
        if not 0 < self.alpha < 1 or not 0 <= self.margin < 1:
            raise ValueError("alpha must be in (0, 1) and margin in [0, 1)")


def per_test_alpha(fdr: float, tests: float) -> float:
    """The per-test level a rate that drops alone gets from Benjamini–Hochberg at ``fdr``: ``fdr / tests``."""
    if not 0 < fdr < 1 or tests < 1:
        raise ValueError("fdr must be in (0, 1) and tests ≥ 1")
    return fdr / tests


# -- the nightly drop test -------------------------------------------------------------------------


def nightly_se(n: int, design: NightlyDesign) -> float:
    """Standard error of tonight against the trailing mean on the arcsine scale."""
    return math.sqrt((1 / (4 * n + 2) + design.tau2) * (1 + 1 / design.window))


def nightly_power(n: int, drop: float, design: NightlyDesign) -> float:
    """Chance the one-sided test at ``design.alpha`` flags a drop of ``drop`` points with ``n`` a night."""
    from scipy.stats import norm

    shift = _arcsine(design.rate) - _arcsine(max(design.rate - drop, 0.0))
    return float(norm.cdf(shift / nightly_se(n, design) - norm.isf(design.alpha)))


def nightly_detectable_drop(n: int, design: NightlyDesign, power: float = DEFAULT_POWER) -> float | None:
    """Smallest drop (rate points) caught with ``power``; None when even a fall to 0 is not."""
    return _drop_at(nightly_se(n, design), design, power)


def nightly_best_drop(design: NightlyDesign, power: float = DEFAULT_POWER) -> float | None:
    """The smallest drop caught with ``power`` by a night of any size (the limit as ``n`` grows, where the
    between-day variance alone is left); None when even a fall to 0 is not."""
    return _drop_at(math.sqrt(design.tau2 * (1 + 1 / design.window)), design, power)


def _drop_at(se: float, design: NightlyDesign, power: float) -> float | None:
    from scipy.stats import norm

    shift = (norm.isf(design.alpha) + norm.ppf(power)) * se
    top = _arcsine(design.rate)
    if shift > top:
        return None
    return design.rate - math.sin(top - shift) ** 2


def nightly_sample_size(drop: float, design: NightlyDesign, power: float = DEFAULT_POWER) -> int | None:
    """Smallest ``n`` a night at which a drop of ``drop`` points is caught with ``power``; None when the
    between-day variance alone keeps it from being caught at any ``n``."""
    from scipy.stats import norm

    if not 0 < drop <= design.rate:
        raise ValueError("the drop must be in (0, rate]")
    shift = _arcsine(design.rate) - _arcsine(design.rate - drop)
    allowed = (shift / (norm.isf(design.alpha) + norm.ppf(power))) ** 2 / (1 + 1 / design.window)
    v = allowed - design.tau2  # the sampling variance a night may have
    if v <= 0:
        return None
    return max(1, math.ceil((1 / v - 2) / 4))


def _arcsine(p: float) -> float:
    return math.asin(math.sqrt(p))


# -- the release gate ------------------------------------------------------------------------------


def paired_power(n: int, drop: float, design: PairedDesign) -> float:
    """Exact chance the gate blocks a system whose pass rate fell by ``drop`` on ``n`` cases."""
    from scipy.stats import binom

    f = design.flip_rate
    if drop < 0 or 2 * f + drop > 1:
        raise ValueError("need 0 ≤ drop ≤ 1 − 2·flip_rate")
    discordant = 2 * f + drop
    if discordant == 0:
        return 0.0
    k = np.arange(n + 1)
    p_k = binom.pmf(k, n, discordant)
    share = (f + drop) / discordant  # of flips that are regressions
    if design.strict:
        first = k // 2 + 1  # b > c  ⇔  b > k/2
    else:
        # McNemar: the smallest b with P(X ≥ b | k, ½) < alpha, found next to the normal quantile …
        guess = binom.ppf(1 - design.alpha, k, 0.5)
        candidates = guess[:, None] + np.arange(-2, 4)[None, :]
        significant = (binom.sf(candidates - 1, k[:, None], 0.5) < design.alpha) & (candidates <= k[:, None])
        significant &= candidates >= 0
        mcnemar = np.where(
            significant.any(axis=1), candidates[np.arange(n + 1), np.argmax(significant, axis=1)], n + 1
        ).astype(int)
        # … and a net drop (2b − k)/n above the margin.
        net = np.floor((k + design.margin * n) / 2).astype(int) + 1
        first = np.maximum(mcnemar, net)
    return float(np.sum(p_k * binom.sf(first - 1, k, share)))


def paired_false_block_rate(n: int, design: PairedDesign) -> float:
    """Chance the gate blocks an unchanged system (drop 0) that flips cases at ``design.flip_rate``."""
    return paired_power(n, 0.0, design)


def paired_detectable_drop(n: int, design: PairedDesign, power: float = DEFAULT_POWER) -> float | None:
    """Smallest drop (pass-rate points) the gate blocks with ``power`` on ``n`` cases; None when even the
    largest drop the flip model allows is not."""
    if design.strict and design.flip_rate == 0:
        # No flips: the gate blocks on any regressed case, with chance 1 − (1 − d)ⁿ (closed form, no scipy:
        # the release report states this figure on every strict run).
        return 1 - (1 - power) ** (1 / n)
    from scipy.optimize import brentq

    top = 1 - 2 * design.flip_rate
    if paired_power(n, top, design) < power:
        return None
    if paired_power(n, 0.0, design) >= power:
        return 0.0
    return float(brentq(lambda d: paired_power(n, d, design) - power, 0.0, top, xtol=1e-6))


def paired_sample_size(drop: float, design: PairedDesign, power: float = DEFAULT_POWER) -> int | None:
    """Smallest number of golden cases at which a drop of ``drop`` points is blocked with ``power``;
    None above ``MAX_CASES``, or when the drop is not above the paired test's margin (a power of ½ or
    more is then out of reach at any size)."""
    if not 0 < drop <= 1 - 2 * design.flip_rate:
        raise ValueError("the drop must be in (0, 1 − 2·flip_rate]")
    if not design.strict and drop <= design.margin and power >= 0.5:
        return None  # the net drop must pass the margin: at a true drop of margin the power tends to ½

    def enough(n: int) -> bool:
        return paired_power(n, drop, design) >= power

    high = 8
    while not enough(high):
        if high >= MAX_CASES:
            return None
        high = min(2 * high, MAX_CASES)
    low = high // 2  # not enough (or below the first probe)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    while high > 1 and enough(high - 1):  # the saw-tooth: step back to the start of the run
        high -= 1
    return high


# -- the nightly sample size from a target ---------------------------------------------------------


@dataclass(frozen=True)
class RateNeed:
    """What one rate's history says a target needs: its level (lower is worse), between-day variance,
    the test's per-test level, observations per sampled trace and the traces the target needs (None:
    no night of any size reaches it; ``best`` is then the smallest drop any night catches)."""

    metric: str
    level: float  # lower is worse (one minus the refusal or fabrication rate)
    tau2: float
    alpha: float
    nights: int
    per_trace: float
    traces: int | None
    best: float | None
    higher_is_worse: bool = False

    @property
    def shown(self) -> float:
        """The level in the rate's own direction (the refusal rate as itself)."""
        return 1 - self.level if self.higher_is_worse else self.level


@dataclass(frozen=True)
class SamplePlan:
    """The night's sample size and why: ``reason`` is ``fixed`` (no target set), ``no history`` (no rate
    has ``min_days`` nights yet), ``target`` (the size the target needs), ``floor`` (the target needs
    fewer than the fixed size), ``capped`` (more than ``max``) or ``unreachable`` (the between-day
    variance alone hides the drop: ``max`` is used and ``warning`` says so)."""

    size: int
    fixed: int
    reason: str
    target: SampleTarget | None = None
    need: RateNeed | None = None
    window: int = DEFAULT_WINDOW
    detectable: float | None = None  # the drop caught with the target's power at ``size``
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (the nightly summary's ``sample_size``): the size, the fixed size, the reason, the
        target and, once sized from history, the rate, its level (in its own direction), τ², the test's
        α, the traces the target needs (null: unreachable) and the drop caught at ``size``."""
        out: dict[str, Any] = {"size": self.size, "fixed": self.fixed, "reason": self.reason}
        if self.target is not None:
            out["target"] = self.target.model_dump()
        need = self.need
        if need is not None:
            out.update(
                rate=need.metric,
                level=round(need.shown, 4),
                tau2=float(f"{need.tau2:.4g}"),
                alpha=float(f"{need.alpha:.4g}"),
                nights=need.nights,
                per_trace=round(need.per_trace, 4),
                needed=need.traces,
                best_drop=None if need.best is None else round(need.best, 4),
                detectable_drop=None if self.detectable is None else round(self.detectable, 4),
            )
        if self.warning is not None:
            out["warning"] = self.warning
        out["why"] = self.line()
        return out

    def line(self) -> str:
        """One line for people: the size and why."""
        if self.target is None:
            return f"{self.size:,} traces a night (the fixed sample size; no production.sample target)"
        goal = f"a {_pts(self.target.detect)}-point drop with {_pct(self.target.power)} power"
        if self.need is None:
            return f"{self.size:,} traces a night (the fixed size: no history yet to size {goal} from)"
        need = self.need
        basis = (
            f"{need.metric} at {_pct(need.shown)}, τ² = {need.tau2:.3g} over "
            f"{need.nights} nights, α = {need.alpha:.3g}"
        )
        caught = (
            "no drop reliably caught"
            if self.detectable is None
            else f"drops of {_pts(self.detectable)} points caught with {_pct(self.target.power)} power"
        )
        if self.reason == "unreachable":
            best = "no drop" if need.best is None else f"{_pts(need.best)} points"
            return (
                f"{self.size:,} traces a night (max): no sample size catches {goal} on {need.metric}, the "
                f"between-day variance alone hides it (best reachable: {best}); {basis}"
            )
        why = {
            "target": f"what {goal} needs",
            "floor": f"the fixed size; {goal} needs only {need.traces:,}",
            "capped": f"the max; {goal} needs {need.traces:,}",
        }[self.reason]
        return f"{self.size:,} traces a night ({why}; {basis}): {caught}"


def target_sample_size(
    target: SampleTarget, design: NightlyDesign, fixed: int, per_trace: float = 1.0
) -> tuple[int, str, int | None]:
    """``(size, reason, traces needed)``: the smallest number of traces a night at which a drop of
    ``target.detect`` is caught with ``target.power`` (``nightly_sample_size`` of the observations, over
    ``per_trace`` observations a sampled trace), capped by ``target.max`` and never below ``fixed``. The
    reason is ``target``, ``floor``, ``capped`` or ``unreachable`` (then ``max``, and no traces)."""
    drop = min(target.detect, design.rate)
    observations = nightly_sample_size(drop, design, target.power)
    if observations is None:
        return max(fixed, target.max), "unreachable", None
    traces = max(1, math.ceil(observations / per_trace - 1e-9))
    if traces > target.max:
        return max(fixed, target.max), "floor" if fixed >= traces else "capped", traces
    if traces <= fixed:
        return fixed, "floor", traces
    return traces, "target", traces


def nightly_sample_plan(history: Sequence[dict], settings: DropSettings, fixed: int) -> SamplePlan:
    """The night's sample size from ``settings.sample`` and the daily summaries of the previous nights
    (``history``, any order; those before the night to sample): ``fixed`` when no target is set or no
    rate has ``settings.min_days`` nights yet. Each all-traffic rate's level (the random-effects mean of
    its last ``window`` kept nights, on the arcsine scale) and between-day variance τ² (over the last
    ``variance_window`` nights, screened) are estimated as ``scoring.significance`` does, with its
    functions; the per-test level is ``fdr`` over the tests of the latest night that ran them, divided by
    the all-traffic one-night test's weight (``nightly_tests`` before any). The rate is ``sample.rate``,
    else the one that needs the most traces (one the target cannot reach at all first)."""
    target = settings.sample
    if target is None:
        return SamplePlan(size=fixed, fixed=fixed, reason="fixed", window=settings.window)

    nights = sorted((d for d in history if d.get("day")), key=lambda d: d["day"])[-settings.variance_window :]
    alpha = per_test_alpha(settings.fdr, _tests_per_weight(nights, settings))
    metrics = [target.rate] if target.rate is not None else list(WORSE_WHEN)
    needs = [need for m in metrics if (need := _rate_need(m, nights, settings, alpha, target)) is not None]
    if not needs:
        return SamplePlan(size=fixed, fixed=fixed, reason="no history", target=target, window=settings.window)
    need = max(needs, key=lambda n: (n.traces is None, n.traces or 0, n.metric))
    design = NightlyDesign(rate=need.level, alpha=alpha, tau2=need.tau2, window=settings.window)
    size, reason, _ = target_sample_size(target, design, fixed, need.per_trace)
    observations = max(1, math.floor(size * need.per_trace))
    warning = None
    if reason == "unreachable":
        best = "no drop at all" if need.best is None else f"{_pts(need.best)} points"
        warning = (
            f"production.sample: no nightly sample catches a {_pts(target.detect)}-point drop of "
            f"{need.metric} with {_pct(target.power)} power (its between-day variance τ² = {need.tau2:.3g} "
            f"alone hides it; the best reachable is {best}): sampling max = {size:,} traces"
        )
    return SamplePlan(
        size=size,
        fixed=fixed,
        reason=reason,
        target=target,
        need=need,
        window=settings.window,
        detectable=nightly_detectable_drop(observations, design, target.power),
        warning=warning,
    )


def _rate_need(
    metric: str, nights: Sequence[dict], settings: DropSettings, alpha: float, target: SampleTarget
) -> RateNeed | None:
    """One all-traffic rate's estimates over ``nights`` (None: fewer than ``min_days`` nights hold it,
    or its level is 0, where it cannot drop)."""

    rows = []
    for night in nights:
        counts = entry_counts((night.get("metrics") or {}).get(metric), WORSE_WHEN[metric])
        if counts is not None:
            rows.append((counts, night.get("n") or counts[2]))
    if len(rows) < settings.min_days:
        return None
    x = np.array([c[0] for c, _ in rows], dtype=float)
    n = np.array([c[1] for c, _ in rows], dtype=float)
    y, v = variance_stabilised(x, n)
    tau2, kept = between_day_variance(y[None, :], v[None, :])
    level_nights = np.zeros(len(rows), dtype=bool)
    level_nights[-settings.window :] = True
    use = kept[0] & level_nights
    if not use.any():
        use = level_nights
    w = 1 / (v[use] + tau2)
    level = math.sin(float(np.sum(w * y[use]) / np.sum(w))) ** 2
    if level <= 0:
        return None
    per_trace = float(n.sum()) / float(sum(traces for _, traces in rows))
    design = NightlyDesign(rate=min(level, 1.0), alpha=alpha, tau2=float(tau2), window=settings.window)
    observations = nightly_sample_size(min(target.detect, design.rate), design, target.power)
    return RateNeed(
        metric=metric,
        level=design.rate,
        tau2=float(tau2),
        alpha=alpha,
        nights=len(rows),
        per_trace=per_trace,
        traces=None if observations is None else max(1, math.ceil(observations / per_trace - 1e-9)),
        best=nightly_best_drop(design, target.power),
        higher_is_worse=WORSE_WHEN[metric] == "higher",
    )


def _tests_per_weight(nights: Sequence[dict], settings: DropSettings) -> float:
    """The night's test count over the all-traffic one-night test's normalised weight — the sum of the
    tests' weights over its weight — from the latest night that ran drop tests; ``nightly_tests``
    before any did."""

    for night in reversed(nights):
        ran = (night.get("drop_tests") or {}).get("tests") or []
        tests = [t for t in ran if t.get("p_value") is not None]
        if tests:
            total = sum(test_weight(t.get("slice"), t.get("nights", 1), settings) for t in tests)
            return max(1.0, total / test_weight(ALL_TRAFFIC, 1, settings))
    return nightly_tests(settings)


def nightly_tests(settings: DropSettings, slices: int = 0) -> float:
    """A night's tests — every production rate in every window, in all traffic and in ``slices`` slices
    (the values of every tag dimension together) — over the all-traffic one-night test's weight:
    ``α = fdr / nightly_tests`` is that test's level (with one real change the night's two-stage
    procedure rejects at the flat procedure's first step, ``scoring.night_family``)."""

    per_rate = sum(test_weight(ALL_TRAFFIC, nights, settings) for nights in settings.windows)
    per_rate += slices * sum(test_weight("slice", nights, settings) for nights in settings.windows)
    return len(WORSE_WHEN) * per_rate / test_weight(ALL_TRAFFIC, 1, settings)


def _pct(share: float) -> str:
    return f"{100 * share:.3g} %"


def _pts(share: float) -> str:
    return f"{100 * share:.3g}"

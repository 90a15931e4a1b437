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

**The nightly sample size from a target**: ``scoring.sample_plan``. **The release report's figure**
(``decision.detectable.detectable_drop``) is ``paired_detectable_drop`` at 80 % power for the run's cases
and baseline test, at the flip rate ``RELEASE_FLIP_RATE`` assumes (0 for strict: then in closed form).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ragspine_pipeline.scoring.drop_settings import (
    DEFAULT_POWER,
    DEFAULT_SAMPLE_CAP,
    SampleTarget,
)

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

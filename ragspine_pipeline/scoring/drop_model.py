"""One drop test, and one return test, of one series (``scoring.significance`` states the model and why):
the group's between-day variance and screen, a weekly pattern, the trailing level, and tonight's window
against it, with the night effects' lag-1 correlation allowed for."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from statistics import NormalDist

import numpy as np

from ragspine_pipeline.scoring.drop_results import DropTest, FrozenLevel, ReturnTest
from ragspine_pipeline.scoring.drop_series import Series, arrays, own_direction
from ragspine_pipeline.scoring.drop_settings import DAYS, WORSE_WHEN, DropSettings
from ragspine_pipeline.scoring.random_effects import (
    SCREEN,
    between_day_variance,
    lag_one,
    variance_stabilised,
)

# A series' weekend and weekday levels differ (a weekly pattern) when their difference is significant
# at this two-sided level over the variance window.
WEEKLY_ALPHA = 0.01
MAX_RHO = 0.95  # the night effects' correlation allowed for is capped below 1 (a random walk)
# An open incident's slice is still clearly down, when its all-traffic rate is back, beyond this z
# over its last recovery_nights nights (one-sided 1 %).
CLEARLY_BELOW = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class Window:
    nights: int  # tonight alone or the last few nights pooled
    recent: list[date]  # those nights, tonight first
    level: list[date]  # the trailing nights the level is estimated from, most recent first
    spread: list[date]  # the trailing nights τ² (and a weekly pattern) is estimated from

    @classmethod
    def of(cls, day: date, nights: int, level_nights: int, spread_nights: int) -> Window:
        first = day - timedelta(days=nights)  # the last trailing night
        return cls(
            nights=nights,
            recent=[day - timedelta(days=back) for back in range(nights)],
            level=[first - timedelta(days=back) for back in range(level_nights)],
            spread=[first - timedelta(days=back) for back in range(spread_nights)],
        )


@dataclass(frozen=True)
class Fit:
    """A group's between-day variance, and per series the nights set aside and whether its reference is
    by day type; ``lag`` is the group's lag-1 autocovariance of its residuals, for the night's ρ."""

    tau2: float
    aberrant: list[set[date]]
    weekly: list[bool]
    lag: tuple[float, float, int] = (0.0, 0.0, 0)  # (Σ e_t e_t+1, Σ e_t², pairs) over kept nights


@dataclass(frozen=True)
class Level:
    """A random-effects level over ``days``: its value on the arcsine scale, each night's weight (sum 1)
    and the sampling part of its variance ``Σ a² v``."""

    mu: float
    days: list[date]
    weights: np.ndarray
    sampling: float

    def variance(self, tau2: float) -> float:
        """Its variance with independent nights: ``Σ a² (v + τ²) = 1 / Σ w*``."""
        return self.sampling + tau2 * float(np.sum(self.weights**2))


def fit(members: list[Series], days: list[date], settings: DropSettings) -> Fit:
    """The group's τ² and screen, each series by day type where its history shows a weekly pattern (its
    weekend and weekday levels differ at ``WEEKLY_ALPHA``, each type over at least ``min_days`` nights)."""
    plain = [False] * len(members)
    tau2, aberrant, lag = _screened_tau2(members, days, plain, settings)
    if settings.weekly == "off":
        return Fit(tau2, aberrant, plain, lag)
    split_tau2, split_aberrant, _ = _screened_tau2(members, days, [True] * len(members), settings)
    weekly = [
        _weekly_pattern(s, days, split_aberrant[i], split_tau2, settings) for i, s in enumerate(members)
    ]
    if not any(weekly):
        return Fit(tau2, aberrant, plain, lag)
    tau2, aberrant, lag = _screened_tau2(members, days, weekly, settings)
    return Fit(tau2, aberrant, weekly, lag)


def night_rho(fits: Iterable[Fit]) -> float:
    """The lag-1 correlation of the night effects, pooled over the night's groups: their lag-1
    autocovariance of residuals less one standard error, over their between-day variance, in
    [0, ``MAX_RHO``]. Sampling noise does not correlate from night to night, so the residuals' lag-1
    autocovariance is ``ρ τ²``; taking one standard error off keeps an uncorrelated history at 0 in most
    nights (it costs the multi-night tests nothing there) and lets a correlated one show (φ = 0.8
    histories give ρ ≈ 0.5–0.7)."""
    cross = sum(f.lag[0] for f in fits)
    squares = sum(f.lag[1] for f in fits)
    pairs = sum(f.lag[2] for f in fits)
    signal = sum(f.tau2 * f.lag[2] for f in fits)
    if pairs < 2 or signal <= 0:
        return 0.0
    spread = squares / pairs  # the residuals' variance, v + τ²
    return float(min(MAX_RHO, max(0.0, (cross - spread * math.sqrt(pairs)) / signal)))


def inflation(rho: float, nights: int) -> float:
    """How much DerSimonian–Laird's τ² understates the night effects' variance over ``nights``
    correlated nights: ``(k − 1) / (k − f)`` with ``f = 1 + 2 Σ_{j<k} (1 − j/k) ρ^j`` (the deviations from
    the window's own mean hold less of the variance when neighbouring nights move together)."""
    if rho <= 0 or nights < 3:
        return 1.0
    j = np.arange(1, nights)
    f = 1 + 2 * float(np.sum((1 - j / nights) * rho**j))
    return (nights - 1) / max(nights - f, 1.0)


def _screened_tau2(
    members: list[Series], days: list[date], by_type: list[bool], settings: DropSettings
) -> tuple[float, list[set[date]], tuple[float, float, int]]:
    """The group's between-day variance over ``days``, per series the nights the screen set aside, and
    the residuals' lag-1 sums; a series ``by_type`` is two series to the estimator (its weekend nights and
    its weekday nights, each with its own level)."""
    rows, owners = [], []
    for i, s in enumerate(members):
        for kind in ("weekend", "weekday") if by_type[i] else (None,):
            rows.append([s.counts.get(d) if kind in (None, day_type(d, settings)) else None for d in days])
            owners.append(i)
    x = np.array([[c[0] if c else np.nan for c in row] for row in rows], dtype=float)
    n = np.array([[c[1] if c else np.nan for c in row] for row in rows], dtype=float)
    y, v = variance_stabilised(x, n)
    tau2, kept = between_day_variance(y, v)
    aberrant: list[set[date]] = [set() for _ in members]
    for r, i in enumerate(owners):
        present = np.isfinite(y[r])
        aberrant[i] |= {d for d, p, keep in zip(days, present, kept[r], strict=True) if p and not keep}
    return tau2, aberrant, lag_one(y, v, kept, tau2)


def _weekly_pattern(
    s: Series, days: list[date], aberrant: set[date], tau2: float, settings: DropSettings
) -> bool:
    """Do the series' weekend and weekday random-effects levels over ``days`` differ at ``WEEKLY_ALPHA``?"""
    levels = []
    for kind in ("weekend", "weekday"):
        kept = [d for d in days if d in s.counts and d not in aberrant and day_type(d, settings) == kind]
        if len(kept) < settings.min_days:
            return False
        level = _level(s, kept, tau2)
        levels.append((level.mu, level.variance(tau2)))
    (a, var_a), (b, var_b) = levels
    return bool(abs(a - b) / np.sqrt(var_a + var_b) > NormalDist().inv_cdf(1 - WEEKLY_ALPHA / 2))


def day_type(day: date, settings: DropSettings) -> str:
    return "weekend" if DAYS[day.weekday()] in settings.weekend else "weekday"


def test(s: Series, window: Window, fit: Fit, i: int, settings: DropSettings, rho: float) -> DropTest:
    """Tonight's window of ``s`` against its trailing level: of the ``level`` nights the screen kept, or,
    with a weekly pattern, of the last ``window`` kept nights of each day type tonight's window holds
    (weighted by their share of tonight's observations). The variance of the difference allows for
    night effects correlated at lag one by ``rho`` (``ρ^|i − j|`` between nights i and j)."""
    worse, aberrant, weekly = WORSE_WHEN[s.metric], fit.aberrant[i], fit.weekly[i]
    tau2 = fit.tau2 * inflation(rho, len(window.spread))
    references = {
        kind: _reference(s, window, aberrant, kind, settings)
        for kind in (("weekend", "weekday") if weekly else (None,))
    }
    levels = {kind: _level(s, days, tau2) if days else None for kind, (days, _) in references.items()}
    have = [s.counts.get(d) for d in window.recent]
    pooled = _pooled(s, window, tau2, levels, weekly, settings) if all(have) else window.recent
    x_now = sum(s.counts[d][0] for d in pooled) if all(have) else 0.0
    n_now = sum(s.counts[d][1] for d in pooled) if all(have) else 0.0
    shares: dict[str | None, float] = {}
    for d in pooled:
        kind = day_type(d, settings) if weekly else None
        shares[kind] = shares.get(kind, 0.0) + (s.counts[d][1] if all(have) else 1.0)
    shares = {kind: share / sum(shares.values()) for kind, share in shares.items()}
    kept = {kind: references[kind][0] for kind in shares}
    used = sorted({d for days in kept.values() for d in days})
    trailing_parts = [(shares[k], arrays(s, days)) for k, days in kept.items()]
    n_base = sum(float(n.sum()) for _, (_, n) in trailing_parts)
    trailing = None
    if all(n.sum() > 0 for _, (_, n) in trailing_parts):
        trailing = own_direction(sum(a * float(x.sum() / n.sum()) for a, (x, n) in trailing_parts), worse)
    current = own_direction(x_now / n_now if n_now else 0.0, worse)
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
        rho=rho,
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
    mu = sum(shares[k] * levels[k].mu for k in shares)
    level_days = [
        (d, -shares[k] * a) for k in shares for d, a in zip(levels[k].days, levels[k].weights, strict=True)
    ]
    level_variance = sum(shares[k] ** 2 * levels[k].sampling for k in shares)
    level_variance += _between(level_days, tau2, rho)
    y_now, v_now = variance_stabilised(np.array([x_now]), np.array([n_now]))
    recent = [(d, s.counts[d][1] / n_now) for d in pooled]
    variance = float(v_now[0]) + sum(shares[k] ** 2 * levels[k].sampling for k in shares)
    variance += _between(recent + level_days, tau2, rho)
    z = (mu - float(y_now[0])) / math.sqrt(variance)
    return DropTest(
        **common,
        z=float(z),
        p_value=0.5 * math.erfc(float(z) / math.sqrt(2)),  # 1 − Φ(z)
        level=mu,
        level_variance=level_variance,
    )


def return_test(s: Series | None, frozen: FrozenLevel, day: date, settings: DropSettings) -> ReturnTest:
    """The last ``r`` nights of ``s`` pooled against the level the incident froze: back when ``z ≤
    recovery_sd``, ``z = (level − y) / sqrt(v + τ²/r + var(level))`` on the arcsine scale (positive:
    worse). ``r`` is ``recovery_nights``, or more — up to the nights the opening test pooled — where so
    few nights could not tell the drop it opened with from the level (:func:`recovery_pool`): a rate
    still down must not look back by chance. Clearly below: over the last ``recovery_nights`` nights
    alone, ``z > CLEARLY_BELOW``."""
    nights = recovery_pool(s, frozen, day, settings)
    common = dict(
        metric=frozen.metric, slice=frozen.slice, nights=nights, since=frozen.since, trailing=frozen.trailing,
        dropped_to=frozen.dropped_to,
    )  # fmt: skip
    judged = _against(s, frozen, day, nights)
    if judged is None:
        missing = nights if s is None else sum(day - timedelta(days=b) not in s.counts for b in range(nights))
        return ReturnTest(**common, reason=f"{missing} of the last {nights} night(s) without it")
    current, worse_by, z = judged
    short = _against(s, frozen, day, settings.recovery_nights)
    return ReturnTest(
        **common, current=current, worse_by=worse_by, z=z, back=bool(z <= settings.recovery_sd),
        clearly_below=None if short is None else bool(short[2] > CLEARLY_BELOW),
        recent_z=None if short is None else short[2],
    )  # fmt: skip


def _against(
    s: Series | None, frozen: FrozenLevel, day: date, nights: int
) -> tuple[float, float, float] | None:
    """``(rate, worse by, z)`` of the last ``nights`` nights of ``s`` pooled against ``frozen`` (None:
    a night without it)."""
    recent = [day - timedelta(days=back) for back in range(nights)]
    if s is None or not all(d in s.counts for d in recent):
        return None
    worse = WORSE_WHEN[frozen.metric]
    x = sum(s.counts[d][0] for d in recent)
    n = sum(s.counts[d][1] for d in recent)
    current = own_direction(x / n if n else 0.0, worse)
    worse_by = frozen.trailing - current if worse == "lower" else current - frozen.trailing
    y, v = variance_stabilised(np.array([x]), np.array([n]))
    z = (frozen.level - float(y[0])) / math.sqrt(float(v[0]) + frozen.tau2 / nights + frozen.level_variance)
    return current, worse_by, z


def recovery_pool(s: Series | None, frozen: FrozenLevel, day: date, settings: DropSettings) -> int:
    """How many nights a return test pools: the fewest from ``recovery_nights`` up to the nights the
    opening test pooled at which the drop it opened with (``level`` to ``dropped_to``) stands at least
    ``recovery_sd + Φ⁻¹(0.95)`` standard deviations out, at tonight's traffic — so a rate still that far
    down looks back on at most one night-window in twenty."""
    most = max(settings.recovery_nights, frozen.nights)
    if frozen.dropped_to is None or s is None or day not in s.counts:
        return most
    share = frozen.dropped_to if WORSE_WHEN[frozen.metric] == "lower" else 1.0 - frozen.dropped_to
    drop = frozen.level - math.asin(math.sqrt(min(max(share, 0.0), 1.0)))
    per_night = float(variance_stabilised(np.array([0.0]), np.array([s.counts[day][1]]))[1][0])
    needed = settings.recovery_sd + NormalDist().inv_cdf(0.95)
    for nights in range(settings.recovery_nights, most + 1):
        spread = math.sqrt((per_night + frozen.tau2) / nights + frozen.level_variance)
        if drop >= needed * spread:
            return nights
    return most


def _between(days: list[tuple[date, float]], tau2: float, rho: float) -> float:
    """``τ² c'Rc``: the between-night part of the variance of ``Σ c_d y_d`` over ``(night, c_d)``,
    with ``R = ρ^|i − j|`` between nights i and j (the identity when ρ is 0)."""
    if tau2 <= 0 or not days:
        return 0.0
    c = np.array([weight for _, weight in days])
    if rho <= 0:
        return tau2 * float(c @ c)
    ordinal = np.array([d.toordinal() for d, _ in days])
    lag = np.abs(ordinal[:, None] - ordinal[None, :])
    return tau2 * float(c @ (rho**lag) @ c)


def _reference(
    s: Series, window: Window, aberrant: set[date], kind: str | None, settings: DropSettings
) -> tuple[list[date], int]:
    """The trailing nights a level is estimated from, and how many the screen set aside among them: the
    ``level`` nights kept, or of one day type (``kind``) the last ``window`` kept ones within ``spread``."""
    nights = window.level if kind is None else window.spread
    span = [d for d in nights if d in s.counts and kind in (None, day_type(d, settings))]
    kept = [d for d in span if d not in aberrant][: len(window.level)]
    oldest = kept[-1] if kind is not None and kept else None  # older nights of the type are not used
    return kept, sum(d in aberrant and (oldest is None or d >= oldest) for d in span)


def _level(s: Series, days: list[date], tau2: float) -> Level:
    """The random-effects mean of ``days`` on the arcsine scale (weights ``w* = 1/(v + τ²)``)."""
    used = [d for d in days if d in s.counts]
    x, n = arrays(s, used)
    y, v = variance_stabilised(x, n)
    w = 1 / (v + tau2)
    a = w / np.sum(w)
    return Level(float(np.sum(a * y)), used, a, float(np.sum(a * a * v)))


def _pooled(
    s: Series,
    window: Window,
    tau2: float,
    levels: dict[str | None, Level | None],
    weekly: bool,
    settings: DropSettings,
) -> list[date]:
    """The window's nights that are pooled: tonight, and each earlier night of the window unless it is
    more than ``SCREEN`` standard deviations from its level — an outage alerted on its own night, and
    pooled it would make every multi-night window that holds it look like a drop for days."""
    pooled = [window.recent[0]]
    for d in window.recent[1:]:
        level = levels.get(day_type(d, settings) if weekly else None)
        if level is not None:
            y, v = variance_stabilised(np.array([s.counts[d][0]]), np.array([s.counts[d][1]]))
            if abs(float(y[0]) - level.mu) > SCREEN * np.sqrt(float(v[0]) + tau2 + level.variance(tau2)):
                continue
        pooled.append(d)
    return pooled

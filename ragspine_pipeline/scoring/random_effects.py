"""The estimators of the nightly drop test (``scoring.significance`` states the model and why): Anscombe's
variance-stabilising transform of binomial counts, the between-day variance of a group of series by a
screened (trimmed) DerSimonian–Laird estimator that one or two aberrant nights cannot capture, and the
weighted Benjamini–Hochberg adjustment. Arrays in, arrays out; numpy and scipy only."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

# A trailing night this many standard deviations sqrt(v + τ²) off its series' level is set aside.
SCREEN = 4.0


def variance_stabilised(successes: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Anscombe's arcsine transform of binomial counts and its variance:
    ``(asin(sqrt((x + 3/8)/(n + 3/4))), 1/(4n + 2))`` — the variance does not depend on the rate, and the
    value is finite and nearly normal even at x = 0 or x = n (Anscombe 1948)."""
    x, n = np.asarray(successes, dtype=float), np.asarray(n, dtype=float)
    return np.arcsin(np.sqrt((x + 0.375) / (n + 0.75))), 1 / (4 * n + 2)


def between_day_variance(
    y: np.ndarray, v: np.ndarray, screen: float = SCREEN, max_rounds: int = 20
) -> tuple[float, np.ndarray]:
    """Between-day variance τ² of a group of series, and which of their nights it kept.

    ``y`` and ``v`` are (series × nights) values on the variance-stabilised scale and their sampling
    variances, NaN where a series has no value that night. τ² is the DerSimonian–Laird estimate
    pooled over the series, ``τ² = max(0, (ΣQ − Σ(k − 1)) / Σ(Σw − Σw²/Σw))`` with ``w = 1/v``,
    ``Q = Σ w (y − ȳ_w)²`` and ``k`` nights per series, over the nights a screen keeps: a night is
    kept when ``|y − μ| ≤ screen · sqrt(v + τ²)``, ``μ`` its series' random-effects mean
    ``Σ w* y / Σ w*`` (``w* = 1/(v + τ²)``) over the kept nights. The screen starts from a robust fit —
    each series' median night, and the τ² at which the median of ``|y − median| / sqrt(v + τ²)`` over the
    group is ``Φ⁻¹(3/4)`` (0 when it is already below at τ² = 0) — and is repeated with the new τ² and
    means until the kept nights stop changing (at most ``max_rounds`` rounds; the last is used).

    Edge cases: series with fewer than two nights, or fewer than two kept nights, add nothing to τ²
    (their nights count as kept); no such series at all, or no spread between nights, gives τ² = 0.
    On a window without aberrant nights nothing is set aside and τ² is DerSimonian–Laird's.
    """
    from scipy.optimize import brentq

    y, v = np.atleast_2d(np.asarray(y, dtype=float)), np.atleast_2d(np.asarray(v, dtype=float))
    present = np.isfinite(y) & np.isfinite(v)
    usable = present & (present.sum(axis=1, keepdims=True) >= 2)
    y0, v0 = np.where(present, y, 0.0), np.where(present, v, 1.0)
    if not usable.any():
        return 0.0, present
    rows = usable.any(axis=1)
    level = np.zeros((len(y), 1))
    for r in np.flatnonzero(rows):  # row by row: nanmedian's masked arrays cost more than the estimate
        level[r] = np.median(y[r][usable[r]])
    spread, var = np.abs(y0 - level)[usable], v0[usable]
    target = NormalDist().inv_cdf(0.75)

    def excess(tau2: float) -> float:
        return float(np.median(spread / np.sqrt(var + tau2))) - target

    top = float(np.max(spread)) ** 2 / target**2
    tau2 = 0.0 if excess(0.0) <= 0 else brentq(excess, 0.0, top)
    kept = usable & (np.abs(y0 - level) <= screen * np.sqrt(v0 + tau2))
    for _ in range(max_rounds):
        tau2 = _dersimonian_laird(y0, v0, kept)
        w = np.where(kept, 1 / (v0 + tau2), 0.0)
        level = np.sum(w * y0, axis=1, keepdims=True) / np.maximum(np.sum(w, axis=1, keepdims=True), 1e-300)
        again = usable & (np.abs(y0 - level) <= screen * np.sqrt(v0 + tau2))
        if np.array_equal(again, kept):
            break
        kept = again
    few = kept.sum(axis=1, keepdims=True) < 2  # a series the screen cannot judge keeps every night
    return tau2, np.where(few, present, kept | (present & ~usable))


def lag_one(y: np.ndarray, v: np.ndarray, kept: np.ndarray, tau2: float) -> tuple[float, float, int]:
    """The lag-1 sums of a group's residuals: ``(Σ e_t e_t+1, Σ e_t², pairs)`` over pairs of neighbouring
    columns (consecutive nights) both kept, ``e = y − μ`` with ``μ`` each row's random-effects mean over
    its kept nights (``w* = 1/(v + τ²)``). Sampling noise does not correlate between nights, so
    ``Σ e_t e_t+1 / pairs`` estimates ``ρ τ²`` for night effects correlated ``ρ`` at lag one."""
    y, v = np.atleast_2d(np.asarray(y, dtype=float)), np.atleast_2d(np.asarray(v, dtype=float))
    use = kept & np.isfinite(y) & np.isfinite(v)
    w = np.where(use, 1 / (np.where(use, v, 1.0) + tau2), 0.0)
    total = np.sum(w, axis=1, keepdims=True)
    mean = np.sum(w * np.where(use, y, 0.0), axis=1, keepdims=True) / np.where(total > 0, total, 1.0)
    e = np.where(use, y - mean, 0.0)
    both = use[:, 1:] & use[:, :-1]
    pairs = int(both.sum())
    return float(np.sum(np.where(both, e[:, 1:] * e[:, :-1], 0.0))), float(np.sum(e[:, 1:][both] ** 2)), pairs


def _dersimonian_laird(y: np.ndarray, v: np.ndarray, kept: np.ndarray) -> float:
    """DerSimonian–Laird τ² pooled over the rows, each over its ``kept`` nights (rows with < 2 skipped)."""
    rows = kept.sum(axis=1) >= 2
    w = np.where(kept & rows[:, None], 1 / v, 0.0)
    total = np.sum(w, axis=1)
    safe = np.where(total > 0, total, 1.0)
    mean = np.sum(w * y, axis=1) / safe
    q = np.sum(w * (y - mean[:, None]) ** 2)
    c = np.sum(total - np.sum(w * w, axis=1) / safe)
    df = np.sum(np.where(rows, kept.sum(axis=1) - 1, 0))
    return max(0.0, float((q - df) / c)) if c > 0 else 0.0


def weighted_bh(p_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted Benjamini–Hochberg adjusted p-values (weights normalised to mean 1; Genovese, Roeder &
    Wasserman 2006). A test is significant at level α when its adjusted value is at most α."""
    p = np.asarray(p_values, dtype=float)
    w = np.asarray(weights, dtype=float)
    w = w * len(w) / w.sum()
    ratio = p / w
    order = np.argsort(ratio, kind="stable")
    m = len(p)
    adjusted = ratio[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(adjusted[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out

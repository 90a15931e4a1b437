"""Small statistics used by the reports: proportions with confidence intervals."""

from __future__ import annotations

import numpy as np

Z_95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson_interval(successes: np.ndarray, n: np.ndarray, z: float = Z_95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for binomial proportions, element-wise.

    For k successes in n trials, p = k/n:
    centre = (p + z²/2n) / (1 + z²/n), half-width = z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
    With n = 0 the interval is the whole [0, 1] (nothing is known), never NaN.
    """
    k = np.asarray(successes, dtype=float)
    n = np.asarray(n, dtype=float)
    safe_n = np.where(n > 0, n, 1.0)
    p = k / safe_n
    z2 = z * z
    denominator = 1 + z2 / safe_n
    centre = (p + z2 / (2 * safe_n)) / denominator
    half = z * np.sqrt(p * (1 - p) / safe_n + z2 / (4 * safe_n * safe_n)) / denominator
    low = np.where(n > 0, np.clip(centre - half, 0.0, 1.0), 0.0)
    high = np.where(n > 0, np.clip(centre + half, 0.0, 1.0), 1.0)
    return low, high


def wilson(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """:func:`wilson_interval` for one proportion."""
    low, high = wilson_interval(np.array([successes]), np.array([n]), z)
    return float(low[0]), float(high[0])

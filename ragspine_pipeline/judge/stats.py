"""Statistics for LLM-judge scores. Pure: numpy, scipy and krippendorff only.

A judge gives each case an integer score from 1 to 5; a case passes when its score >= a threshold.

- ``median_score``: one judgment repeated N times (``judge_repeat``) is summarised by the median.
- ``bootstrap_interval``: percentile bootstrap confidence interval of a mean (mean score, or pass rate
  when the values are 0.0/1.0), reproducible under a seed.
- ``score_summary``: n, mean, pass rate and their intervals for one metric over cases.
- ``self_consistency``: how often repeated judgments of the same item agree, and by how much they differ.
- ``krippendorff_alpha``: ordinal agreement between judge scores and human labels.

Policy: not applicable items and errors are excluded from the denominator, and the denominator is
reported (``n``, ``excluded``); the result is never NaN: undefined values are ``None``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

SCORE_DOMAIN = (1, 2, 3, 4, 5)


def bootstrap_interval(
    values, *, level: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap confidence interval of the mean of ``values``.

    ``n_resamples`` samples of size n are drawn with replacement from ``values``; the interval is the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of their means (``scipy.stats.bootstrap``,
    ``method="percentile"``, generator ``numpy.random.default_rng(seed)``). Same values and seed give the
    same interval. For a pass rate pass 0.0/1.0 values: the interval then lies in [0, 1].

    Edge cases: empty input -> ``None``; one value, or all values equal -> ``(v, v)`` (scipy needs two
    distinct observations); any NaN -> ``ValueError`` (exclude not applicable items first). The interval
    is widened to contain the sample mean if needed, so ``low <= mean <= high`` always holds.
    """
    data = np.asarray(values, dtype=float)
    if data.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {data.shape}")
    if np.isnan(data).any():
        raise ValueError("values contain NaN: exclude not applicable items before computing an interval")
    if data.size == 0:
        return None
    if np.all(data == data[0]):
        return (float(data[0]), float(data[0]))
    # Imported here: scipy.stats costs ~0.5 s to import, and every process that loads the code location
    # imports this module (the judge's report is an asset) while few of them ever compute an interval.
    from scipy import stats as sps

    result = sps.bootstrap(
        (data,),
        np.mean,
        n_resamples=n_resamples,
        vectorized=True,
        axis=-1,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    mean = float(np.mean(data))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return (min(low, mean), max(high, mean))


def median_score(scores: Sequence[int]) -> float | None:
    """The score of one judgment asked N times (``judge_repeat``): the median of its N scores.

    Odd count: the middle score; even count: the midpoint of the two middle scores ([3, 4] -> 3.5).
    Empty list -> ``None``.
    """
    if len(scores) == 0:
        return None
    return float(statistics.median(scores))


def self_consistency(repeats: Sequence[Sequence[int]]) -> dict:
    """Self-consistency of the judge across repeated judgments of the same items.

    Only items with at least 2 scores count (n of them). With ``m_i`` the median of item i's scores:

    - ``exact_agreement`` = (items whose scores are all equal) / n
    - ``mean_abs_deviation`` = (1/n) * sum_i mean_j |s_ij - m_i|

    Both are ``None`` when n == 0; floats are rounded to 4 decimals.
    """
    items = [list(item) for item in repeats if len(item) >= 2]
    n = len(items)
    if n == 0:
        return {"n": 0, "exact_agreement": None, "mean_abs_deviation": None}
    agree = sum(1 for item in items if len(set(item)) == 1)
    deviations = []
    for item in items:
        med = statistics.median(item)
        deviations.append(sum(abs(s - med) for s in item) / len(item))
    return {
        "n": n,
        "exact_agreement": round(agree / n, 4),
        "mean_abs_deviation": round(float(sum(deviations) / n), 4),
    }


def krippendorff_alpha(judge: Sequence[float | None], human: Sequence[float | None]) -> dict:
    """Ordinal Krippendorff's alpha between judge scores and human labels (position i = same item).

    alpha = 1 - D_o / D_e, with observed disagreement D_o and expected (chance) disagreement D_e under
    the ordinal distance, over the 2 x n reliability matrix (``krippendorff.alpha``,
    ``level_of_measurement="ordinal"``, ``value_domain=[1, 2, 3, 4, 5]``). 1.0 is perfect agreement,
    0 chance level, negative systematic disagreement.

    Pairs where either side is ``None`` are dropped; ``n`` is the number of remaining pairs.
    ``alpha`` is ``None`` when n < 2 or when it is undefined: all values identical gives D_e = 0, which
    the library returns as NaN. Sequences of different lengths, NaN or scores outside 1..5 raise
    ``ValueError``. alpha is rounded to 4 decimals.
    """
    if len(judge) != len(human):
        raise ValueError(f"judge and human must have the same length, got {len(judge)} and {len(human)}")
    pairs = [(float(j), float(h)) for j, h in zip(judge, human, strict=True) if None not in (j, h)]
    matrix = np.array(pairs, dtype=float).reshape(-1, 2).T
    if np.isnan(matrix).any():
        raise ValueError("scores contain NaN: use None for items that were not judged or labelled")
    n = len(pairs)
    if n < 2 or np.all(matrix == matrix[0, 0]):
        return {"alpha": None, "n": n}
    import krippendorff  # the judge extra: the code location loads without it, and judges only with it

    with np.errstate(divide="ignore", invalid="ignore"):
        try:
            value = float(
                krippendorff.alpha(
                    reliability_data=matrix, level_of_measurement="ordinal", value_domain=list(SCORE_DOMAIN)
                )
            )
        except ZeroDivisionError:
            return {"alpha": None, "n": n}
    if not np.isfinite(value):
        return {"alpha": None, "n": n}
    return {"alpha": round(value, 4), "n": n}


def score_summary(scores: Sequence[float | None], *, threshold: float, seed: int = 0) -> dict:
    """Summary of one judge metric (one model or combined) over cases.

    ``None`` entries (errors, not judged) are excluded from every denominator and counted in
    ``excluded``. Over the n judged scores s_i:

    - ``mean`` = (1/n) * sum_i s_i, ``mean_ci`` its bootstrap interval
    - ``pass_rate`` = |{i : s_i >= threshold}| / n, ``pass_rate_ci`` the bootstrap interval of the 0/1
      pass indicators

    Intervals come from ``bootstrap_interval`` with ``seed``. With n == 0 every statistic is ``None``.
    Floats are rounded to 4 decimals.
    """
    judged = [float(s) for s in scores if s is not None]
    excluded = len(scores) - len(judged)
    passed = [1.0 if s >= threshold else 0.0 for s in judged]
    mean_ci = bootstrap_interval(judged, seed=seed)
    pass_ci = bootstrap_interval(passed, seed=seed)
    n = len(judged)
    return {
        "n": n,
        "excluded": excluded,
        "mean": round(float(np.mean(judged)), 4) if n else None,
        "mean_ci": [round(v, 4) for v in mean_ci] if mean_ci is not None else None,
        "pass_rate": round(float(np.mean(passed)), 4) if n else None,
        "pass_rate_ci": [round(v, 4) for v in pass_ci] if pass_ci is not None else None,
        "threshold": threshold,
    }

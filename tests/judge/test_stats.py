"""Statistics for LLM-judge scores: intervals, self-consistency, agreement with humans, summaries."""

from __future__ import annotations

import math
import warnings

import krippendorff
import numpy as np
import pytest

from ragspine_pipeline.judge.stats import (
    bootstrap_interval,
    krippendorff_alpha,
    median_score,
    score_summary,
    self_consistency,
)

SCORES = [1, 2, 3, 3, 4, 4, 4, 5, 5, 2, 3, 4]


# --- bootstrap_interval ---------------------------------------------------------------------------------


def test_bootstrap_is_reproducible_under_a_seed_and_changes_with_it():
    first = bootstrap_interval(SCORES, seed=7)
    assert bootstrap_interval(SCORES, seed=7) == first
    assert bootstrap_interval(np.array(SCORES, dtype=float), seed=7) == first
    # Few distinct scores put the percentiles on a coarse lattice of possible means: use varied values.
    varied = [0.1 * i + (i % 7) for i in range(40)]
    assert bootstrap_interval(varied, seed=8) == bootstrap_interval(varied, seed=8)
    assert bootstrap_interval(varied, seed=8) != bootstrap_interval(varied, seed=9)


def test_bootstrap_contains_the_sample_mean_and_returns_python_floats():
    low, high = bootstrap_interval(SCORES)
    mean = sum(SCORES) / len(SCORES)
    assert type(low) is float and type(high) is float
    assert low <= mean <= high
    assert low < high
    assert low >= 1.0 and high <= 5.0


def test_bootstrap_interval_narrows_as_n_grows():
    small = bootstrap_interval([1, 2, 3, 4, 5] * 4)
    large = bootstrap_interval([1, 2, 3, 4, 5] * 400)
    assert (large[1] - large[0]) < (small[1] - small[0]) / 5


def test_bootstrap_level_widens_the_interval():
    narrow = bootstrap_interval(SCORES, level=0.5)
    wide = bootstrap_interval(SCORES, level=0.99)
    assert wide[0] <= narrow[0] and narrow[1] <= wide[1]


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], None), ([4], (4.0, 4.0)), ([3, 3, 3, 3], (3.0, 3.0)), ([1.0, 1.0], (1.0, 1.0))],
)
def test_bootstrap_degenerate_inputs_never_give_nan_nor_warn(values, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bootstrap_interval(values) == expected


def test_bootstrap_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_interval([1.0, float("nan"), 3.0])


def test_bootstrap_does_not_warn_on_regular_data():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bootstrap_interval([0.0, 1.0])
        bootstrap_interval(SCORES)


def test_pass_rate_interval_lies_within_zero_and_one():
    for passes in ([0.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0] * 9 + [1.0], [1.0] * 30 + [0.0]):
        low, high = bootstrap_interval(passes)
        rate = sum(passes) / len(passes)
        assert 0.0 <= low <= rate <= high <= 1.0


# --- median_score ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "expected"),
    [([], None), ([4], 4.0), ([3, 4], 3.5), ([5, 1, 4], 4.0), ([1, 2, 4, 5], 3.0), ([2, 2, 5, 5], 3.5)],
)
def test_median_of_repeats(scores, expected):
    result = median_score(scores)
    assert result == expected
    if result is not None:
        assert isinstance(result, float)


# --- self_consistency -----------------------------------------------------------------------------------


def test_self_consistency_when_all_repeats_agree():
    assert self_consistency([[4, 4, 4], [2, 2], [5, 5, 5]]) == {
        "n": 3,
        "exact_agreement": 1.0,
        "mean_abs_deviation": 0.0,
    }


def test_self_consistency_on_known_disagreements():
    # [5] has a single judgment: ignored. Medians 3, 4, 3; mean |s - median|: 0, 2/3, 2.
    result = self_consistency([[3, 3, 3], [2, 4, 4], [1, 5], [5]])
    assert result == {"n": 3, "exact_agreement": round(1 / 3, 4), "mean_abs_deviation": round(8 / 9, 4)}


def test_self_consistency_without_repeated_items():
    expected = {"n": 0, "exact_agreement": None, "mean_abs_deviation": None}
    assert self_consistency([]) == expected
    assert self_consistency([[3], [], [5]]) == expected


# --- krippendorff_alpha ---------------------------------------------------------------------------------


def test_alpha_is_one_on_perfect_agreement_with_variation():
    assert krippendorff_alpha([1, 2, 3, 4, 5, 3], [1, 2, 3, 4, 5, 3]) == {"alpha": 1.0, "n": 6}


def test_alpha_is_negative_when_the_judge_reverses_the_scale():
    result = krippendorff_alpha([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
    assert result["n"] == 5
    assert result["alpha"] < 0


def test_alpha_on_partial_agreement_matches_a_hand_calculation():
    # Pairs (1,1), (2,2), (3,2). Value counts n_1=2, n_2=3, n_3=1, n=6 (4 and 5 unused).
    # Ordinal distances: d(1,2)=((2+3)/2)^2=6.25, d(2,3)=((3+1)/2)^2=4, d(1,3)=(6-(2+1)/2)^2=20.25.
    # Observed: only (3,2) disagrees, o_23=o_32=1 -> D_o = 2*4/6.
    # Expected: 2*(2*3*6.25 + 3*1*4 + 2*1*20.25) / (6*5) = 6.  alpha = 1 - (8/6)/6 = 7/9.
    assert krippendorff_alpha([1, 2, 3], [1, 2, 2]) == {"alpha": round(7 / 9, 4), "n": 3}


def test_alpha_drops_pairs_with_a_missing_side_and_reports_n():
    judge = [1, None, 3, 4, 5, 2, None, 4]
    human = [1, 2, None, 4, 4, 3, None, 5]
    result = krippendorff_alpha(judge, human)
    assert result["n"] == 5
    kept = [[1, 4, 5, 2, 4], [1, 4, 4, 3, 5]]
    expected = krippendorff.alpha(
        reliability_data=kept, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
    )
    assert result["alpha"] == round(float(expected), 4)
    assert 0 < result["alpha"] < 1


@pytest.mark.parametrize(
    ("judge", "human", "n"),
    [
        ([3, 3, 3], [3, 3, 3], 3),  # no variation: the library divides 0 by 0
        ([4, None], [4, 2], 1),  # fewer than 2 pairs
        ([2], [5], 1),
        ([], [], 0),
        ([None, 3], [1, None], 0),
    ],
)
def test_alpha_is_none_not_nan_when_undefined(judge, human, n):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert krippendorff_alpha(judge, human) == {"alpha": None, "n": n}


def test_alpha_rejects_misaligned_or_out_of_domain_scores():
    with pytest.raises(ValueError, match="same length"):
        krippendorff_alpha([1, 2, 3], [1, 2])
    with pytest.raises(ValueError):
        krippendorff_alpha([1, 2, 6], [1, 2, 3])
    with pytest.raises(ValueError, match="NaN"):
        krippendorff_alpha([1, 2, float("nan")], [1, 2, 3])


# --- score_summary --------------------------------------------------------------------------------------


def test_score_summary_excludes_none_from_every_denominator():
    summary = score_summary([5, None, 4, 2, None, 3], threshold=4)
    assert summary["n"] == 4
    assert summary["excluded"] == 2
    assert summary["mean"] == 3.5
    assert summary["pass_rate"] == 0.5
    assert summary["threshold"] == 4
    low, high = summary["mean_ci"]
    assert 2.0 <= low <= 3.5 <= high <= 5.0
    p_low, p_high = summary["pass_rate_ci"]
    assert 0.0 <= p_low <= 0.5 <= p_high <= 1.0


def test_score_summary_intervals_follow_the_seed():
    scores = [1, 5, 3, 4, 2, 5, 4, 3, 1, 4]
    assert score_summary(scores, threshold=4, seed=3) == score_summary(scores, threshold=4, seed=3)
    assert score_summary(scores, threshold=4, seed=3)["mean_ci"] == [
        round(v, 4) for v in bootstrap_interval(scores, seed=3)
    ]


def test_score_summary_with_nothing_judged():
    assert score_summary([None, None], threshold=4) == {
        "n": 0,
        "excluded": 2,
        "mean": None,
        "mean_ci": None,
        "pass_rate": None,
        "pass_rate_ci": None,
        "threshold": 4,
    }


def test_score_summary_all_pass_has_degenerate_pass_interval():
    summary = score_summary([4, 5, 5], threshold=4)
    assert summary["pass_rate"] == 1.0
    assert summary["pass_rate_ci"] == [1.0, 1.0]
    values = [summary["mean"], summary["pass_rate"], *summary["mean_ci"]]
    assert not any(math.isnan(v) for v in values)

"""Significance-aware nightly regressions: the test's power and false-alarm rate by simulation, and the
rules of which rates are tested at all."""

from __future__ import annotations

import numpy as np
import pytest

from ragspine_pipeline.scoring.significance import drop_p_values, significant_drops

NIGHTS = 4000
N_SLICE, BASE_DAYS, RATE = 400, 7, 0.90


def simulate(rng: np.random.Generator, today_rate: float) -> np.ndarray:
    """p-values of NIGHTS simulated nights: a 400-sample slice today vs 7 × 400 baseline samples."""
    today = rng.binomial(N_SLICE, today_rate, NIGHTS)
    base = rng.binomial(N_SLICE * BASE_DAYS, RATE, NIGHTS)
    return drop_p_values(today, N_SLICE, base, N_SLICE * BASE_DAYS, worse="lower")


def test_with_no_real_change_false_alarms_stay_near_alpha():
    false_alarms = (simulate(np.random.default_rng(7), RATE) < 0.05).mean()
    assert 0.03 <= false_alarms <= 0.07, false_alarms


def test_a_five_point_drop_in_a_slice_of_400_is_detected_in_most_nights():
    detected = (simulate(np.random.default_rng(11), RATE - 0.05) < 0.05).mean()
    assert detected >= 0.80, detected


def test_a_rise_is_not_a_drop_and_no_variation_is_no_evidence():
    assert drop_p_values(390, 400, 2500, 2800, worse="lower") > 0.5  # better than the baseline
    assert drop_p_values(80, 400, 280, 2800, worse="higher") < 0.001  # refusals up from 10 % to 20 %
    assert drop_p_values(400, 400, 2800, 2800) == 1.0  # everything passes on both sides


def summary(day: str, compliance: tuple[int, int], slice_compliance: tuple[int, int] | None = None) -> dict:
    def rate(x: int, n: int) -> dict:
        return {"value": x / n, "n": n, "successes": x}

    out = {"day": day, "metrics": {"compliance": rate(*compliance)}, "slices": {}}
    if slice_compliance:
        out["slices"] = {"channel": {"api": {"metrics": {"compliance": rate(*slice_compliance)}}}}
    return out


HISTORY = [summary(f"2026-11-{d:02d}", (1800, 2000), (360, 400)) for d in range(10, 20)]


def test_a_significant_drop_is_flagged_for_its_slice_only():
    today = summary("2026-11-20", (1790, 2000), (320, 400))  # overall flat, api from 90 % to 80 %
    tests = {t.slice_name: t for t in significant_drops(today, HISTORY)}
    assert not tests["all traffic"].significant
    api = tests["channel=api"]
    assert api.significant and api.baseline_days == 7 and api.baseline_n == 7 * 400
    assert api.p_value < 1e-6 and api.to_dict()["reason"] == "tested"


def test_small_slices_and_days_without_history_are_not_tested():
    today = summary("2026-11-20", (1700, 2000), (30, 60))
    tests = {t.slice_name: t for t in significant_drops(today, HISTORY, min_n=100)}
    assert not tests["channel=api"].significant and tests["channel=api"].reason.startswith("too few samples")
    first = significant_drops(summary("2026-11-01", (10, 2000)), HISTORY)
    assert [t.reason for t in first] == ["no baseline days"]  # later days are not a baseline


@pytest.mark.parametrize("window", [1, 3, 7])
def test_the_baseline_is_the_trailing_window(window):
    today = summary("2026-11-20", (1800, 2000))
    [test] = significant_drops(today, HISTORY, window=window)
    assert test.baseline_days == window and test.baseline_n == 2000 * window

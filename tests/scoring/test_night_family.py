"""The night's error control in two stages (rates, then their tests), and the correlation of night
effects the multi-night windows allow for."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest

from ragspine_pipeline.scoring.drop_model import inflation, night_rho
from ragspine_pipeline.scoring.drop_series import ALL_TRAFFIC
from ragspine_pipeline.scoring.night_family import two_stage_bh
from ragspine_pipeline.scoring.random_effects import weighted_bh
from ragspine_pipeline.scoring.significance import drop_tests


def test_an_outage_of_one_rate_no_longer_lowers_the_bar_for_the_others():
    outage = [1e-9] * 27  # one of six rates down in every slice and window
    unlucky = [0.0006] + [0.5] * 26  # another rate, one unlucky test
    p = np.array(outage + unlucky + [0.5] * 27 * 4)
    weights = np.ones(len(p))
    groups = ["outage"] * 27 + ["unlucky"] * 27 + [f"rate{i // 27}" for i in range(27 * 4)]
    flat = weighted_bh(p, weights)
    assert flat[27] <= 0.02  # one flat family: the 27 rejections make the unlucky test significant
    staged = two_stage_bh(p, weights, groups, 0.02)
    assert staged[27] > 0.02  # in two stages the outage is one selected rate, not 27 rejections
    assert (staged[:27] <= 0.02).all()


def test_with_one_real_change_the_two_stages_are_the_flat_procedure():
    rng = np.random.default_rng(4)
    p = rng.uniform(size=120)
    p[7] = 1e-5
    weights = rng.choice([1.0, 4.0, 12.0], size=120)
    groups = [f"rate{i % 6}" for i in range(120)]
    assert two_stage_bh(p, weights, groups, 0.02)[7] == pytest.approx(weighted_bh(p, weights)[7])


def correlated_history(phi: float, seed: int, nights: int = 60) -> list[dict]:
    """All traffic only: 5,000 traces a night, a rate at 90 % whose log-odds carry AR(1) night effects
    (φ, marginal SD 0.15)."""
    rng = np.random.default_rng(seed)
    effect, days = 0.0, []
    for night in range(nights):
        effect = phi * effect + rng.normal(0, 0.15 * np.sqrt(1 - phi**2))
        p = 1 / (1 + np.exp(-(np.log(9) + effect)))
        x = int(rng.binomial(5000, p))
        entry = {"value": x / 5000, "n": 5000, "successes": x}
        day = (date(2026, 1, 1) + timedelta(days=night)).isoformat()
        days.append({"day": day, "n": 5000, "metrics": {"retrieved_citation_rate": entry}})
    return days


def test_correlated_nights_are_seen_and_allowed_for_and_independent_ones_cost_nothing():
    rho = {}
    for phi in (0.0, 0.8):
        used = []
        for seed in range(8):
            days = correlated_history(phi, seed)
            night = drop_tests(days[-1], days[:-1])
            used.append(next(t for t in night.tests if t.slice == ALL_TRAFFIC and t.nights == 3).rho)
        rho[phi] = np.array(used)
    assert np.mean(rho[0.0] == 0.0) >= 0.75  # less one standard error: an uncorrelated history is 0
    assert rho[0.8].mean() > 0.4  # a correlated one shows
    # What a correlated window's own mean hides of τ²: none without correlation, a third at φ = 0.8.
    assert inflation(0.0, 28) == 1.0 and 1.2 < inflation(0.8, 28) < 1.45


def test_the_lag_one_correlation_comes_from_the_fits_it_is_given():
    from ragspine_pipeline.scoring.drop_model import Fit

    independent = Fit(1e-4, [], [], (0.0, 2e-4 * 27, 27))
    correlated = Fit(1e-4, [], [], (0.8e-4 * 27, 2e-4 * 27, 27))
    assert night_rho([independent]) == 0.0
    assert 0.0 < night_rho([correlated]) < 0.8  # less one standard error of the autocovariance
    assert night_rho([]) == 0.0

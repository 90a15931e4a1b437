"""The nightly sample size from a target (``production: {sample: ...}``): sized from the previous nights'
summaries with ``scoring.power.nightly_sample_size``, capped by ``max``, never below the fixed size, the
fixed size without a target or a history, and a warning (with ``max``) when the between-day variance
alone hides the drop. Daily summaries are drawn as in ``tests/scoring/test_significance.py``."""

from __future__ import annotations

import math
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

import ragspine_pipeline
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.scoring import power, sample_plan
from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.random_effects import between_day_variance, variance_stabilised
from ragspine_pipeline.scoring.significance import drop_tests

FIRST = date(2026, 1, 1)
# (metric, rate in its own direction, observations per trace)
RATES = (
    ("production_compliance", 0.95, 1.0),
    ("retrieved_citation_rate", 0.90, 0.93),
    ("lexical_faithfulness", 0.85, 1.8),
    ("refusal_rate", 0.07, 1.0),
)
HIGHER_IS_WORSE = {"refusal_rate"}


def history(rng: np.random.Generator, nights: int, traces: int = 400, jitter: float = 0.0) -> list[dict]:
    """All-traffic daily summaries of ``traces`` traces; each rate's log-odds jitters by N(0, jitter²)."""
    days = []
    for night in range(nights):
        metrics = {}
        for metric, rate, share in RATES:
            logit = np.log(rate / (1 - rate)) + rng.normal(0, jitter)
            p = 1 / (1 + np.exp(-logit))
            n = round(traces * share)
            x = int(rng.binomial(n, p))
            metrics[metric] = {"value": x / n, "n": n, "successes": x}
        days.append({"day": (FIRST + timedelta(days=night)).isoformat(), "n": traces, "metrics": metrics})
    return days


def settings(**sample) -> DropSettings:
    return DropSettings.model_validate({"sample": sample})


def expected_size(plan: sample_plan.SamplePlan, fixed: int) -> int:
    """What the brief asks for, from the plan's own estimates: ``nightly_sample_size`` of the
    observations, over the observations per trace, capped by max and never below the fixed size."""
    need = plan.need
    design = power.NightlyDesign(rate=need.level, alpha=need.alpha, tau2=need.tau2, window=14)
    observations = power.nightly_sample_size(plan.target.detect, design, plan.target.power)
    traces = math.ceil(observations / need.per_trace - 1e-9)
    return max(fixed, min(traces, plan.target.max))


def test_the_size_is_nightly_sample_size_of_the_rates_own_history():
    days = history(np.random.default_rng(1), 30, traces=2000, jitter=0.15)
    plan = sample_plan.nightly_sample_plan(
        days, settings(detect=0.03, rate="production_compliance"), fixed=100
    )
    need = plan.need
    assert need.metric == "production_compliance" and need.nights == 28  # variance_window
    # τ² is significance's estimate over the same 28 nights, the level its random-effects mean.
    window = days[-28:]
    x = np.array([d["metrics"]["production_compliance"]["successes"] for d in window], dtype=float)
    n = np.array([d["metrics"]["production_compliance"]["n"] for d in window], dtype=float)
    y, v = variance_stabilised(x, n)
    tau2, _ = between_day_variance(y[None, :], v[None, :])
    assert need.tau2 == pytest.approx(tau2) and tau2 > 0
    w = 1 / (v[-14:] + tau2)
    assert need.level == pytest.approx(math.sin(np.sum(w * y[-14:]) / np.sum(w)) ** 2)
    assert need.alpha == pytest.approx(
        0.02 / sample_plan.nightly_tests(DropSettings())
    )  # no night ran drop tests yet
    assert plan.reason == "target" and plan.size == expected_size(plan, 100) > 100
    design = power.NightlyDesign(rate=need.level, alpha=need.alpha, tau2=need.tau2)
    assert plan.size == power.nightly_sample_size(0.03, design)  # one observation a trace
    # … and the size catches the target drop with the power asked for, one trace fewer does not.
    assert (
        power.nightly_power(plan.size, 0.03, design) >= 0.8 > power.nightly_power(plan.size - 1, 0.03, design)
    )
    assert plan.detectable <= 0.03
    summary = plan.to_dict()
    assert summary["size"] == plan.size and summary["rate"] == "production_compliance"
    assert summary["target"] == {"detect": 0.03, "power": 0.8, "rate": "production_compliance", "max": 20000}
    assert "production_compliance" in summary["why"] and "τ²" in summary["why"]


def test_a_rate_measured_on_more_than_one_observation_a_trace_needs_fewer_traces():
    days = history(np.random.default_rng(2), 20)
    plan = sample_plan.nightly_sample_plan(days, settings(detect=0.03, rate="lexical_faithfulness"), fixed=10)
    assert plan.need.per_trace == pytest.approx(1.8)
    assert plan.size == expected_size(plan, 10)


def test_the_default_rate_is_the_one_that_needs_the_most_traces():
    days = history(np.random.default_rng(3), 20)
    plans = {
        m: sample_plan.nightly_sample_plan(days, settings(detect=0.02, rate=m), fixed=1) for m, _, _ in RATES
    }
    chosen = sample_plan.nightly_sample_plan(days, settings(detect=0.02), fixed=1)
    # One the target cannot reach at all first (τ² estimated from 20 nights of 400 traces is noisy:
    # the nightly test uses the same estimate), then the most traces.
    most = max(plans, key=lambda m: (plans[m].need.traces is None, plans[m].need.traces or 0))
    assert chosen.need.metric == most and chosen.size == plans[most].size
    assert {plans[m].reason for m in plans} >= {"target", "unreachable"}
    refusal = plans["refusal_rate"]  # shown in its own direction, sized in the worse-is-lower one
    shown = refusal.to_dict()["level"]
    assert shown == pytest.approx(1 - refusal.need.level, abs=1e-4) and shown < 0.2


def test_the_size_is_capped_by_max_and_never_below_the_fixed_size():
    days = history(np.random.default_rng(4), 20)
    capped = sample_plan.nightly_sample_plan(
        days, settings(detect=0.01, rate="production_compliance", max=500), fixed=100
    )
    assert capped.reason == "capped" and capped.size == 500 and capped.need.traces > 500
    assert capped.detectable > 0.01  # what 500 traces do catch, stated
    floor = sample_plan.nightly_sample_plan(
        days, settings(detect=0.2, rate="production_compliance"), fixed=300
    )
    assert floor.reason == "floor" and floor.size == 300 and floor.need.traces < 300


def test_without_a_target_or_a_history_the_fixed_size():
    days = history(np.random.default_rng(5), 20)
    fixed = sample_plan.nightly_sample_plan(days, DropSettings(), fixed=200)
    assert (fixed.size, fixed.reason, fixed.need) == (200, "fixed", None)
    for few in ([], days[:4]):  # fewer than min_days (5) nights
        plan = sample_plan.nightly_sample_plan(few, settings(detect=0.02), fixed=200)
        assert (plan.size, plan.reason, plan.need) == (200, "no history", None)
    assert "no production.sample target" in fixed.to_dict()["why"]


def test_an_unreachable_target_warns_naming_the_rate_and_the_best_drop_and_uses_max():
    days = history(np.random.default_rng(6), 30, traces=2000, jitter=0.5)
    plan = sample_plan.nightly_sample_plan(
        days, settings(detect=0.01, rate="production_compliance", max=3000), 200
    )
    need = plan.need
    assert plan.reason == "unreachable" and plan.size == 3000 and need.traces is None
    design = power.NightlyDesign(rate=need.level, alpha=need.alpha, tau2=need.tau2)
    assert power.nightly_sample_size(0.01, design) is None
    assert need.best == pytest.approx(power.nightly_best_drop(design)) and need.best > 0.01
    assert "production_compliance" in plan.warning and f"{100 * need.best:.3g} points" in plan.warning
    assert plan.to_dict()["warning"] == plan.warning and plan.to_dict()["needed"] is None


def test_the_test_count_comes_from_the_latest_night_that_ran_drop_tests():
    days = history(np.random.default_rng(7), 12)
    days[-1] = {**days[-1], "drop_tests": drop_tests(days[-1], days[:-1]).to_dict()}
    tested = [t for t in days[-1]["drop_tests"]["tests"] if t["p_value"] is not None]
    assert tested and all(t["slice"] == "all traffic" for t in tested)
    plan = sample_plan.nightly_sample_plan(days, settings(detect=0.03), fixed=1)
    # All traffic only: the one-night tests weigh 4 × 3, the multi-night ones 4; the level is the
    # night's fdr (0.02) times the one-night test's share of the summed weights.
    one_night = sum(t["nights"] == 1 for t in tested)
    total = 12 * one_night + 4 * (len(tested) - one_night)
    assert plan.need.alpha == pytest.approx(0.02 * 12 / total)


def test_drop_settings_with_a_sample_target_read_back_the_same():
    given = DropSettings.model_validate({"fdr": 0.05, "sample": {"detect": 0.02, "rate": "refusal_rate"}})
    dumped = given.model_dump()
    assert dumped["sample"] == {"detect": 0.02, "power": 0.8, "rate": "refusal_rate", "max": 20000}
    assert DropSettings.model_validate(dumped) == given
    assert DropSettings.model_validate(DropSettings().model_dump()) == DropSettings()
    assert DropSettings().sample is None
    for bad in ({"detect": 0}, {"detect": 0.02, "rate": "nope"}, {"detect": 0.02, "power": 1.0},
                {"detect": 0.02, "max": 0}, {"detect": 0.02, "extra": 1}, {}):  # fmt: skip
        with pytest.raises(ValidationError):
            DropSettings.model_validate({"sample": bad})


def test_the_packaged_gates_configs_still_validate(tmp_path):
    package = Path(ragspine_pipeline.__file__).parent
    demo = load_config(package / "demo" / "gates.yaml", KNOWN_METRICS, Scope.WITH_REGISTRY)
    assert demo.production.sample is None
    template = (package / "project_template" / "gates.yaml").read_text().replace("{{SERVICE}}", "svc")
    (tmp_path / "gates.yaml").write_text(template)
    assert load_config(tmp_path / "gates.yaml", KNOWN_METRICS, Scope.WITH_REGISTRY).production.sample is None
    # The template's commented example, uncommented, is a valid target.
    example = [line for line in template.splitlines() if line.startswith("#   sample:")]
    assert len(example) == 1
    (tmp_path / "target.yaml").write_text("production:\n" + example[0].replace("#", "", 1) + "\n")
    target = load_config(tmp_path / "target.yaml", KNOWN_METRICS, Scope.WITH_REGISTRY).production.sample
    assert target is not None and target.detect == 0.02

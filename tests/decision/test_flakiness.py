"""Per-case flakiness over replays of the golden set: which cases flip, and how far the pass rate moves."""

from __future__ import annotations

import json
from datetime import date

import dagster as dg
import pytest

from ragspine_pipeline.decision.flakiness import flakiness, flakiness_sentence
from ragspine_pipeline.demo.build import init_demo
from tests.defs.declared import demo_definitions, demo_env


def test_flaky_cases_are_those_passed_on_some_replays_most_even_split_first():
    replays = [
        {"a": True, "b": True, "c": False, "d": True, "e": True},
        {"a": True, "b": False, "c": False, "d": False, "e": True},
        {"a": True, "b": True, "c": False, "d": False},  # "e" missing: not counted
    ]
    report = flakiness(replays)
    assert report["repeats"] == 3 and report["cases"] == 4 and report["flaky"] == 2
    assert report["flaky_cases"] == [{"qid": "b", "passed": 2, "of": 3}, {"qid": "d", "passed": 1, "of": 3}]
    assert report["pass_rates"] == [0.75, 0.25, 0.5]
    assert flakiness_sentence(report) == "2 of 4 cases are flaky over 3 replays (pass rate 0.2500–0.7500)"
    with pytest.raises(ValueError):
        flakiness([])


@pytest.mark.system  # a whole code-location run
def test_the_code_location_replays_the_golden_set_as_often_as_configured(tmp_path):
    init_demo(tmp_path / "demo", today=date(2026, 11, 22), traces_per_day=40)
    defs = demo_definitions(demo_env(tmp_path / "demo", tmp_path, RAGSPINE_REPLAY_REPEAT="3"))
    with dg.instance_for_test() as instance:
        # The golden path up to the decision (golden_evaluation writes metric_table and release_decision).
        selection = ["golden_set", "golden_traces", "metric_table", "release_decision"]
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey(name) for name in selection]
        )
    assert result.success
    [traces] = [
        e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("golden_traces")
    ]
    assert traces.materialization.metadata["replays"].value == 3
    report = json.loads(next((tmp_path / "reports" / "runs").glob("*/evaluation.json")).read_text())
    # The built-in engine is deterministic: three replays, no flaky case.
    assert report["flakiness"]["repeats"] == 3 and report["flakiness"]["flaky"] == 0
    assert report["flakiness"]["cases"] == report["n_cases"]

"""The daemon-free runner behind `make run` and `make demo-regression` (ragspine_pipeline.defs.local)."""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg
import pytest
from dagster._core.definitions.selector import InstigatorSelector
from dagster._core.scheduler.instigation import TickStatus

from ragspine_pipeline.defs.automation import EVALUATION_TAG
from ragspine_pipeline.defs.local import backfill_production, reeval_as_sensor_requests
from ragspine_pipeline.defs.sensor_tick import tick_sensor
from ragspine_pipeline.demo.build import init_demo, rebuild_index
from tests.defs.declared import demo_definitions, demo_env

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

TODAY = date(2026, 11, 22)
SENSOR_SELECTOR = InstigatorSelector(
    location_name="ragspine_pipeline", repository_name="__repository__", name="index_rebuild_sensor"
).get_id()


def test_reeval_runs_once_per_index_version_like_the_daemon(tmp_path):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=40)
    defs = demo_definitions(demo_env(tmp_path / "demo", tmp_path))
    with dg.instance_for_test() as instance:
        message, first = reeval_as_sensor_requests(defs, instance)
        assert first is not None and first.success, message
        assert first.dagster_run.tags["dagster/run_key"] == "index-demo-ix-0001"

        message, again = reeval_as_sensor_requests(defs, instance)
        assert again is None and "already evaluated" in message

        newer = rebuild_index(tmp_path / "demo", degraded=True)["index_version"]
        message, blocked = reeval_as_sensor_requests(defs, instance)
        # A blocked release is a successful evaluation run, tagged with its verdict.
        assert blocked is not None and blocked.success
        assert instance.get_run_by_id(blocked.run_id).tags["ragspine/decision"] == "block"
        assert blocked.dagster_run.tags["ragspine/index_version"] == newer
        assert blocked.dagster_run.tags[EVALUATION_TAG] == f"@{newer}"  # the run queue's unit

        # What the UI shows: each run launched by the sensor from a stored tick, and the three ticks
        # under the sensor (found by its selector, as the webserver looks them up), newest first.
        ticks = instance.get_ticks("any origin: ticks are keyed by selector", SENSOR_SELECTOR)
        assert [t.status for t in ticks] == [TickStatus.SUCCESS, TickStatus.SKIPPED, TickStatus.SUCCESS]
        assert ticks[1].skip_reason.startswith("index demo-ix-0001 was already evaluated")
        for tick, run in ((ticks[0], blocked), (ticks[2], first)):
            assert (
                tick.run_ids == [run.run_id] and tick.cursor == run.dagster_run.tags["ragspine/index_version"]
            )
            assert run.dagster_run.tags["dagster/sensor_name"] == "index_rebuild_sensor"
            assert run.dagster_run.tags["dagster/tick"] == str(tick.tick_id)
            assert run.dagster_run.job_name == "reeval_on_index_rebuild"


def test_a_run_key_already_launched_is_a_skipped_tick_even_without_a_cursor(tmp_path):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=40)
    defs = demo_definitions(demo_env(tmp_path / "demo", tmp_path))
    resources = {"index_manifest": defs.resources["index_manifest"]}
    index_rebuild_sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    with dg.instance_for_test() as instance:
        first = tick_sensor(index_rebuild_sensor, instance, cursor=None, resources=resources)
        job = defs.resolve_job_def("reeval_on_index_rebuild")
        instance.create_run_for_job(job, run_id=first.runs[0].run_id, tags=first.runs[0].tags)
        again = tick_sensor(index_rebuild_sensor, instance, cursor=None, resources=resources)
    assert (
        again.runs == [] and again.skip_reason == "run key index-demo-ix-0001 already launched by this sensor"
    )


def test_the_backfill_scores_only_the_days_not_yet_on_the_instance(tmp_path):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=40)
    defs = demo_definitions(demo_env(tmp_path / "demo", tmp_path))
    days = [(TODAY - timedelta(days=back)).isoformat() for back in (3, 2, 1)]
    with dg.instance_for_test() as instance:
        first = backfill_production(defs, instance, days[:2])
        assert len(first) == 2 and all(run.success for run in first)
        second = backfill_production(defs, instance, days)
        assert len(second) == 1 and second[0].dagster_run.tags["dagster/partition"] == days[2]
        assert set(instance.get_materialized_partitions(dg.AssetKey("production_metrics"))) == set(days)
    assert sorted(p.name for p in (tmp_path / "reports" / "production").iterdir()) == [
        f"{day}.json" for day in days
    ]


def test_a_day_outside_the_production_days_is_one_line_and_nothing_runs(tmp_path, monkeypatch, capsys):
    from ragspine_pipeline.defs import local

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("RAGSPINE_HOME", str(tmp_path / "demo"))
    assert local.main(["run", "--partition", "2025-12-31"]) == 2  # the tests' partitions start 2026-01-01
    error = capsys.readouterr().err
    assert error.startswith(
        "--partition 2025-12-31: not a production day of this deployment (Daily, starting"
    )
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
        assert instance.get_runs() == []

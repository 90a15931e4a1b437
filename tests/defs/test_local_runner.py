"""The daemon-free runner behind `make run` and `make demo-regression` (ragspine_pipeline.defs.local)."""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg

from ragspine_pipeline.definitions import build_definitions
from ragspine_pipeline.defs.local import backfill_production, reeval_as_sensor_requests
from ragspine_pipeline.defs.production import production_metrics
from ragspine_pipeline.demo.build import init_demo, rebuild_index
from tests.defs.test_code_location import demo_resources

TODAY = date(2026, 11, 22)


def test_reeval_runs_once_per_index_version_like_the_daemon(tmp_path):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=40)
    defs = build_definitions(demo_resources(tmp_path / "demo", tmp_path))
    with dg.instance_for_test() as instance:
        message, first = reeval_as_sensor_requests(defs, instance)
        assert first is not None and first.success, message
        assert first.dagster_run.tags["dagster/run_key"] == "index-demo-ix-0001"

        message, again = reeval_as_sensor_requests(defs, instance)
        assert again is None and "already evaluated" in message

        newer = rebuild_index(tmp_path / "demo", degraded=True)["index_version"]
        message, blocked = reeval_as_sensor_requests(defs, instance)
        assert blocked is not None and not blocked.success  # the blocking gate checks fail the run
        assert blocked.dagster_run.tags["ragspine/index_version"] == newer


def test_the_backfill_scores_only_the_days_not_yet_on_the_instance(tmp_path):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=40)
    defs = build_definitions(demo_resources(tmp_path / "demo", tmp_path))
    days = [(TODAY - timedelta(days=back)).isoformat() for back in (3, 2, 1)]
    with dg.instance_for_test() as instance:
        first = backfill_production(defs, instance, days[:2])
        assert len(first) == 2 and all(run.success for run in first)
        second = backfill_production(defs, instance, days)
        assert len(second) == 1 and second[0].dagster_run.tags["dagster/partition"] == days[2]
        assert set(instance.get_materialized_partitions(production_metrics.key)) == set(days)
    assert sorted(p.name for p in (tmp_path / "reports" / "production").iterdir()) == [
        f"{day}.json" for day in days
    ]

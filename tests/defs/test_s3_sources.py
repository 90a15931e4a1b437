"""The trace store and the index manifest on S3: moto's server mode on loopback, a real HTTP endpoint."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.automation import run_key
from ragspine_pipeline.demo.build import init_demo
from tests.defs.declared import demo_definitions

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

TODAY = date(2026, 11, 22)
DAY = "2026-11-19"  # the demo day with malformed lines and a duplicate request id


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    init_demo(root, today=TODAY, traces_per_day=120)
    return root


def upload(client, bucket: str, demo: Path) -> None:
    for path in sorted((demo / "traces").rglob("*.jsonl*")):
        client.upload_file(str(path), bucket, f"traces/{path.relative_to(demo / 'traces').as_posix()}")
    client.upload_file(str(demo / "index" / "manifest.json"), bucket, "index/manifest.json")


def s3_defs(demo: Path, out: Path, endpoint: str, bucket: str, manifest_key: str = "index/manifest.json"):
    env = {
        "RAGSPINE_HOME": str(demo),
        "RAGSPINE_REPORTS": str(out / "reports"),
        "RAGSPINE_WORK": str(out / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(out / "alerts" / "outbox.jsonl"),
        "RAGSPINE_SAMPLE_SIZE": "50",
        "RAGSPINE_TRACE_STORE": f"s3://{bucket}/traces",
        "RAGSPINE_INDEX_MANIFEST": f"s3://{bucket}/{manifest_key}",
        "RAGSPINE_S3_ENDPOINT_URL": endpoint,
    }
    return demo_definitions(env)


def local_defs(demo: Path, out: Path):
    env = {
        "RAGSPINE_HOME": str(demo),
        "RAGSPINE_REPORTS": str(out / "reports"),
        "RAGSPINE_WORK": str(out / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(out / "alerts" / "outbox.jsonl"),
        "RAGSPINE_SAMPLE_SIZE": "50",
    }
    return demo_definitions(env)


def nightly(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("nightly_eval").execute_in_process(
        instance=instance, partition_key=DAY, raise_on_error=False
    )


def test_the_nightly_sample_from_s3_equals_the_one_from_the_local_store(demo, bucket, s3_endpoint, tmp_path):
    name, client = bucket
    upload(client, name, demo)
    with dg.instance_for_test() as instance:
        from_s3 = nightly(s3_defs(demo, tmp_path / "s3", s3_endpoint, name), instance)
        local = nightly(local_defs(demo, tmp_path / "local"), instance)
    assert from_s3.success and local.success
    sample = Path("work/production") / f"dt={DAY}" / "sample.jsonl"
    assert (tmp_path / "s3" / sample).read_bytes() == (tmp_path / "local" / sample).read_bytes()
    metadata = next(
        e.materialization.metadata
        for e in from_s3.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("production_traces")
    )
    assert metadata["store"].value.startswith(f"s3://{name}/traces")
    assert metadata["quarantined"].value >= 2 and metadata["duplicates"].value >= 1  # the demo's bad lines
    quarantine = tmp_path / "s3" / "work" / "production" / f"dt={DAY}" / "quarantine.jsonl"
    reasons = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert all(r["source"] and r["line"] for r in reasons) and len(reasons) == metadata["quarantined"].value
    summary = json.loads((tmp_path / "s3" / "reports" / "production" / f"{DAY}.json").read_text())
    assert summary["n"] == 50 and "refusal_rate" in summary["metrics"]


def test_the_sensor_reads_the_manifest_from_s3(demo, bucket, s3_endpoint, tmp_path):
    name, client = bucket
    upload(client, name, demo)
    version = json.loads((demo / "index" / "manifest.json").read_text())["index_version"]
    defs = s3_defs(demo, tmp_path, s3_endpoint, name)
    index_rebuild_sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    resources = {"index_manifest": defs.resources["index_manifest"]}
    with dg.instance_for_test() as instance:
        first = index_rebuild_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert [r.run_key for r in first.run_requests] == [run_key(version)]
        client.put_object(Bucket=name, Key="index/manifest.json", Body=json.dumps({"index_version": "ix-9"}))
        newer = index_rebuild_sensor(
            dg.build_sensor_context(instance=instance, cursor=version, resources=resources)
        )
        assert [r.run_key for r in newer.run_requests] == [run_key("ix-9")] and newer.cursor == "ix-9"

        missing = s3_defs(demo, tmp_path, s3_endpoint, name, manifest_key="nowhere/manifest.json")
        context = dg.build_sensor_context(
            instance=instance, resources={"index_manifest": missing.resources["index_manifest"]}
        )
        outcome = missing.resolve_sensor_def("index_rebuild_sensor")(context)
    assert isinstance(outcome, dg.SkipReason) and "nowhere/manifest.json" in outcome.skip_message

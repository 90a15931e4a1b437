"""The deployed topology end to end: a PostgreSQL instance, steps on two Celery workers (RabbitMQ broker,
Redis results) whose working folders are private, and every hand-off through S3 (a moto server on
loopback) or PostgreSQL. The whole graph must decide exactly what the embedded run decides.

Each run gets its own PostgreSQL database, RabbitMQ vhost and Redis database number; the test skips,
with the reason, when any of them (or the deploy extra) is missing.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ragspine_pipeline.decision.release import ReleaseDecision
from ragspine_pipeline.defs.io import to_table
from ragspine_pipeline.reports.metric_table import SCHEMA
from tests.conftest import load_factor, pg_instance_env, pg_location
from tests.defs.declared import demo_definitions
from tests.defs.test_local_crash import DAY, environment, runner

pytestmark = pytest.mark.system  # Celery workers, RabbitMQ, Redis, PostgreSQL

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "celery" / "dagster.yaml"
RABBIT = "pyamqp://guest:guest@127.0.0.1:5672"
REDIS = ("127.0.0.1", 6379)
WORKERS = 2


@pytest.fixture
def vhost():
    """A fresh RabbitMQ vhost (guest has every permission on it), deleted afterwards."""
    missing = "dagster-celery is not installed (pip install -e '.[deploy]')"
    pytest.importorskip("dagster_celery", reason=missing)
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        pytest.skip("rabbitmqctl is not on PATH: cannot make a RabbitMQ vhost for this run")
    name = f"ragspine-{uuid.uuid4().hex[:10]}"
    made = subprocess.run([ctl, "add_vhost", name], capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"RabbitMQ is not usable on 127.0.0.1:5672: {' '.join(made.stderr.split())[:300]}")
    subprocess.run([ctl, "set_permissions", "-p", name, "guest", ".*", ".*", ".*"], check=True, timeout=60)
    try:
        yield name
    finally:
        subprocess.run([ctl, "delete_vhost", name], capture_output=True, timeout=60)


@pytest.fixture
def redis_db():
    """A Redis database number (1–15) nobody else uses while this test runs, flushed before and after.

    Another run of the suite may be using Redis at the same moment: a number is claimed with a lease key
    in database 0 (SET NX, expiring after an hour in case this process dies), released afterwards."""
    redis = pytest.importorskip("redis", reason="redis (the Python client) is not installed")
    client = redis.Redis(*REDIS, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis is not reachable on {REDIS[0]}:{REDIS[1]}: {exc}")
    owner = uuid.uuid4().hex
    numbers = random.sample(range(1, 16), 15)
    number = next((n for n in numbers if client.set(f"ragspine-tests:db:{n}", owner, nx=True, ex=3600)), None)
    if number is None:
        pytest.skip("every Redis database 1–15 is claimed by other runs of the suite")
    scoped = redis.Redis(*REDIS, db=number)
    scoped.flushdb()
    try:
        yield number
    finally:
        scoped.flushdb()
        if client.get(f"ragspine-tests:db:{number}") == owner.encode():
            client.delete(f"ragspine-tests:db:{number}")


def _upload_demo(client, bucket: str, demo: Path) -> None:
    """What a deployment keeps in S3: the traces (the evaluated day split in three objects, so it is
    sampled in shards), the extracted facts, the baseline and the channel thresholds."""
    for path in sorted((demo / "traces").rglob("*.jsonl*")):
        key = f"traces/{path.parent.name}/{path.name}"
        if path.parent.name != f"dt={DAY}":
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
            continue
        lines = path.read_bytes().splitlines(keepends=True)
        third = len(lines) // 3 + 1
        for part in range(3):
            body = b"".join(lines[part * third : (part + 1) * third])
            client.put_object(Bucket=bucket, Key=f"traces/dt={DAY}/part-{part:05d}.jsonl", Body=body)
    for local, key in (
        ("extraction/facts.jsonl", "extraction/facts.jsonl"),
        ("baseline.json", "baseline.json"),
        ("extraction/baseline.json", "extraction/baseline.json"),
    ):
        client.put_object(Bucket=bucket, Key=key, Body=(demo / local).read_bytes())


def _deployed_env(tmp: Path, demo: Path, bucket: str, s3: str, database: str, vhost: str, db: int) -> dict:
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        **pg_instance_env(database),
        "DAGSTER_COMPUTE_LOG_BUCKET": bucket,
        "DAGSTER_COMPUTE_LOG_PREFIX": "compute-logs",
        "DAGSTER_S3_ENDPOINT_URL": s3,
        "RAGSPINE_EXECUTOR": "celery",
        "RAGSPINE_CELERY_BROKER": f"{RABBIT}/{vhost}",
        "RAGSPINE_CELERY_BACKEND": f"redis://{REDIS[0]}:{REDIS[1]}/{db}",
        "RAGSPINE_S3_ENDPOINT_URL": s3,
        "RAGSPINE_IO_URI": f"s3://{bucket}/io",
        "RAGSPINE_REPORTS": f"s3://{bucket}/reports",
        "RAGSPINE_WORK": f"s3://{bucket}/work",
        "RAGSPINE_TRACE_STORE": f"s3://{bucket}/traces",
        "RAGSPINE_EXTRACTION_FACTS": f"s3://{bucket}/extraction/facts.jsonl",
        "RAGSPINE_BASELINE": f"s3://{bucket}/baseline.json",
        "RAGSPINE_EXTRACTION_BASELINE": f"s3://{bucket}/extraction/baseline.json",
        "RAGSPINE_ALERTS_OUTBOX": pg_location(database),
        "RAGSPINE_SAMPLE_SHARDS": "3",
        # Read-only inputs every host has (in the image, or a read-only volume): the frozen golden
        # set, the evidence registry, the index the demo's reference engine serves.
        "RAGSPINE_HOME": str(demo),
        "RAGSPINE_GOLDEN": str(demo / "golden" / "gold.jsonl"),
        "RAGSPINE_EVIDENCE": str(demo / "evidence.jsonl"),
        "RAGSPINE_INDEX_MANIFEST": str(demo / "index" / "manifest.json"),
        "RAGSPINE_EXTRACTION_TRUTH": str(demo / "extraction" / "truth.json"),
    }
    return env


def _private(env: dict, folder: Path) -> dict:
    """``env`` for a process whose working folder, home and temporary files are its own."""
    (folder / "tmp").mkdir(parents=True)
    return {**env, "HOME": str(folder), "TMPDIR": str(folder / "tmp")}


def _start_worker(env: dict, folder: Path, name: str) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "ragspine_pipeline.defs.celery_app",
        "worker",
        "--pool=solo",
        "--queues=dagster",
        f"--hostname={name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=WARNING",
    ]
    private = _private(env, folder)
    log = open(folder / "worker.log", "w")  # noqa: SIM115 - the worker writes it until it is stopped
    return subprocess.Popen(argv, env=private, cwd=folder, stdout=log, stderr=log)


def _wait_for_workers(env: dict, count: int, timeout: float = 120) -> None:
    ping = [sys.executable, "-m", "celery", "-A", "ragspine_pipeline.defs.celery_app", "inspect", "ping"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(ping, env=env, capture_output=True, text=True, timeout=60)
        if done.stdout.count("pong") >= count:
            return
        time.sleep(1)
    raise AssertionError(f"{count} Celery workers did not answer within {timeout} s: {done.stdout}")


def _s3_bytes(client, bucket: str, key: str) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def _without_run_ids(text: str) -> str:
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<run>", text)


def _decision(record: dict) -> dict:
    keys = ("decision", "failed_gates", "failed_slices", "index_version", "metrics", "gates", "causes")
    return {key: record[key] for key in keys}


def test_the_whole_graph_on_celery_workers_decides_what_the_embedded_run_decides(
    tmp_path, database, vhost, redis_db, bucket, s3_endpoint, monkeypatch
):
    embedded = environment(tmp_path / "embedded")
    done = runner(embedded, cwd=tmp_path)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    reports = Path(embedded["RAGSPINE_REPORTS"]) / "latest"

    name, client = bucket
    demo = tmp_path / "embedded" / "demo"
    _upload_demo(client, name, demo)
    env = _deployed_env(tmp_path, demo, name, s3_endpoint, database, vhost, redis_db)
    workers = [_start_worker(env, tmp_path / f"worker{n}", f"w{n}") for n in range(1, WORKERS + 1)]
    try:
        _wait_for_workers(env, WORKERS)
        launcher = tmp_path / "launcher"
        launch = subprocess.run(
            [
                sys.executable,
                "-m",
                "dagster",
                "asset",
                "materialize",
                "--select",
                "*",
                "--partition",
                DAY,
                "-m",
                "ragspine_pipeline.definitions",
            ],
            env=_private(env, launcher),
            cwd=launcher,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60 * load_factor())
    logs = "".join((tmp_path / f"worker{n}" / "worker.log").read_text() for n in range(1, WORKERS + 1))
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:] + logs[-3000:]

    for key, value in env.items():
        if key.startswith(("DAGSTER_", "RAGSPINE_")):
            monkeypatch.setenv(key, value)
    with dg.DagsterInstance.get() as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS
        hosts = {
            event.dagster_event.engine_event_data.metadata["Celery worker"].value
            for event in instance.all_logs(run.run_id)
            if event.dagster_event
            and event.dagster_event.event_type_value == "ENGINE_EVENT"
            and "Celery worker" in (event.dagster_event.engine_event_data.metadata or {})
        }
        assert {host.split("@")[0] for host in hosts} == {f"w{n}" for n in range(1, WORKERS + 1)}
        # What a notebook on any host gets: the tables as DataFrames, the decision as its model.
        with demo_definitions().get_asset_value_loader(instance) as loader:
            metric_table = loader.load_asset_value("metric_table")
            decision = loader.load_asset_value("release_decision", python_type=ReleaseDecision)
            sample = loader.load_asset_value("production_traces", partition_key=DAY)
    assert isinstance(metric_table, pd.DataFrame) and isinstance(decision, ReleaseDecision)
    written = pq.read_table(reports / "metric_table.parquet")
    assert to_table(metric_table, SCHEMA).equals(written.replace_schema_metadata(None))
    assert decision.decision == "ship" and len(sample) > 0

    deployed = json.loads(_s3_bytes(client, name, "reports/latest/release_decision.json"))
    embedded_decision = json.loads((reports / "release_decision.json").read_text())
    assert _decision(deployed) == _decision(embedded_decision)
    assert deployed["decision"] == "ship"
    table = pq.read_table(io.BytesIO(_s3_bytes(client, name, "reports/latest/metric_table.parquet")))
    assert table.equals(pq.read_table(reports / "metric_table.parquet"))
    deployed_report = _s3_bytes(client, name, "reports/latest/slice_report.md").decode()
    assert _without_run_ids(deployed_report) == _without_run_ids((reports / "slice_report.md").read_text())
    # The day was sampled in three shards on two workers, and is exactly the one-pass sample.
    production = f"reports/production/{DAY}.json"
    embedded_day = json.loads((reports.parent / "production" / f"{DAY}.json").read_text())
    assert json.loads(_s3_bytes(client, name, production)) == embedded_day
    # Each step's output was captured on its worker and uploaded: the UI shows it whichever host ran it.
    logs = client.list_objects_v2(Bucket=name, Prefix="compute-logs/")["Contents"]
    captured = [_s3_bytes(client, name, item["Key"]) for item in logs if item["Key"].endswith(".err")]
    assert any(b'Started execution of step "golden_set"' in text for text in captured)
    # Nothing was left on a worker's own disk: every hand-off went through S3 or PostgreSQL.
    for n in range(1, WORKERS + 1):
        left = [p for p in (tmp_path / f"worker{n}").rglob("*") if p.is_file() and p.name != "worker.log"]
        assert left == []

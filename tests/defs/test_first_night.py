"""The first night of a deployment: after ``ragspine-eval production backfill --days 14`` the first
nightly run tests its rates against trailing nights; without the backfill it can test none.

A fresh instance as deployed (``deploy/postgres/dagster.yaml`` on an empty PostgreSQL database) and a
trace store holding 16 days of traffic up to yesterday (the drop-alarm benchmark's generator, as the
backfill's own tests use). The backfill is the real command in its own process; the first night is the
nightly job for yesterday's partition — what the schedule's next tick, or the documented
``dagster job launch`` (docs/deployment.md, tested in ``tests/test_deployment_doc.py``), runs —
executed on that instance.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from tests.cli.test_production_backfill import _bench
from tests.conftest import pg_instance_env
from tests.defs.declared import demo_definitions

pytestmark = pytest.mark.system  # PostgreSQL, the backfill command in its own process

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
DAYS = 16  # in the trace store, up to yesterday


def _yesterday() -> str:
    return (datetime.now(UTC).date() - timedelta(days=1)).isoformat()


@pytest.fixture(scope="module")
def trace_store(tmp_path_factory):
    """16 days of synthetic traffic up to yesterday (2 slices of 100 traces a day), and the evidence
    registry the traces cite."""
    bench = _bench()
    root = tmp_path_factory.mktemp("first-night")
    traffic = bench.Traffic(slices=2, per_slice=100)
    last = datetime.now(UTC).date() - timedelta(days=1)
    for night in range(DAYS):
        day = (last - timedelta(days=DAYS - 1 - night)).isoformat()
        folder = root / "traces" / f"dt={day}"
        folder.mkdir(parents=True)
        (folder / "part-00000.jsonl").write_text("\n".join(traffic.day_lines(night)) + "\n")
    return root / "traces", bench.write_registry(root / "evidence.jsonl")


def _deployment(tmp_path: Path, trace_store, database: str, monkeypatch) -> dict[str, str]:
    """The environment of a fresh deployment: its instance (the shipped file on ``database``), the trace
    store, and reports, work files and outbox of its own."""
    traces, evidence = trace_store
    home = tmp_path / "dagster_home"
    home.mkdir(parents=True)
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    env = {
        "DAGSTER_HOME": str(home),
        **pg_instance_env(database),
        "RAGSPINE_HOME": str(tmp_path / "nowhere"),  # the nightly job needs no golden set or SUT
        "RAGSPINE_TRACE_STORE": str(traces),
        "RAGSPINE_EVIDENCE": str(evidence),
        "RAGSPINE_REPORTS": str(tmp_path / "reports"),
        "RAGSPINE_WORK": str(tmp_path / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(tmp_path / "alerts" / "outbox.jsonl"),
    }
    for name in ("RAGSPINE_GATES_CONFIG", "RAGSPINE_SAMPLE_SIZE", "RAGSPINE_SAMPLE_STRATIFY"):
        monkeypatch.delenv(name, raising=False)  # the shipped defaults, in the command and the run
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _first_night(env: dict[str, str]) -> tuple[dg.AssetMaterialization, dict]:
    """The nightly job for yesterday's partition, executed on the deployment's instance: its
    ``production_metrics`` materialisation and the night's summary."""
    day = _yesterday()
    defs = demo_definitions(env)
    with dg.DagsterInstance.get() as instance:
        result = defs.resolve_job_def("nightly_eval").execute_in_process(instance=instance, partition_key=day)
        assert result.success
        [materialization] = [
            m for m in result.asset_materializations_for_node("production_metrics") if m.partition == day
        ]
        assert len(instance.get_runs()) == 1  # the instance's first run
    summary = json.loads((Path(env["RAGSPINE_REPORTS"]) / "production" / f"{day}.json").read_text())
    return materialization, summary


def _tested(summary: dict) -> list[dict]:
    """The night's drop tests that ran (a p-value); the others say why not."""
    return [test for test in summary["drop_tests"]["tests"] if test["p_value"] is not None]


def test_after_a_backfill_the_first_nightly_run_tests_its_rates(tmp_path, database, trace_store, monkeypatch):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    env = _deployment(tmp_path, trace_store, database, monkeypatch)
    backfill = subprocess.run(
        [sys.executable, "-m", "ragspine_pipeline.cli", "production", "backfill", "--days", "14"],
        env={**os.environ, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    last = datetime.now(UTC).date() - timedelta(days=1)
    filled = [(last - timedelta(days=back)).isoformat() for back in range(13, -1, -1)]
    assert backfill.stdout.splitlines() == [f"{day}: 200 sampled, summary written" for day in filled]

    materialization, summary = _first_night(env)
    assert materialization.metadata["drop_tests"].value == summary["drop_tests"]["tested"] > 0
    tested_all = [t for t in _tested(summary) if t["slice"] == "all traffic"]
    assert tested_all and all(t["trailing_days"] >= 5 for t in tested_all)


def test_without_a_backfill_the_first_nightly_run_tests_nothing(tmp_path, database, trace_store, monkeypatch):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    env = _deployment(tmp_path, trace_store, database, monkeypatch)
    materialization, summary = _first_night(env)
    assert materialization.metadata["drop_tests"].value == summary["drop_tests"]["tested"] == 0
    untested = summary["drop_tests"]["tests"]
    assert untested and not _tested(summary)
    # "0 trailing night(s), at least 5 needed", "2 of the last 3 night(s) missing"
    assert all("night(s)" in test["reason"] for test in untested)

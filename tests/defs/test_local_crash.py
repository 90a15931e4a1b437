"""The local runner never leaves a run STARTED: a hostile trace line is quarantined inside the run (it
used to kill the process with SIGSEGV in pyarrow's parser, leaving no decision, no alert and the run
STARTED for ever), and a runner killed with SIGKILL mid-run has its run marked failed, with a
run-failure alert, by the next invocation. Real processes on a real SQLite instance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.local import local_instance
from ragspine_pipeline.demo.build import init_demo

pytestmark = pytest.mark.system  # runner processes, one killed with SIGKILL

DAY = "2026-11-21"
DEEP = '{"request_id": "hostile", "x": ' + "[" * 10_000 + "]" * 10_000 + "}"


def environment(tmp_path: Path) -> dict[str, str]:
    init_demo(tmp_path / "demo", today=date(2026, 11, 22), traces_per_day=40)
    return {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "RAGSPINE_HOME": str(tmp_path / "demo"),
        "RAGSPINE_REPORTS": str(tmp_path / "reports"),
        "RAGSPINE_WORK": str(tmp_path / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(tmp_path / "alerts" / "outbox.jsonl"),
    }


def runner(env: dict[str, str], cwd: Path) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "ragspine_pipeline.defs.local",
        "run",
        "--partition",
        DAY,
        "--backfill-days",
        "0",
    ]
    return subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def runs(env: dict[str, str]) -> list[dg.DagsterRun]:
    """The runs on the instance, opened as the runner opens it (under its lock: a runner may be creating
    the SQLite instance at this very moment)."""
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    instance = local_instance()
    try:
        return list(instance.get_runs())
    finally:
        instance.dispose()


def test_a_hostile_trace_line_is_quarantined_and_the_run_finishes(tmp_path, monkeypatch):
    env = environment(tmp_path)
    day = tmp_path / "demo" / "traces" / f"dt={DAY}"
    with (day / "part-00000.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(DEEP + "\n")
    done = runner(env, tmp_path)
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, out + err  # the release ships; the hostile line is not a crash
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    statuses = {run.status for run in runs(env)}
    assert statuses == {dg.DagsterRunStatus.SUCCESS}
    quarantine = tmp_path / "work" / "production" / f"dt={DAY}" / "quarantine.jsonl"
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [e["error"] for e in entries] == ["JSON nested 10001 levels deep; at most 64 are accepted"]


def test_a_runner_killed_mid_run_has_its_run_failed_and_announced_by_the_next(tmp_path, monkeypatch):
    env = environment(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    first = runner(env, tmp_path)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # wait until the run is on the instance, then kill -9 its runner
        if (tmp_path / "dagster").exists() and any(
            r.status == dg.DagsterRunStatus.STARTED for r in runs(env)
        ):
            break
        assert first.poll() is None, first.communicate()
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    (orphan,) = [r for r in runs(env) if r.status == dg.DagsterRunStatus.STARTED]

    second = runner(env, tmp_path)
    out, err = second.communicate(timeout=300)
    assert f"run {orphan.run_id} had been left STARTED by a runner that died" in out, out + err
    by_id = {run.run_id: run for run in runs(env)}
    assert by_id[orphan.run_id].status == dg.DagsterRunStatus.FAILURE
    assert all(run.status != dg.DagsterRunStatus.STARTED for run in by_id.values())
    outbox = [json.loads(line) for line in Path(env["RAGSPINE_ALERTS_OUTBOX"]).read_text().splitlines()]
    queued = [e["alert"] for e in outbox if e.get("event") == "queued" and "alert" in e]
    crash = [a for a in queued if a["kind"] == "run_failure" and a["run_id"] == orphan.run_id]
    assert len(crash) == 1 and "ended before the run did" in json.dumps(crash[0])

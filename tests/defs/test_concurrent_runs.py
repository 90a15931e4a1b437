"""Whole-graph runs at once on one SQLite instance all finish: real OS processes sharing the instance,
its asset storage and the demo. With Dagster's default IO manager (one pickle per asset, rewritten in
place) one of four such runs failed loading ``metric_table`` half-written by another."""

from __future__ import annotations

import dagster as dg
import pytest

from tests.defs.test_local_crash import environment, runner, runs

pytestmark = pytest.mark.system  # several runner processes at once

RUNNERS = 4


def test_concurrent_whole_graph_runs_on_one_sqlite_instance_all_succeed(tmp_path, monkeypatch):
    env = environment(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])  # runs() opens it; gone after the test
    processes = [runner(env, cwd=tmp_path) for _ in range(RUNNERS)]
    outcomes = [process.communicate(timeout=600) for process in processes]
    for process, (out, err) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, out + err
        assert "release decision: SHIP" in out
    finished = [run for run in runs(env) if run.job_name == "full_eval"]
    assert len(finished) == RUNNERS and {run.status for run in finished} == {dg.DagsterRunStatus.SUCCESS}

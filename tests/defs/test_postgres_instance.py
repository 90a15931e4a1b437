"""The shipped PostgreSQL instance config works as shipped: two whole-graph runs at once, each runner its
own OS process, on a database of their own on the local PostgreSQL, both succeed and decide what the
embedded SQLite instance decides. Skipped, with the reason, when PostgreSQL is not on loopback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import pg_instance_env
from tests.defs.test_local_crash import environment, runner, runs

pytestmark = pytest.mark.system  # concurrent runner processes on PostgreSQL

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"

MISSING = "is not installed (pip install -e '.[deploy]')"
pytest.importorskip("dagster_postgres", reason=f"dagster-postgres {MISSING}")


def decision(reports: Path) -> dict:
    record = json.loads((reports / "latest" / "release_decision.json").read_text("utf-8"))
    keys = ("decision", "failed_gates", "failed_slices", "index_version", "metrics")
    return {key: record[key] for key in keys}


def test_two_concurrent_whole_graph_runs_on_the_shipped_postgres_config_both_succeed(
    tmp_path, database, monkeypatch
):
    embedded = environment(tmp_path / "embedded")
    process = runner(embedded, cwd=tmp_path)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, out + err

    env = environment(tmp_path / "deployed")
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    env.update(
        **pg_instance_env(database),
    )
    processes = [runner(env, cwd=tmp_path) for _ in range(2)]
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, out + err

    for name in [name for name in env if name.startswith("DAGSTER_PG_")]:
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    finished = [run for run in runs(env) if run.job_name == "full_eval"]
    assert len(finished) == 2 and {run.status for run in finished} == {dg.DagsterRunStatus.SUCCESS}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert decision(Path(env["RAGSPINE_REPORTS"])) == decision(Path(embedded["RAGSPINE_REPORTS"]))

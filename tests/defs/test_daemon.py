"""A real ``dagster-daemon`` on the shipped PostgreSQL instance evaluates every published index version
once: one re-evaluation run per version (run key ``index-<version>``), none twice, and a version
replaced before the sensor's next tick named in the next run instead of skipped silently."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.scheduler.instigation import (
    TickStatus,
)  # not re-exported by dagster; instance.get_ticks takes it

from ragspine_pipeline.defs.automation import SUPERSEDED_TAG, run_key
from ragspine_pipeline.defs.golden import INDEX_VERSION_TAG
from ragspine_pipeline.demo.build import rebuild_index
from tests.conftest import pg_instance_env, stop_group
from tests.defs.test_local_crash import environment

pytestmark = pytest.mark.system  # dagster-daemon on PostgreSQL

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
INTERVAL_S = 2
JOB = "reeval_on_index_rebuild"
WORKSPACE = """load_from:
  - python_module:
      module_name: ragspine_pipeline.definitions
      location_name: ragspine_pipeline
"""


def _finished_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return [run for run in instance.get_runs(dg.RunsFilter(job_name=JOB)) if run.is_finished]


def _wait_for(instance: dg.DagsterInstance, versions: set[str], daemon, timeout: float = 240) -> None:
    """Until runs for ``versions`` have finished (or the daemon died, or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert daemon.poll() is None, "the daemon exited"
        done = {run.tags.get(INDEX_VERSION_TAG) for run in _finished_runs(instance)}
        if versions <= done:
            return
        time.sleep(1)
    raise AssertionError(f"no finished run for {versions - done} within {timeout} s")


def _skipped_ticks(instance: dg.DagsterInstance) -> int:
    """How many ticks of the sensor found nothing to request."""
    [state] = [s for s in instance.all_instigator_state() if s.name == "index_rebuild_sensor"]
    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, statuses=[TickStatus.SKIPPED])
    return len(ticks)


def _wait_for_skipped_ticks(instance: dg.DagsterInstance, more: int, daemon, timeout: float = 240) -> None:
    """Until the sensor has ticked ``more`` times more without requesting anything."""
    deadline, start = time.monotonic() + timeout, _skipped_ticks(instance)
    while time.monotonic() < deadline:
        assert daemon.poll() is None, "the daemon exited"
        if _skipped_ticks(instance) >= start + more:
            return
        time.sleep(INTERVAL_S / 2)
    raise AssertionError(f"the sensor did not tick {more} more times within {timeout} s")


def test_the_daemon_launches_exactly_one_reevaluation_per_published_index_version(
    tmp_path, database, monkeypatch
):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    env = environment(tmp_path)
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    (tmp_path / "workspace.yaml").write_text(WORKSPACE)
    env.update(
        **pg_instance_env(database),
        RAGSPINE_REBUILD_SENSOR_INTERVAL_S=str(INTERVAL_S),
    )
    for name in ("DAGSTER_HOME", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
    workspace = ["-w", str(tmp_path / "workspace.yaml")]
    started = subprocess.run(
        [sys.executable, "-m", "dagster", "sensor", "start", "index_rebuild_sensor", *workspace],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    log = open(tmp_path / "daemon.log", "w")  # noqa: SIM115 - written by the daemon until it stops
    daemon = subprocess.Popen(
        [sys.executable, "-m", "dagster._daemon", "run", *workspace],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    demo = tmp_path / "demo"
    published = [json.loads((demo / "index" / "manifest.json").read_text())["index_version"]]
    try:
        with dg.DagsterInstance.get() as instance:
            _wait_for(instance, {published[0]}, daemon)
            published.append(rebuild_index(demo)["index_version"])
            _wait_for(instance, {published[-1]}, daemon)
            # Two versions within one interval: the first is replaced before the sensor can see it.
            published += [rebuild_index(demo)["index_version"] for _ in range(2)]
            _wait_for(instance, {published[-1]}, daemon)
            _wait_for_skipped_ticks(instance, 3, daemon)  # more ticks on an unchanged manifest: no more runs
            runs = instance.get_runs(dg.RunsFilter(job_name=JOB))
    finally:
        stop_group(daemon)
    output = (tmp_path / "daemon.log").read_text()
    assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs), output[-3000:]
    evaluated = [run.tags[INDEX_VERSION_TAG] for run in runs]
    assert len(evaluated) == len(set(evaluated))  # never twice
    assert sorted(run.tags["dagster/run_key"] for run in runs) == sorted(run_key(v) for v in evaluated)
    named = {v for run in runs for v in run.tags.get(SUPERSEDED_TAG, "").split(",") if v}
    assert set(evaluated) | named == set(published)  # no silent gap
    assert set(evaluated) >= {published[0], published[1], published[3]}
    if published[2] not in evaluated:  # the usual case: the tick came after both publications
        [latest] = [run for run in runs if run.tags[INDEX_VERSION_TAG] == published[3]]
        assert latest.tags[SUPERSEDED_TAG] == published[2]

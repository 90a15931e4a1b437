"""Two evaluations of one service never interleave, whoever launched them: the golden path's steps from
the replay to the baseline promotion are one concurrency pool per service, of one slot on every instance.
The run-queue limit per ``ragspine/index_version`` holds only for the sensor's runs; two manual
whole-graph runs of the same index used to evaluate at the same time."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.assemble import service_definitions
from ragspine_pipeline.defs.judge import EVALUATION_POOL, EVALUATION_SLOTS, JUDGE_POOL, TRACE_SCAN_POOL
from ragspine_pipeline.defs.local import initialize_pools, local_instance
from ragspine_pipeline.defs.release import DECISION_TAG
from tests.conftest import pg_instance_env
from tests.defs.declared import demo_service
from tests.defs.test_celery_deployment import _private
from tests.defs.test_local_crash import DAY, environment
from tests.defs.test_unattended import steps_of

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
# From the golden replay to the baseline promotion; the golden set's read and the other paths are free.
EVALUATION_STEPS = {
    "golden_traces",
    "golden_evaluation",
    "release_gates",
    "release_decision_regression_alert",
    "baseline",
}


def _defs(name: str | None = None) -> dg.Definitions:
    service = demo_service({"RAGSPINE_HOME": "/nonexistent/ragspine"})
    return service_definitions(dataclasses.replace(service, name=name))


def test_the_evaluation_steps_of_a_service_are_its_one_pool():
    assert {n for n, op in steps_of(_defs()).items() if op.pool == EVALUATION_POOL} == EVALUATION_STEPS
    named = {n: op.pool for n, op in steps_of(_defs("support_bot")).items()}
    own = {n for n, pool in named.items() if pool == f"support_bot__{EVALUATION_POOL}"}
    assert own == {f"support_bot__{step}" for step in EVALUATION_STEPS}
    assert EVALUATION_POOL not in named.values()  # another service's evaluation never waits for this one


def test_the_local_instance_gives_the_evaluation_pool_one_slot_and_leaves_the_others_unlimited(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.chdir(REPO)  # the root dagster.yaml is the instance's template
    instance = local_instance()
    try:
        limits = {pool.name: pool.limit for pool in instance.event_log_storage.get_pool_limits()}
        assert limits == {EVALUATION_POOL: EVALUATION_SLOTS} and EVALUATION_SLOTS == 1
        instance.event_log_storage.set_concurrency_slots(EVALUATION_POOL, 2)  # an operator's choice
        initialize_pools(instance)
        assert instance.event_log_storage.get_concurrency_info(EVALUATION_POOL).slot_count == 2
    finally:
        instance.dispose()
    assert {TRACE_SCAN_POOL, JUDGE_POOL}.isdisjoint(limits)  # the embedded instance has no default limit


def _materialize(env: dict[str, str], folder: Path) -> subprocess.Popen:
    """The whole graph in one run, launched by hand (not by the sensor: no index version tag)."""
    argv = [sys.executable, "-m", "dagster", "asset", "materialize", "--select", "*", "--partition", DAY]
    argv += ["-m", "ragspine_pipeline.definitions"]
    return subprocess.Popen(
        argv,
        env=_private(env, folder),
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


BEGINS = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_RESTARTED}
ENDS = {
    dg.DagsterEventType.STEP_SUCCESS,
    dg.DagsterEventType.STEP_UP_FOR_RETRY,
    dg.DagsterEventType.STEP_FAILURE,
}


def _pool_attempts(instance: dg.DagsterInstance, run_id: str) -> list[tuple[float, float, str, str]]:
    """``(started, ended, step, how it ended)`` of each attempt of the run's evaluation steps, from its
    event log. A step retried by its retry policy gives its slot back between attempts (another run's
    step may hold the pool then), so each attempt is a span of its own, not the step's first start to
    its last end."""
    attempts, begun = [], {}
    for entry in instance.all_logs(run_id, of_type=BEGINS | ENDS):
        if entry.step_key not in EVALUATION_STEPS:
            continue
        kind = entry.dagster_event.event_type
        if kind in BEGINS:
            begun[entry.step_key] = entry.timestamp
        else:
            attempts.append((begun.pop(entry.step_key), entry.timestamp, entry.step_key, kind.value))
    assert not begun, f"run {run_id}: attempts that never ended: {begun}"
    return attempts


@pytest.mark.system  # two whole-graph runs at once, in two processes, on PostgreSQL
def test_two_manual_runs_of_one_index_never_run_evaluation_steps_at_the_same_time(
    tmp_path, database, monkeypatch
):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    env = environment(tmp_path)
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copyfile(SHIPPED, home / "dagster.yaml")  # the deployed pools section, as shipped
    env.update(
        **pg_instance_env(database),
    )  # the default executor: each run's steps in its own process, the two runs side by side
    for name, value in env.items():
        if name.startswith(("DAGSTER_", "RAGSPINE_")):
            monkeypatch.setenv(name, value)
    with dg.DagsterInstance.get() as instance:
        initialize_pools(instance)  # once, when the instance is created (docs/deployment.md)
        launched = [_materialize(env, tmp_path / f"launcher{n}") for n in (1, 2)]
        outputs = [process.communicate(timeout=1500)[0] for process in launched]
        for process, output in zip(launched, outputs, strict=True):
            assert process.returncode == 0, output[-4000:]
        runs = instance.get_runs()
        assert len(runs) == 2 and {run.status for run in runs} == {dg.DagsterRunStatus.SUCCESS}
        # Both runs decided, the same: the index and the golden set did not change between them.
        assert [run.tags.get(DECISION_TAG) for run in runs] == ["ship", "ship"]
        records = {record.dagster_run.run_id: record for record in instance.get_run_records()}
        attempts = {run.run_id: _pool_attempts(instance, run.run_id) for run in runs}

    first, second = sorted(records.values(), key=lambda r: r.start_time)
    assert second.start_time < first.end_time  # the runs did run at the same time
    for run_id, tried in attempts.items():
        succeeded = {step for _, _, step, how in tried if how == dg.DagsterEventType.STEP_SUCCESS.value}
        assert succeeded == EVALUATION_STEPS, (run_id, tried)
    spans = sorted(
        (start, end, run_id, step) for run_id, tried in attempts.items() for start, end, step, _ in tried
    )
    for before, after in itertools.pairwise(spans):
        assert before[1] <= after[0], (
            f"{before[3]} of run {before[2]} overlaps {after[3]} of run {after[2]}: {attempts}"
        )

"""What a failed run leaves behind: its failure alert names the steps that did succeed (never "failed
before any step" when some did), and on Celery none of its steps runs on after it failed — a run whose
coordinator was killed (``kill -9``) used to have its step finish on a worker and report success after
the run had failed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from celery import Celery

from ragspine_pipeline.alerts.blocks import fallback_text
from ragspine_pipeline.defs.alerts import finish_failed_run, step_failure_alert, succeeded_steps
from ragspine_pipeline.defs.local import initialize_pools
from ragspine_pipeline.defs.resources import AlertsResource
from tests.conftest import load_factor, pg_instance_env, wait_until
from tests.defs.test_celery_deployment import (  # noqa: F401 - vhost and redis_db are fixtures
    RABBIT,
    REDIS,
    _private,
    _start_worker,
    _wait_for_workers,
    redis_db,
    vhost,
)
from tests.defs.test_local_crash import environment

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
SLOW_S = 0.5  # each golden question, on the slow SUT: the replay takes 40 s and more
LONG_STEP = "golden_traces"


def slow_sut(case: dict) -> None:
    """A SUT that takes its time and knows no answer (``RAGSPINE_SUT_CONFIG``: kind python)."""
    time.sleep(SLOW_S)


@dg.op
def golden_set():
    return 1


@dg.op
def golden_traces(golden):
    return golden


@dg.op
def golden_evaluation(traces):
    raise RuntimeError("the SUT answered in a shape the contract refuses")


@dg.job
def evaluation():
    golden_evaluation(golden_traces(golden_set()))


def test_the_failure_alert_names_the_steps_that_succeeded(tmp_path):
    alerts = AlertsResource(outbox_path=str(tmp_path / "outbox.jsonl"), webserver_base_url=None)
    with dg.instance_for_test() as instance:
        result = evaluation.execute_in_process(instance=instance, raise_on_error=False)
        run = result.dagster_run
        failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        queued, _ = finish_failed_run(alerts, run, failures, instance)
        # The run failed outside its steps (its coordinator died): no failed step to name.
        outside = step_failure_alert(run, [], None, None, None, succeeded_steps(instance, run.run_id))
    assert queued.step == "golden_evaluation"
    assert queued.succeeded == ["golden_set", "golden_traces"]
    assert "Succeeded before the failure: golden_set, golden_traces." in fallback_text(queued)
    assert outside.error == "the run failed outside any step (see the run's logs)"
    assert outside.succeeded == ["golden_set", "golden_traces"]


def test_a_step_task_taken_after_its_run_ended_is_not_executed(tmp_path, monkeypatch):
    """A task still queued when its run failed (its coordinator gone) is taken by a worker later: it
    says so on the run and is revoked, without executing the step."""
    from dagster._grpc.types import ExecuteStepArgs
    from dagster._serdes import pack_value

    monkeypatch.setenv("RAGSPINE_CELERY_BROKER", "memory://")
    monkeypatch.setenv("RAGSPINE_CELERY_BACKEND", "cache+memory://")
    # The module makes its app from these settings when imported: imported afresh, then forgotten,
    # so that no other test's revoke goes to this in-memory broker.
    monkeypatch.delitem(sys.modules, CELERY_APP, raising=False)
    try:
        from ragspine_pipeline.defs.celery_app import RunBoundTask
    finally:
        sys.modules.pop(CELERY_APP, None)
    app = Celery("steps", broker="memory://", backend="cache+memory://")
    executed = []

    @app.task(bind=True, base=RunBoundTask, name="execute_plan")
    def execute_plan(self, execute_step_args_packed, executable_dict):
        executed.append(execute_step_args_packed)
        return []

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        run = instance.create_run_for_job(evaluation)
        instance.report_run_failed(run, "its coordinator was killed")
        step = ExecuteStepArgs(
            dg.reconstructable(evaluation).get_python_origin(),
            run.run_id,
            ["golden_traces"],
            instance.get_ref(),
        )
        execute_plan.apply(kwargs={"execute_step_args_packed": pack_value(step), "executable_dict": {}})
        said = [r.dagster_event.message for r in _events(instance, run.run_id, ENGINE, "golden_traces")]
    assert executed == []
    assert said == ["step golden_traces not executed: the run had ended (FAILURE)"]


ENGINE = dg.DagsterEventType.ENGINE_EVENT
CELERY_APP = "ragspine_pipeline.defs.celery_app"


def _events(instance: dg.DagsterInstance, run_id: str, kind: dg.DagsterEventType, step: str) -> list:
    return [record for record in instance.all_logs(run_id, of_type=kind) if record.step_key == step]


@pytest.mark.system  # a Celery worker, RabbitMQ, Redis, PostgreSQL, a coordinator killed with SIGKILL
def test_a_run_whose_coordinator_was_killed_has_its_step_stopped_and_revoked_on_the_worker(
    tmp_path,
    database,
    vhost,  # noqa: F811 - the fixture
    redis_db,  # noqa: F811 - the fixture
    monkeypatch,
):
    env = environment(tmp_path)
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    sut = tmp_path / "slow_sut.yaml"
    sut.write_text(f"kind: python\nfunction: {__name__}:slow_sut\n")
    env.update(
        **pg_instance_env(database),
        RAGSPINE_EXECUTOR="celery",
        RAGSPINE_CELERY_BROKER=f"{RABBIT}/{vhost}",
        RAGSPINE_CELERY_BACKEND=f"redis://{REDIS[0]}:{REDIS[1]}/{redis_db}",
        RAGSPINE_CELERY_RUN_POLL_S="1",
        RAGSPINE_SUT_CONFIG=str(sut),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    for name, value in env.items():
        if name.startswith(("DAGSTER_", "RAGSPINE_")):
            monkeypatch.setenv(name, value)
    worker = _start_worker(env, tmp_path / "worker", "w1")
    coordinator = None
    try:
        _wait_for_workers(env, 1)
        with dg.DagsterInstance.get() as instance:
            initialize_pools(instance)
            launcher = tmp_path / "launcher"
            argv = [sys.executable, "-m", "dagster", "asset", "materialize", "--select"]
            argv += ["golden_set,golden_traces", "-m", "ragspine_pipeline.definitions"]
            coordinator = subprocess.Popen(
                argv,
                env=_private(env, launcher),
                cwd=launcher,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )

            def replaying() -> bool:
                assert coordinator.poll() is None, "the run ended before its long step started"
                runs = instance.get_runs()
                return bool(runs) and bool(
                    _events(instance, runs[0].run_id, dg.DagsterEventType.STEP_START, LONG_STEP)
                )

            wait_until(replaying, f"{LONG_STEP} started on the worker", 300, interval=0.5)
            coordinator.send_signal(signal.SIGKILL)  # the coordinator dies; its step runs on
            coordinator.wait(timeout=60)
            [run] = instance.get_runs()
            instance.report_run_failed(run, "its coordinator was killed")  # what run monitoring records
            run = instance.get_run_by_id(run.run_id)
            alerts = AlertsResource(outbox_path=env["RAGSPINE_ALERTS_OUTBOX"], webserver_base_url=None)
            queued, _ = finish_failed_run(alerts, run, [], instance)  # what the failure sensor does

            def stopped() -> bool:
                engine = _events(instance, run.run_id, dg.DagsterEventType.ENGINE_EVENT, LONG_STEP)
                return any("stopped: the run had ended" in (r.dagster_event.message or "") for r in engine)

            wait_until(stopped, f"{LONG_STEP} stopped on the worker", 300, interval=0.5)
            engine = _events(instance, run.run_id, dg.DagsterEventType.ENGINE_EVENT, LONG_STEP)
            [task_id] = {
                r.dagster_event.engine_event_data.metadata["celery_task_id"].value
                for r in engine
                if "celery_task_id" in (r.dagster_event.engine_event_data.metadata or {})
            }
            assert not _events(instance, run.run_id, dg.DagsterEventType.STEP_SUCCESS, LONG_STEP)
            # Dagster ended it as interrupted: a retry request (its retry policy), which only the dead
            # coordinator could have acted on, or a failure.
            kinds = (dg.DagsterEventType.STEP_UP_FOR_RETRY, dg.DagsterEventType.STEP_FAILURE)
            [ended] = [r for kind in kinds for r in _events(instance, run.run_id, kind, LONG_STEP)]
            assert (
                "DagsterExecutionInterruptedError: the run had ended (FAILURE)"
                in ended.dagster_event.message + (ended.dagster_event.event_specific_data.error.to_string())
            )
            backend = Celery(backend=env["RAGSPINE_CELERY_BACKEND"])  # Celery's result backend
            assert backend.AsyncResult(task_id).state == "REVOKED"
    finally:
        if coordinator is not None and coordinator.poll() is None:
            coordinator.kill()
        worker.terminate()
        worker.wait(timeout=60 * load_factor())
    assert worker.returncode is not None
    assert queued.succeeded == ["golden_set"] and "before any step" not in queued.error

"""The app a Celery worker runs when steps execute on Celery (``RAGSPINE_EXECUTOR=celery``).

Start workers on any host with the same environment as the code location (the ``RAGSPINE_*``
settings, ``DAGSTER_HOME`` holding the deployed instance's ``dagster.yaml``)::

    celery -A ragspine_pipeline.defs.celery_app worker --pool=solo --queues=dagster

``--pool=solo`` executes one step at a time in the worker process itself, as Dagster's step execution
expects (no forked pool children); the app leaves the worker's stdout and stderr alone
(``worker_redirect_stdouts``), so Dagster captures each step's output into its step logs. The broker
and the result backend come from ``RAGSPINE_CELERY_BROKER`` (e.g. ``pyamqp://user@host:5672/vhost``)
and ``RAGSPINE_CELERY_BACKEND`` (e.g. ``redis://host:6379/3``): the same variables the run that submits
the steps reads, so the two always agree, and a URL with a password never enters a run's config.

A step never outlives its run (:class:`RunBoundTask`). dagster-celery revokes a run's tasks only from
the run's own coordinator, when it is told to stop; a coordinator that died (``kill -9``, its host
lost) revokes nothing, and its steps used to run on and report success after the run had failed. A
solo worker cannot be told either: it reads no control message while a step runs, and
``revoke(terminate=True)`` needs a pool that runs tasks in child processes. So the worker itself
watches the run: a task whose run has ended (failed, cancelled) is not executed, and a running step is
stopped — a Dagster interruption, never retried — within ``RAGSPINE_CELERY_RUN_POLL_S`` seconds
(default 5) of its run's end being recorded (run monitoring, the failure sensor, a cancel). Either way
the task is marked revoked. Each task names itself on the run (an engine event with
:data:`TASK_ID`), and the failure sensor revokes the tasks of a failed run that had not finished
(:func:`revoke_unfinished`), for workers whose pool does act on a revoke.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from celery import Task
from celery.exceptions import Ignore
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.events import EngineEventData
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import unpack_value
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

BROKER_ENV = "RAGSPINE_CELERY_BROKER"
BACKEND_ENV = "RAGSPINE_CELERY_BACKEND"
POLL_ENV = "RAGSPINE_CELERY_RUN_POLL_S"
DEFAULT_POLL_S = 5.0
TASK_ID = "celery_task_id"  # the metadata of the engine event by which a task names itself on its run
STOP_SIGNAL = signal.SIGUSR2  # raised in the worker's main thread to stop its step; Celery's is SIGUSR1
ENDED = "the run had ended"


def _ended(run: dg.DagsterRun | None) -> str | None:
    """How the run ended (its status), or None while it is in progress."""
    if run is None:
        return "deleted"
    if run.is_finished or run.status == dg.DagsterRunStatus.CANCELING:
        return run.status.value
    return None


class RunBoundTask(Task):
    """The base of the step task: executes a step only while its run is in progress (module docstring)."""

    def __call__(self, *args, **kwargs):
        step = unpack_value(kwargs["execute_step_args_packed"], as_type=ExecuteStepArgs)
        keys = ", ".join(step.step_keys_to_execute or [])
        step_key = keys if len(step.step_keys_to_execute or []) == 1 else None
        with dg.DagsterInstance.from_ref(step.instance_ref) as instance:
            run = instance.get_run_by_id(step.run_id)
            status = _ended(run)
            if status is not None:
                self._revoked(instance, run, step_key, f"step {keys} not executed: {ENDED} ({status})")
            instance.report_engine_event(
                f"Celery task {self.request.id} executes step {keys}",
                run,
                EngineEventData({TASK_ID: self.request.id, "step_keys": keys}),
                step_key=step_key,
            )
        ended: list[str] = []  # how the run ended, once the watch saw it end
        try:
            with _stopped_when_run_ends(step.run_id, step.instance_ref, ended):
                events = super().__call__(*args, **kwargs)
        except DagsterExecutionInterruptedError:
            pass  # raised outside the step's own error boundary
        if not ended:
            return events
        # Stopped: Dagster said so on the run (a failure, or a retry request under the step's retry
        # policy, which only the dead coordinator could have acted on).
        with dg.DagsterInstance.from_ref(step.instance_ref) as instance:
            run = instance.get_run_by_id(step.run_id)
            self._revoked(instance, run, step_key, f"step {keys} stopped: {ENDED} ({ended[0]})")

    def _revoked(self, instance: dg.DagsterInstance, run, step_key: str | None, said: str):
        """Say why on the run (when it still exists), mark the task revoked, and end it."""
        if run is not None:
            instance.report_engine_event(
                said, run, EngineEventData({TASK_ID: self.request.id}), step_key=step_key
            )
        self.backend.mark_as_revoked(self.request.id, said, request=self.request)
        raise Ignore(said)


@contextmanager
def _stopped_when_run_ends(run_id: str, instance_ref, ended: list[str]) -> Iterator[None]:
    """While the block runs, check every ``RAGSPINE_CELERY_RUN_POLL_S`` seconds whether the run has ended,
    and if it has, raise Dagster's interruption in this (the main) thread, saying how in ``ended``:
    the step stops at the next Python instruction, or as soon as a blocking call returns or is
    interrupted. Outside the main thread (a threads pool) a running step cannot be stopped: only the
    check at its start holds."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interval = float(os.environ.get(POLL_ENV) or DEFAULT_POLL_S)
    armed, done, seen = threading.Event(), threading.Event(), []
    armed.set()

    def interrupt(_signum, _frame) -> None:
        if armed.is_set():  # never once the block is over: a step that finished is left as it is
            armed.clear()
            ended.append(seen[0])
            raise DagsterExecutionInterruptedError(f"{ENDED} ({seen[0]})")

    def watch() -> None:
        with dg.DagsterInstance.from_ref(instance_ref) as instance:
            while not done.wait(interval):
                status = _ended(instance.get_run_by_id(run_id))
                if status is not None:
                    seen.append(status)
                    signal.pthread_kill(threading.main_thread().ident, STOP_SIGNAL)
                    return

    previous = signal.signal(STOP_SIGNAL, interrupt)
    watcher = threading.Thread(target=watch, name="ragspine-run-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        armed.clear()
        done.set()
        watcher.join()
        signal.signal(STOP_SIGNAL, previous)


def revoke_unfinished(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """Revoke (``terminate=True``) the tasks that named themselves on the run and whose step has not
    finished; their ids. A revoke reaches a solo worker only after its current task: there the worker's
    own watch stops the step (module docstring)."""
    finished_types = {dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
    finished = {record.step_key for record in instance.all_logs(run_id, of_type=finished_types)}
    tasks = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        metadata = record.dagster_event.engine_event_data.metadata or {}
        if TASK_ID in metadata and record.step_key not in finished:
            tasks[metadata[TASK_ID].value] = record.step_key
    ids = sorted(tasks)
    if ids:
        app.control.revoke(ids, terminate=True)
    return ids


_missing = [name for name in (BROKER_ENV, BACKEND_ENV) if not os.environ.get(name)]
if _missing:
    raise SystemExit(f"ragspine celery worker: set {' and '.join(_missing)}")

settings = CeleryExecutor.for_cli(
    broker=os.environ[BROKER_ENV],
    backend=os.environ[BACKEND_ENV],
    config_source={"worker_redirect_stdouts": False},
)
app = make_app(settings.app_args())
execute_plan = create_task(app, base=RunBoundTask)

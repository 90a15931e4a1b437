"""Which failed runs the retry guard asks Dagster to retry again, and what a run that failed outside
its steps because the instance's database went away says in its alert — on a real (temporary,
SQLite) Dagster instance with run retries on, its runs failed as Dagster fails them. What Dagster's
daemon records when its own retry attempt raises (the engine event "Failed to retry run" with the
error, and ``dagster/will_retry: false``) is written here as the daemon writes it; the whole path, a
real daemon and a real PostgreSQL outage, is ``test_database_outage.py``."""

from __future__ import annotations

import sys
import time

import dagster as dg
import pytest
from dagster._core.events import EngineEventData, JobFailureData
from dagster._core.storage.tags import PARENT_RUN_ID_TAG, WILL_RETRY_TAG
from dagster._utils.error import serializable_error_info_from_exc_info

from ragspine_pipeline.defs.alerts import step_failure_alert
from ragspine_pipeline.defs.retry_guard import (
    FAILED_RETRY,
    LOST_AFTER_S,
    MAX_REARMS,
    REARMED,
    guard_tick,
    lost_retries,
)
from ragspine_pipeline.defs.run_errors import INSTANCE_DATABASE, engine_error

NO_POSTGRES = "dagster-postgres is not installed (pip install -e '.[deploy]')"


@dg.op
def noop() -> None:
    pass


@dg.job
def evaluation() -> None:
    noop()


def ours(run: dg.DagsterRun) -> bool:
    return run.tags.get("service") != "another"


@pytest.fixture
def instance():
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True, "max_retries": 1}}) as instance:
        yield instance


def database_error(closed_port: int):
    """The error Dagster's PostgreSQL storage raises when the database does not answer, raised for real
    (the driver against a closed port, through dagster_postgres's own retry, which gives up)."""
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    import sqlalchemy
    from dagster_postgres.utils import retry_pg_connection_fn

    engine = sqlalchemy.create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{closed_port}/dagster")
    try:
        retry_pg_connection_fn(engine.connect, retry_limit=0)
    except Exception:
        return serializable_error_info_from_exc_info(sys.exc_info())
    raise AssertionError("a closed port answered")


def failed_run(instance, tags=None) -> dg.DagsterRun:
    """A run that failed outside its steps (its failure reported from outside, as the run monitor or
    the code server reports a dead run): Dagster tags it will_retry=true, run retries having one left."""
    run = instance.create_run_for_job(evaluation, tags=tags or {})
    instance.report_run_failed(run)
    run = instance.get_run_by_id(run.run_id)
    assert run.status == dg.DagsterRunStatus.FAILURE and run.tags[WILL_RETRY_TAG] == "true"
    return run


def failure_alert(instance, run: dg.DagsterRun):
    """The run's failure alert as the failure sensor makes it (no step failed)."""
    [failure] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    framework = engine_error(instance, run.run_id)
    return step_failure_alert(run, [], None, None, failure.dagster_event, [], framework)


def retry_attempt_failed(instance, run, error) -> None:
    """What Dagster's daemon records when its retry of ``run`` raised (auto_run_reexecution.py)."""
    instance.report_engine_event(FAILED_RETRY, run, engine_event_data=EngineEventData(error=error))
    instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: "false"})


def test_a_run_whose_retry_failed_to_launch_is_failed_again_and_dagster_wants_to_retry_it(
    instance, closed_port
):
    error = database_error(closed_port)
    run = failed_run(instance)
    assert lost_retries(instance, ours) == []  # meant to be retried, and just failed: the daemon's turn
    retry_attempt_failed(instance, run, error)

    [(lost, why)] = lost_retries(instance, ours)
    assert lost.run_id == run.run_id
    assert why.startswith("its retry failed to launch: OperationalError: ") and "Connection refused" in why

    skipped = guard_tick(instance, ours)
    assert run.run_id in skipped.skip_message
    failures = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert len(failures) == 2 and failures[-1].message.startswith(REARMED)
    # Dagster decided afresh: the run is to be retried (its daemon consumes the new failure event).
    assert instance.get_run_by_id(run.run_id).tags[WILL_RETRY_TAG] == "true"
    assert lost_retries(instance, ours) == []  # once per failed attempt, not every tick


def test_the_guard_keeps_to_dagsters_budget_its_own_limit_and_its_service(instance, closed_port):
    error = database_error(closed_port)
    # A run whose retry exists (launched, whatever its state): nothing to do.
    retried = failed_run(instance)
    retry_attempt_failed(instance, retried, error)
    instance.create_run_for_job(
        evaluation,
        tags={PARENT_RUN_ID_TAG: retried.run_id},
        parent_run_id=retried.run_id,
        root_run_id=retried.run_id,
    )
    # Another service's run: its own guard's business.
    theirs = failed_run(instance, tags={"service": "another"})
    retry_attempt_failed(instance, theirs, error)
    # A run Dagster decided not to retry (no failed attempt): not ours to retry either.
    not_retried = failed_run(instance)
    instance.add_run_tags(not_retried.run_id, {WILL_RETRY_TAG: "false"})
    assert lost_retries(instance, ours) == []

    # A retry that keeps failing to launch is asked for MAX_REARMS times, then the run stays failed.
    stubborn = failed_run(instance)
    for _ in range(MAX_REARMS):
        retry_attempt_failed(instance, stubborn, error)
        assert [r.run_id for r, _ in lost_retries(instance, ours)] == [stubborn.run_id]
        guard_tick(instance, ours)
    retry_attempt_failed(instance, stubborn, error)
    assert lost_retries(instance, ours) == []


def test_a_run_still_waiting_for_its_retry_long_after_failing_is_asked_for_again(instance):
    run = failed_run(instance)  # will_retry=true, and the daemon never came to it
    assert lost_retries(instance, ours) == []
    later = time.time() + LOST_AFTER_S + 1
    [(lost, why)] = lost_retries(instance, ours, now=later)
    assert lost.run_id == run.run_id and "no retry was launched within 10 minutes" in why


def test_a_run_failed_by_the_database_says_so_in_its_alert(instance, closed_port):
    """The run's process met the outage: Dagster records the error as an engine event ("An exception
    was thrown during execution that is likely a framework error") and fails the run with a failure
    event that carries no error of its own; the alert takes the engine event's error, database first."""
    error = database_error(closed_port)
    run = instance.create_run_for_job(evaluation)
    instance.report_engine_event(
        "An exception was thrown during execution that is likely a framework error, rather than an error "
        "in user code.",
        run,
        EngineEventData.engine_error(error),
    )
    instance.report_run_failed(
        run
    )  # "This run has been marked as failed from outside the execution context."
    [failure] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    alert = step_failure_alert(
        run, [], None, None, failure.dagster_event, [], engine_error(instance, run.run_id)
    )
    assert alert.error.startswith(f"the run failed outside any step: {INSTANCE_DATABASE}: OperationalError: ")
    assert f"port {closed_port} failed: Connection refused" in alert.error
    # Dagster's storage giving up is the context; SQLAlchemy's re-raise of the same message is not said.
    assert alert.error.endswith("(context: DagsterPostgresException: too many retries for DB connection)")

    # The same error carried by the failure event itself (the run worker reported it): said the same way.
    plain = instance.create_run_for_job(evaluation)
    instance.report_run_failed(
        plain, "Execution of run failed.", JobFailureData(error=error, failure_reason=None)
    )
    [own] = instance.all_logs(plain.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    alert = step_failure_alert(
        plain, [], None, None, own.dagster_event, [], engine_error(instance, plain.run_id)
    )
    assert alert.error.startswith(f"the run failed outside any step: {INSTANCE_DATABASE}: OperationalError: ")
    # An error that is not the database's is said as before.
    other = instance.create_run_for_job(evaluation)
    instance.report_run_failed(other)
    [bare] = instance.all_logs(other.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    alert = step_failure_alert(
        other, [], None, None, bare.dagster_event, [], engine_error(instance, other.run_id)
    )
    assert INSTANCE_DATABASE not in alert.error and "marked as failed from outside" in alert.error


def test_a_level_repeating_the_root_message_is_dropped_but_a_short_root_proves_nothing():
    from dagster._utils.error import SerializableErrorInfo

    from ragspine_pipeline.defs.run_errors import error_text

    def chain(root: str, wrapper: str) -> SerializableErrorInfo:
        cause = SerializableErrorInfo(f"psycopg2.OperationalError: {root}\n", [], "OperationalError")
        return SerializableErrorInfo(f"{wrapper}\n", [], "DagsterPostgresException", cause)

    long_root = 'connection to server at "db", port 5432 failed: Connection refused'
    said = error_text(
        chain(long_root, f"sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) {long_root}")
    )
    assert said == f"OperationalError: {long_root}"  # the re-raise says nothing more
    said = error_text(chain("'x'", "dagster_postgres.utils.DagsterPostgresException: no row for 'x'"))
    assert said == "OperationalError: 'x' (context: DagsterPostgresException: no row for 'x')"

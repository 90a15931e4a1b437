"""Run retries that survive a database outage: a failed run whose automatic retry Dagster attempted and
could not launch is given that retry once the database answers again.

Dagster's daemon retries a failed run (``run_retries`` in ``dagster.yaml``) in one attempt: when that
attempt raises — the instance's database went away again, or was still restarting, or the code server
did not answer — the daemon records "Failed to retry run" on the run, tags it ``dagster/will_retry:
false`` and never tries again. After a 30-second PostgreSQL outage the run it failed was therefore
never retried. The same holds, more rarely, for a run tagged ``dagster/will_retry: true`` whose failure
the daemon skipped while the database was down: no retry ever comes.

This module's sensor (one per service, running by default, every minute) finds such runs of its
service among those that failed in the last day and *re-arms* Dagster's own retry: it reports the run's
failure once more (with the first failure's error, and a message saying why). Dagster then decides
afresh whether the run is to be retried — its ``max_retries`` (of the instance or the run's
``dagster/max_retries`` tag), the retries its run group already holds, a step failure not retried —
and its daemon launches the retry from failure as it does any other: same run group, same tags, only the
steps that did not succeed. The failure alert is not posted again (its thread already has it); the
retry's success is said in that thread as usual.

A run is re-armed at most :data:`MAX_REARMS` times, and only after each failed attempt of Dagster's (a
"Failed to retry run" event newer than the last re-arm), so a retry that keeps failing to launch ends
with the run failed, as before, and its alert standing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import dagster as dg
from dagster._core.storage.tags import (  # Dagster's run-retry tags; not re-exported by dagster
    AUTO_RETRY_RUN_ID_TAG,
    PARENT_RUN_ID_TAG,
    WILL_RETRY_TAG,
)

from ragspine_pipeline.defs.run_errors import error_text

FAILED_RETRY = "Failed to retry run"  # the daemon's engine event when its retry attempt raised
REARMED = "Dagster's automatic retry of this run could not be launched"  # our failure events' message
MAX_REARMS = 5
LOOKBACK_S = 24 * 3600  # runs that failed longer ago are left alone
LOST_AFTER_S = 600  # a run tagged will_retry=true still without its retry this long after failing
GUARD_INTERVAL_S = 60


def lost_retries(
    instance: dg.DagsterInstance, owns: Callable[[dg.DagsterRun], bool], now: float | None = None
) -> list[tuple[dg.DagsterRun, str]]:
    """The failed runs ``owns`` accepts whose automatic retry was lost, each with the reason."""
    now = time.time() if now is None else now
    recent = dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.FAILURE],
        updated_after=datetime.fromtimestamp(now - LOOKBACK_S, tz=UTC),
    )
    lost = []
    for record in instance.get_run_records(filters=recent):
        run = record.dagster_run
        ended = record.end_time or record.update_timestamp.timestamp()
        if not owns(run) or AUTO_RETRY_RUN_ID_TAG in run.tags:
            continue
        will_retry = run.tags.get(WILL_RETRY_TAG)
        if will_retry not in ("true", "false") or _has_retry(instance, run.run_id):
            continue
        attempts, rearms, cause = _history(instance, run.run_id)
        if rearms >= MAX_REARMS:
            continue
        if will_retry == "false" and attempts > rearms:
            lost.append((run, "its retry failed to launch" + (f": {cause}" if cause else "")))
        elif will_retry == "true" and now - ended > LOST_AFTER_S:
            lost.append((run, f"no retry was launched within {LOST_AFTER_S // 60} minutes of its failure"))
    return lost


def rearm(instance: dg.DagsterInstance, run: dg.DagsterRun, why: str) -> None:
    """Report ``run``'s failure again, with its first failure's error, so that Dagster decides its
    retry afresh and its daemon launches it."""
    failures = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    first = failures[0].dagster_event if failures and failures[0].dagster_event else None
    data = first.job_failure_data if first is not None and first.is_job_failure else None
    _, rearms, _ = _history(instance, run.run_id)
    message = f"{REARMED} ({why}); its failure is reported again (attempt {rearms + 1} of {MAX_REARMS})"
    instance.report_run_failed(run, message=message, job_failure_data=data)


def guard_tick(
    instance: dg.DagsterInstance, owns: Callable[[dg.DagsterRun], bool], log=None
) -> dg.SkipReason:
    """One tick of the sensor: re-arm every lost retry; a skip saying what it did (it never starts a
    run itself: the daemon's run retries do)."""
    lost = lost_retries(instance, owns)
    for run, why in lost:
        rearm(instance, run, why)
        if log is not None:
            log.warning(f"run {run.run_id}: {why}; its retry is asked for again")
    if not lost:
        return dg.SkipReason("no failed run is missing its automatic retry")
    return dg.SkipReason(f"asked Dagster again for the retry of {', '.join(r.run_id for r, _ in lost)}")


def retry_guard_sensor(name: str, owns: Callable[[dg.DagsterRun], bool]) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=GUARD_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Every minute, find this service's failed runs whose automatic retry Dagster "
        "attempted and could not launch (the database or the code server was away at that moment) and "
        "ask for it again. It never starts a run itself.",
    )
    def retry_guard(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        return guard_tick(context.instance, owns, context.log)

    return retry_guard


def _has_retry(instance: dg.DagsterInstance, run_id: str) -> bool:
    return bool(instance.get_run_ids(dg.RunsFilter(tags={PARENT_RUN_ID_TAG: run_id}), limit=1))


def _history(instance: dg.DagsterInstance, run_id: str) -> tuple[int, int, str | None]:
    """Dagster's failed retry attempts on the run, our re-arms of it, and the last attempt's error."""
    engine = instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
    attempts = [entry for entry in engine if entry.message == FAILED_RETRY]
    failures = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    rearms = sum(1 for entry in failures if (entry.message or "").startswith(REARMED))
    data = attempts[-1].dagster_event.engine_event_data if attempts and attempts[-1].dagster_event else None
    cause = error_text(data.error) if data is not None and data.error is not None else None
    return len(attempts), rearms, cause

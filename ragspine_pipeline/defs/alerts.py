"""Alerts in the code location: the release decision's regression alert, the delivery of what earlier
runs left pending, the run-status sensors that post a run's alerts when it ends, and the delivery
sensor that posts what is still pending every minute.

One run, one message: the alert checks of a run (release, extraction, production) only queue their
alerts in the outbox; when the run ends — successfully, blocked, or crashed — its alerts are posted
together as one Slack message by ``evaluation_run_success_sensor`` / ``evaluation_run_failure_sensor``
(the daemon ticks them; ``make run`` and ``make demo-regression`` do the same without one). A run the
index-rebuild sensor requested for a version that replaced unevaluated ones says so in its message
(:func:`queue_superseded`). A failed run's alert names the steps that succeeded before it failed; its
pool slots are freed and, on Celery, its unfinished tasks revoked (:func:`finish_failed_run`).

The Slack token, channel and API base URL are read from the environment (``SLACK_BOT_TOKEN``,
``SLACK_CHANNEL``, ``SLACK_API_BASE_URL``) at delivery time and are never resource config, so they
never reach the UI, run metadata or the outbox. The alert checks are WARN-only and never fail a run.
A blocked release is a successful run (announced by ``regression_alert``); a failed run is a pipeline
that could not evaluate, announced with its crash: the error's class and message, root cause first
(:func:`error_text`).

Alerts that could not be posted when their run ended (Slack down, rate limiting, an unanswered post) wait
in the outbox; ``alert_delivery_sensor`` (every minute, running by default) delivers them once Slack is
back, without waiting for the next run or a manual ``ragspine-eval alerts flush``.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

import dagster as dg

from ragspine_pipeline.alerts.builders import (
    release_alert,
    retry_succeeded_alert,
    run_failure_alert,
    superseded_alert,
)
from ragspine_pipeline.alerts.delivery import FlushResult
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.decision.release import ReleaseDecision
from ragspine_pipeline.defs.automation import SUPERSEDED_TAG
from ragspine_pipeline.defs.executor import executor_from_env
from ragspine_pipeline.defs.golden import INDEX_VERSION_TAG
from ragspine_pipeline.defs.judge import EVALUATION_POOL
from ragspine_pipeline.defs.release import DECISION_TAG, NO_DECISION
from ragspine_pipeline.defs.resources import AlertsResource
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.run_errors import engine_error, run_error_text, step_error_text
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.errors import InputError

if TYPE_CHECKING:  # what a failure event carries (dagster exports no public name for it)
    from dagster._utils.error import SerializableErrorInfo

DELIVERY_INTERVAL_S = 60  # how often the delivery sensor looks for pending alerts


def alert_defs(service: Service) -> tuple[list[dg.AssetChecksDefinition], list[dg.SensorDefinition]]:
    """The service's alert checks, the run-status sensors that post its runs' alerts, and the sensor
    that delivers what is left pending."""
    alerts = service.alerts

    @dg.asset_check(
        asset=service.key("release_decision"),
        name="regression_alert",
        description="announce a new regression or a recovery (Slack), and the index versions the run's "
        "index replaced before they were evaluated",
        pool=service.node(EVALUATION_POOL),
        retry_policy=step_retries(),
    )
    def regression_alert(
        context: dg.AssetCheckExecutionContext, release_decision: ReleaseDecision
    ) -> dg.AssetCheckResult:
        # The decision's run_id is the run that decided.
        stream = service.stream(f"release:{service.files.baseline_mode}")
        alert = release_alert(release_decision, stream, alerts.webserver_base_url, alerts.runbook("release"))
        try:
            queue_superseded(alerts, context.run, service.stream, context.log)  # said in the run's message
        except InputError as exc:  # a full disk: the release alert's own check says so too
            context.log.error(f"superseded index versions not queued: {exc}")
        return alerts.alert_check(alert, context.log)

    @dg.asset_check(
        asset=service.key("slice_report"),
        name="alert_outbox_flushed",
        description="deliver alerts that earlier, finished runs left pending",
        retry_policy=step_retries(),
    )
    def alert_outbox_flushed(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return alerts.check_result(alerts.deliver(context.log, context.instance))

    # No monitored_jobs: a run of the service may be one of its jobs or a selection of its assets (the
    # UI's "Materialize all"); the sensor keeps to the runs of its own service (Service.owns).
    @dg.run_failure_sensor(
        name=service.node("evaluation_run_failure_sensor"),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Post a failed evaluation run's alerts to Slack, with the crash itself.",
    )
    def evaluation_run_failure_sensor(context: dg.RunFailureSensorContext) -> None:
        if service.owns(context.dagster_run):
            finish_failed_run(
                alerts,
                context.dagster_run,
                context.get_step_failure_events(),
                context.instance,
                context.log,
                run_failure=context.failure_event,
                stream=service.stream,
            )

    @dg.run_status_sensor(
        name=service.node("evaluation_run_success_sensor"),
        run_status=dg.DagsterRunStatus.SUCCESS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Post a finished evaluation run's alerts to Slack, as one message.",
    )
    def evaluation_run_success_sensor(context: dg.RunStatusSensorContext) -> None:
        if service.owns(context.dagster_run):
            finish_succeeded_run(alerts, context.dagster_run, context.instance, context.log)

    # Running by default, like the run-status sensors: in every set-up with a daemon, what Slack refused
    # is posted within a minute of its coming back. No job: it never starts a run.
    @dg.sensor(
        name=service.node("alert_delivery_sensor"),
        minimum_interval_seconds=DELIVERY_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Every minute, post the alerts still pending in the outbox (Slack was down, or "
        "rate-limited, when their run ended). With nothing pending it only reads the outbox; a Slack "
        "still down leaves them pending for the next tick. It never starts a run.",
    )
    def alert_delivery_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        return delivery_tick(alerts, context.instance, context.log)

    return [regression_alert, alert_outbox_flushed], [
        evaluation_run_failure_sensor,
        evaluation_run_success_sensor,
        alert_delivery_sensor,
    ]


def delivery_tick(alerts: AlertsResource, instance: dg.DagsterInstance | None, log=None) -> dg.SkipReason:
    """One tick of the delivery sensor: when the outbox holds pending alerts, one delivery pass (the
    same ``AlertsResource.deliver`` as the run-status sensors and the delivery check, so it waits for
    any pass in progress and never posts an alert twice); a skip saying what it did either way. It
    never raises because Slack is down or the outbox cannot be read: the alerts stay where they are."""
    try:
        with alerts.outbox() as outbox:
            pending = len(outbox.read(read_only=True).pending)  # writes nothing, takes no delivery lock
    except InputError as exc:
        if log is not None:
            log.warning(f"alert outbox not read: {exc}")
        return dg.SkipReason(f"the outbox cannot be read: {exc}")
    if not pending:
        return dg.SkipReason(f"no alert pending in {alerts.outbox_name}")
    result = alerts.deliver(log, instance)
    return dg.SkipReason(delivery_summary(result))


def delivery_summary(result: FlushResult) -> str:
    """What a delivery pass did, in one line: delivered, pending and why, expired."""
    parts = [f"{len(result.delivered)} alert(s) delivered in {result.messages} message(s)"]
    undelivered = result.pending - result.waiting
    if undelivered:
        reason = result.skipped or result.error or next(iter(result.failed.values()), "not attempted")
        parts.append(f"{undelivered} pending: {reason}")
    if result.waiting:
        parts.append(f"{result.waiting} waiting for their run to end")
    if result.expired:
        parts.append(f"{len(result.expired)} expired unposted")
    if result.pending == 0:
        parts.append("none pending")
    return "; ".join(parts)


def finish_succeeded_run(
    alerts: AlertsResource, run: dg.DagsterRun, instance: dg.DagsterInstance, log=None
) -> FlushResult:
    """What follows a successful run: when it retries (or re-executes) a run that failed, say in that
    failure's thread that it succeeded, and with which decision; then deliver the run's alerts.

    The failed run's own alert is queued first when the failure sensor has not queued it yet (its tick
    may come after the retry's end on a busy daemon): queued twice, an attempt's failure is news once,
    and the thread's last word is the retry's, whatever order the sensors tick in."""
    if run.root_run_id and run.root_run_id != run.run_id:
        parent = instance.get_run_by_id(run.parent_run_id) if run.parent_run_id else None
        if parent is not None and parent.status == dg.DagsterRunStatus.FAILURE:
            alerts.queue(logged_failure_alert(alerts, parent, instance), log)
        decision = (instance.get_run_by_id(run.run_id) or run).tags.get(DECISION_TAG)
        alert = retry_succeeded_alert(
            run.job_name, run.run_id, run.root_run_id, decision, alerts.webserver_base_url
        )
        alerts.queue(alert, log)
    return alerts.deliver(log, instance)


def finish_failed_run(
    alerts: AlertsResource,
    run: dg.DagsterRun,
    step_failures: list[dg.DagsterEvent],
    instance: dg.DagsterInstance,
    log=None,
    run_failure: dg.DagsterEvent | None = None,
    stream: Callable[[str], str] = str,
) -> tuple[Alert | None, FlushResult]:
    """What follows a failed run: free the pool slots it still holds, queue its crash (naming the steps
    that succeeded) and the index versions its index replaced unevaluated, then deliver the run's alerts
    as one message. A run that decided before it failed loses its ``ship``/``block`` tag: a failed run is
    never counted as a decision. ``run_failure`` is the run's own failure event: what the alert says
    when no step failed (the run worker died, the run exceeded its maximum runtime); ``stream`` makes a
    stream name the service's (``Service.stream``).

    A run whose coordinator died mid-step keeps its pool slots until something frees them: the next
    evaluation of the service would wait for a slot nobody gives back; on Celery, its steps still queued
    or running are revoked first (:func:`revoke_celery_tasks`)."""
    revoke_celery_tasks(instance, run.run_id, log)
    free_slots(instance, run.run_id)
    if run.tags.get(DECISION_TAG) in ("ship", "block"):  # decided, then failed: no decision stands
        instance.add_run_tags(run.run_id, {DECISION_TAG: NO_DECISION})
    alert = step_failure_alert(
        run,
        step_failures,
        alerts.webserver_base_url,
        alerts.runbook("run_failure"),
        run_failure,
        succeeded_steps(instance, run.run_id),
        None if step_failures else engine_error(instance, run.run_id),  # read only where it is said
    )
    queued = alerts.queue(alert, log)
    queue_superseded(alerts, run, stream, log)
    return queued, alerts.deliver(log, instance)


def logged_failure_alert(alerts: AlertsResource, run: dg.DagsterRun, instance: dg.DagsterInstance) -> Alert:
    """The failed ``run``'s alert as the failure sensor makes it, from the instance's event log."""
    steps = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    failed = [record.dagster_event for record in steps if record.dagster_event]
    ends = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return step_failure_alert(
        run,
        failed,
        alerts.webserver_base_url,
        alerts.runbook("run_failure"),
        ends[-1].dagster_event if ends else None,
        succeeded_steps(instance, run.run_id),
        None if failed else engine_error(instance, run.run_id),  # read only where it is said
    )


def step_failure_alert(
    run: dg.DagsterRun,
    step_failures: list[dg.DagsterEvent],
    webserver_base_url: str | None,
    runbook: str | None = None,
    run_failure: dg.DagsterEvent | None = None,
    succeeded: list[str] | None = None,
    framework_error: "SerializableErrorInfo | None" = None,
) -> Alert:
    """The run-failure alert of ``run``, naming its first failed step and that step's error; without a
    failed step, what the run's failure event says. ``succeeded``: the run's steps that succeeded
    (:func:`succeeded_steps`; None: not known). ``framework_error``: the error Dagster recorded on the
    run outside its steps (:func:`engine_error`), said when the failure event carries none."""
    first = step_failures[0] if step_failures else None
    return run_failure_alert(
        run.job_name,
        run.run_id,
        first.step_key if first else None,
        step_error_text(first) if first else run_error_text(run_failure, bool(succeeded), framework_error),
        webserver_base_url,
        runbook,
        succeeded,
        run.root_run_id,
    )


def succeeded_steps(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The steps of the run that succeeded, in the order they did (from the instance's event log)."""
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    return list(dict.fromkeys(record.step_key for record in records if record.step_key))


def revoke_celery_tasks(instance: dg.DagsterInstance, run_id: str, log=None) -> list[str]:
    """Where steps run on Celery (``RAGSPINE_EXECUTOR=celery``), revoke the tasks of the ended run
    ``run_id`` whose step had not finished (``defs.celery_app``: a worker also stops such a step
    itself); their ids. A broker that cannot be reached is a warning: the workers still stop them."""
    if executor_from_env().name != "celery":
        return []
    from ragspine_pipeline.defs import celery_app  # the deploy extra, and the broker's settings

    try:
        revoked = celery_app.revoke_unfinished(instance, run_id)
    except Exception as exc:  # kombu's connection errors and the like: the workers' own watch remains
        if log is not None:
            log.warning(f"Celery tasks of run {run_id} not revoked: {type(exc).__name__}: {exc}")
        return []
    if revoked and log is not None:
        log.info(f"revoked the unfinished Celery tasks of run {run_id}: {', '.join(revoked)}")
    return revoked


def free_slots(instance: dg.DagsterInstance, run_id: str) -> int:
    """Free the pool slots the ended run ``run_id`` still holds; how many it held."""
    storage = instance.event_log_storage
    if not getattr(storage, "supports_global_concurrency_limits", False):
        return 0
    return storage.free_concurrency_slots_for_run(run_id) or 0


def queue_superseded(
    alerts: AlertsResource, run: dg.DagsterRun, stream: Callable[[str], str] = str, log=None
) -> Alert | None:
    """Queue with the alerts of ``run`` the notice that the index versions its
    ``ragspine/superseded_versions`` tag names (the index-rebuild sensor's) were replaced before they
    were evaluated; the notice, or None (no such version, or already said: one stream per evaluated
    version, so a retried run does not say it again)."""
    missed = [version for version in run.tags.get(SUPERSEDED_TAG, "").split(",") if version]
    evaluated = run.tags.get(INDEX_VERSION_TAG)
    if not missed or not evaluated:
        return None
    notice = superseded_alert(
        missed, evaluated, stream(f"index:{evaluated}"), run.run_id, alerts.webserver_base_url
    )
    return alerts.queue(notice, log)

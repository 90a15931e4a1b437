"""Alerts in the code location: the release decision's regression alert, the delivery of what earlier
runs left pending, and the run-status sensors that post a run's alerts when it ends.

One run, one message: the alert checks of a run (release, extraction, production) only queue their
alerts in the outbox; when the run ends — successfully, blocked, or crashed — its alerts are posted
together as one Slack message by ``evaluation_run_success_sensor`` / ``evaluation_run_failure_sensor``
(the daemon ticks them; ``make run`` and ``make demo-regression`` do the same without one).

The Slack token, channel and API base URL are read from the environment (``SLACK_BOT_TOKEN``,
``SLACK_CHANNEL``, ``SLACK_API_BASE_URL``) at delivery time and are never resource config, so they
never reach the UI, run metadata or the outbox. The alert checks are WARN-only and never fail a run:
a blocked release fails through ``release_gates``, not because Slack is absent or down.
"""

import dagster as dg

from ragspine_pipeline.alerts.delivery import FlushResult
from ragspine_pipeline.alerts.model import Alert, release_alert, run_failure_alert
from ragspine_pipeline.defs.resources import AlertsResource
from ragspine_pipeline.defs.service import Service

# A run that failed only because a blocking gate check said "block" is a regression, announced by
# regression_alert; the run-failure alert is for everything else.
GATE_FAILURE = "DagsterAssetCheckFailedError"


def alert_defs(service: Service) -> tuple[list[dg.AssetChecksDefinition], list[dg.SensorDefinition]]:
    """The service's alert checks, and the run-status sensors that post its runs' alerts."""
    alerts = service.alerts

    @dg.asset_check(
        asset=service.key("release_decision"),
        name="regression_alert",
        description="announce a new regression or a recovery (Slack)",
    )
    def regression_alert(
        context: dg.AssetCheckExecutionContext, release_decision: dict
    ) -> dg.AssetCheckResult:
        # The decision's run_id is the run that decided.
        stream = service.stream(f"release:{service.files.baseline_mode}")
        alert = release_alert(release_decision, stream, alerts.webserver_base_url, alerts.runbook("release"))
        return alerts.alert_check(alert, context.log)

    @dg.asset_check(
        asset=service.key("slice_report"),
        name="alert_outbox_flushed",
        description="deliver alerts that earlier, finished runs left pending",
    )
    def alert_outbox_flushed(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return alerts.check_result(alerts.deliver(context.log, context.instance))

    # No monitored_jobs: a run of the service may be one of its jobs or a selection of its assets (the
    # UI's "Materialize all"); the sensor keeps to the runs of its own service (Service.owns).
    @dg.run_failure_sensor(
        name=service.node("evaluation_run_failure_sensor"),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Post a failed evaluation run's alerts to Slack, with the crash itself unless only "
        "release gates failed.",
    )
    def evaluation_run_failure_sensor(context: dg.RunFailureSensorContext) -> None:
        if service.owns(context.dagster_run):
            finish_failed_run(
                alerts, context.dagster_run, context.get_step_failure_events(), context.instance, context.log
            )

    @dg.run_status_sensor(
        name=service.node("evaluation_run_success_sensor"),
        run_status=dg.DagsterRunStatus.SUCCESS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Post a finished evaluation run's alerts to Slack, as one message.",
    )
    def evaluation_run_success_sensor(context: dg.RunStatusSensorContext) -> None:
        if service.owns(context.dagster_run):
            alerts.deliver(context.log, context.instance)

    return [regression_alert, alert_outbox_flushed], [
        evaluation_run_failure_sensor,
        evaluation_run_success_sensor,
    ]


def finish_failed_run(
    alerts: AlertsResource,
    run: dg.DagsterRun,
    step_failures: list[dg.DagsterEvent],
    instance: dg.DagsterInstance,
    log=None,
) -> tuple[Alert | None, FlushResult]:
    """Queue the crash of a failed run (unless only its release gates failed: that is the regression
    its release alert announces), then deliver the run's alerts as one message."""
    alert = step_failure_alert(run, step_failures, alerts.webserver_base_url, alerts.runbook("run_failure"))
    queued = None if alert is None else alerts.queue(alert, log)
    return queued, alerts.deliver(log, instance)


def step_failure_alert(
    run: dg.DagsterRun,
    step_failures: list[dg.DagsterEvent],
    webserver_base_url: str | None,
    runbook: str | None = None,
) -> Alert | None:
    """The run-failure alert of ``run`` from its step failures; None when only gate checks failed."""
    crashes = [e for e in step_failures if _error_class(e) != GATE_FAILURE]
    if step_failures and not crashes:
        return None
    first = crashes[0] if crashes else None
    return run_failure_alert(
        run.job_name,
        run.run_id,
        first.step_key if first else None,
        _error_text(first) if first else "the run failed before any step (see the run's logs)",
        webserver_base_url,
        runbook,
    )


def _error_class(event: dg.DagsterEvent) -> str | None:
    error = event.step_failure_data.error
    return error.cls_name if error else None


def _error_text(event: dg.DagsterEvent) -> str:
    data = event.step_failure_data
    if data.user_failure_data and data.user_failure_data.description:
        return data.user_failure_data.description  # a dg.Failure: the one-line user message
    if data.error:
        return f"{data.error.cls_name}: {data.error.message.strip()}"
    return "unknown error"

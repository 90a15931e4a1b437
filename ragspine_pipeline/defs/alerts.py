"""Alerts in the code location: the release decision's regression alert, the delivery of what earlier
runs left pending, and the run-status sensors that post a run's alerts when it ends.

One run, one message: the alert checks of a run (release, extraction, production) only queue their
alerts in the outbox; when the run ends — successfully, blocked, or crashed — its alerts are posted
together as one Slack message by ``evaluation_run_success_sensor`` / ``evaluation_run_failure_sensor``
(the daemon ticks them; ``make run`` and ``make demo-regression`` do the same without one).

The Slack token, channel and API base URL are read from the environment (``SLACK_BOT_TOKEN``,
``SLACK_CHANNEL``, ``SLACK_API_BASE_URL``) at delivery time and are never resource config, so they
never reach the UI, run metadata or the outbox. The alert checks are WARN-only and never fail a run.
A blocked release is a successful run (announced by ``regression_alert``); a failed run is a pipeline
that could not evaluate, announced with its crash.
"""

import dagster as dg

from ragspine_pipeline.alerts.delivery import FlushResult
from ragspine_pipeline.alerts.model import Alert, release_alert, run_failure_alert
from ragspine_pipeline.defs.resources import AlertsResource
from ragspine_pipeline.defs.service import Service


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
        description="Post a failed evaluation run's alerts to Slack, with the crash itself.",
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
    """Queue the crash of a failed run, then deliver the run's alerts as one message."""
    alert = step_failure_alert(run, step_failures, alerts.webserver_base_url, alerts.runbook("run_failure"))
    queued = alerts.queue(alert, log)
    return queued, alerts.deliver(log, instance)


def step_failure_alert(
    run: dg.DagsterRun,
    step_failures: list[dg.DagsterEvent],
    webserver_base_url: str | None,
    runbook: str | None = None,
) -> Alert:
    """The run-failure alert of ``run``, naming its first failed step and that step's error."""
    first = step_failures[0] if step_failures else None
    return run_failure_alert(
        run.job_name,
        run.run_id,
        first.step_key if first else None,
        _error_text(first) if first else "the run failed before any step (see the run's logs)",
        webserver_base_url,
        runbook,
    )


def _error_text(event: dg.DagsterEvent) -> str:
    data = event.step_failure_data
    if data.user_failure_data and data.user_failure_data.description:
        return data.user_failure_data.description  # a dg.Failure: the one-line user message
    if data.error:
        return f"{data.error.cls_name}: {data.error.message.strip()}"
    return "unknown error"

"""Run the code location on the local instance without a daemon: what ``make run`` and
``make demo-regression`` call.

``python -m ragspine_pipeline.defs.local run`` scores the production days of the past week not yet on
the instance (one small run per partition), then yesterday (or ``--partition``) the same way, then
everything else in one ``full_eval`` run, and prints the decision; ``reeval`` evaluates
``index_rebuild_sensor`` once, as the daemon would, and executes exactly the run it requests (same run
key and tags). After each run, its alerts are delivered as one message, as the run-status sensors do
under the daemon.
Exit codes: 0 when the command did what it was asked, 1 when ``run`` ends blocked or a run crashed, 2 when
``--partition`` is not a production day of the deployment (before the trace store starts, or not yet over).

A run executes inside this process: if the process dies (``kill -9``, the out-of-memory killer, a crash
in native code), nothing is left to record the run's end and the instance would show it STARTED for
ever. Every run is tagged with the runner's host and process id, and the next invocation marks the
runs of dead runners on this host failed and queues their run-failure alerts (``recover_orphaned_runs``).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import socket
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg

from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.alerts.delivery import FlushResult
from ragspine_pipeline.decision.release import ReleaseDecision
from ragspine_pipeline.defs.alerts import finish_failed_run, finish_succeeded_run, free_slots, succeeded_steps
from ragspine_pipeline.defs.automation import INDEX_VERSION_TAG
from ragspine_pipeline.defs.judge import EVALUATION_POOL, EVALUATION_SLOTS, POOLS
from ragspine_pipeline.defs.resources import AlertsResource, EvalFiles
from ragspine_pipeline.defs.sensor_tick import tick_sensor
from ragspine_pipeline.files import atomic_output
from ragspine_pipeline.scoring.extraction import CHANNELS

RUNNER_HOST_TAG = "ragspine/runner_host"
RUNNER_PID_TAG = "ragspine/runner_pid"
ORPHANED = (
    "the process running it ended before the run did (killed, out of memory, or a crash in native code)"
)
DAY = timedelta(days=1)
# The code location's one service is unnamed: its assets have plain keys.
PRODUCTION_TRACES, PRODUCTION_METRICS = dg.AssetKey("production_traces"), dg.AssetKey("production_metrics")
EXTRACTION_SCORES = dg.AssetKey("extraction_scores")
ALERT_CHECKS = {
    "regression_alert",
    "extraction_alert",
    "production_alert",  # evaluated inside the production_metrics step (a partitioned asset)
}
# The demo's malformed input lines are there to show quarantine at work (``print_run_notes``).
DELIBERATE = " (the demo's, on purpose)"
# The run's event log belongs in the UI (`make dev`); the terminal shows the decision, the failed steps,
# quarantined input and alerts (print_decision, print_run_notes).
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def local_instance() -> dg.DagsterInstance:
    """The project-local instance: ``$DAGSTER_HOME`` (default ``var/dagster``) with the root dagster.yaml.

    Opened under an exclusive lock on ``$DAGSTER_HOME/.instance.lock`` with every storage touched once:
    two processes creating a new SQLite instance at the same moment otherwise race on its schema
    (``UNIQUE constraint failed: alembic_version``)."""
    home = Path(os.environ.get("DAGSTER_HOME") or "var/dagster").absolute()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    with open(home / ".instance.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        config = home / "dagster.yaml"
        if not config.exists() and Path("dagster.yaml").exists():
            with atomic_output(config, "instance configuration") as out:
                out.write(Path("dagster.yaml").read_bytes())
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)  # creates the run, event log and schedule storage if new
        instance.event_log_storage.get_event_records(
            dg.EventRecordsFilter(dg.DagsterEventType.RUN_SUCCESS), limit=1
        )
        instance.all_instigator_state()
        initialize_pools(instance)
    return instance


def initialize_pools(
    instance: dg.DagsterInstance, evaluation_pools: tuple[str, ...] = (EVALUATION_POOL,)
) -> None:
    """Create the limit rows of the pools now, one process at a time: the heavy steps' pools at the
    instance's default limit (none on the embedded instance), each service's evaluation pool
    (``evaluation_pools``; the local runner's one unnamed service by default) at one slot on every
    instance. A limit already set (``dagster instance concurrency set``) is kept.

    Dagster creates a pool's row on the first step that claims it; two runs doing that at once on
    PostgreSQL collide (an insert conflict aborts the transaction Dagster then keeps using) and one
    run fails. Done here, under the instance lock, no run ever races for it. One slot costs a lone
    run nothing: its evaluation steps follow each other anyway."""
    storage = instance.event_log_storage
    if not getattr(storage, "supports_global_concurrency_limits", False):
        return
    existing = storage.get_concurrency_keys()
    for pool in POOLS:
        if pool not in existing:
            storage.initialize_concurrency_limit_to_default(pool)
    for pool in evaluation_pools:
        if pool not in existing:
            storage.set_concurrency_slots(pool, EVALUATION_SLOTS)


def run_everything(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """Materialise every asset but the production days in one run (the `full_eval` job)."""
    job = defs.resolve_job_def("full_eval")
    return job.execute_in_process(
        instance=instance, run_config=QUIET, raise_on_error=False, tags=runner_tags()
    )


def runner_tags() -> dict[str, str]:
    """Who is running a run in-process: read by :func:`recover_orphaned_runs` after this process dies."""
    return {RUNNER_HOST_TAG: socket.gethostname(), RUNNER_PID_TAG: str(os.getpid())}


def recover_orphaned_runs(defs: dg.Definitions, instance: dg.DagsterInstance) -> list[str]:
    """Mark failed every run this host's runner left STARTED (or STARTING) when its process died, and
    queue a run-failure alert for each; return their run ids. A run whose runner is alive is left alone."""
    alerts: AlertsResource = defs.resources["alerts"]
    active = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING]
    runs = instance.get_runs(dg.RunsFilter(statuses=active, tags={RUNNER_HOST_TAG: socket.gethostname()}))
    recovered = []
    for run in runs:
        if _alive(run.tags.get(RUNNER_PID_TAG, "")):
            continue
        instance.report_run_failed(run, ORPHANED)
        free_slots(instance, run.run_id)  # the dead runner's pool slots: its next run would wait for them
        alert = run_failure_alert(
            run.job_name,
            run.run_id,
            None,
            ORPHANED,
            alerts.webserver_base_url,
            alerts.runbook("run_failure"),
            succeeded_steps(instance, run.run_id),
            run.root_run_id,
        )
        alerts.queue(alert)
        recovered.append(run.run_id)
    return recovered


def _alive(pid_tag: str) -> bool:
    """Whether the process ``pid_tag`` names still runs this module (a reused pid runs something else)."""
    if not pid_tag.isdigit() or int(pid_tag) == os.getpid():
        return pid_tag.isdigit()
    try:
        cmdline = Path(f"/proc/{pid_tag}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(int(pid_tag), 0)  # no /proc: a live pid is taken at its word
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return b"ragspine_pipeline" in cmdline


def backfill_production(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    days: list[str],
    on_day: Callable[[str, int, int], None] | None = None,
) -> list[dg.ExecuteInProcessResult]:
    """Materialise the production assets for every day in ``days`` not yet on the instance.

    One `nightly_eval` run per partition (without its report step), as a Dagster backfill would
    launch them, each run's alerts delivered when it ends; the slice report's production trend then
    covers the demo's whole week from the first ``make run``. ``on_day(day, i, n)`` is told before each
    day's run (the ``i``-th of the ``n`` to do).
    """
    done = instance.get_materialized_partitions(PRODUCTION_METRICS)
    results = []
    todo = [day for day in days if day not in done]
    for i, day in enumerate(todo, start=1):
        if on_day is not None:
            on_day(day, i, len(todo))
        result = score_day(defs, instance, day)
        finish(defs, instance, result)
        results.append(result)
    return results


def score_day(defs: dg.Definitions, instance: dg.DagsterInstance, day: str) -> dg.ExecuteInProcessResult:
    """One `nightly_eval` run of the production day ``day`` without its report step (the run that
    follows shows it)."""
    return defs.resolve_job_def("nightly_eval").execute_in_process(
        instance=instance,
        partition_key=day,
        asset_selection=[PRODUCTION_TRACES, PRODUCTION_METRICS],
        run_config=QUIET,
        raise_on_error=False,
        tags=runner_tags(),
    )


def finish(
    defs: dg.Definitions, instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult
) -> FlushResult:
    """What the run-status sensors do when a run ends, without a daemon to tick them: queue a crash's
    alert, then deliver the run's alerts as one message."""
    alerts: AlertsResource = defs.resources["alerts"]
    if result.success:
        return finish_succeeded_run(alerts, result.dagster_run, instance)
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    queued, flushed = finish_failed_run(alerts, result.dagster_run, failures, instance)
    if queued is not None:
        print(f"alert: {queued.kind}: {queued.title}")
    return flushed


def reeval_as_sensor_requests(
    defs: dg.Definitions, instance: dg.DagsterInstance
) -> tuple[str, dg.ExecuteInProcessResult | None]:
    """Tick ``index_rebuild_sensor`` once and execute the run it requests; ``(message, result)``.

    The tick is evaluated and stored as the daemon's would be (`defs.sensor_tick`), and the run carries
    the sensor's tags, run key and tick. The cursor is the index version of the last re-evaluation on
    this instance, and a run key that already ran is not run again — the two guarantees the daemon gives.
    """
    previous = instance.get_runs(dg.RunsFilter(job_name="reeval_on_index_rebuild"), limit=1)
    cursor = previous[0].tags.get(INDEX_VERSION_TAG) if previous else None
    resources = {"index_manifest": defs.resources["index_manifest"]}
    sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    tick = tick_sensor(sensor, instance, cursor=cursor, resources=resources)
    if not tick.runs:
        return f"sensor skipped: {tick.skip_reason}", None
    run = tick.runs[0]  # one index version, one run
    job = defs.resolve_job_def("reeval_on_index_rebuild")
    result = job.execute_in_process(
        instance=instance,
        run_id=run.run_id,
        tags={**run.tags, **runner_tags()},
        run_config=QUIET,
        raise_on_error=False,
    )
    return f"sensor requested {run.run_key}", result


def print_decision(eval_files: EvalFiles, run_id: str) -> ReleaseDecision | None:
    """Print the run's decision with every failed gate and slice; return it (None when there is none)."""
    run_reports = eval_files.reports().child("runs", run_id)
    if not run_reports.exists("release_decision.json"):
        return None
    decision = ReleaseDecision.model_validate(
        run_reports.read_json("release_decision.json", "release decision")
    )
    print(
        f"release decision: {decision.decision.upper()}  (index {decision.index_version}, "
        f"golden {decision.golden_version}, run {run_id})"
    )
    for line in decision.reasons():
        print(f"  {line}")
    latest = eval_files.reports().join("latest")
    print(f"reports: {latest}/ (release_decision.json, slice_report.md/.html, metric_table.parquet)")
    return decision


def print_run_notes(result: dg.ExecuteInProcessResult) -> None:
    """What the run's own log would say and a terminal user needs: quarantined input lines, the
    extraction channels (and any below its threshold), and the alerts the run queued. The embedded demo
    writes a few malformed trace and fact lines on purpose (one day's traces, the parser's output), to
    show them set aside and counted: its notes say so."""
    for event in result.get_asset_materialization_events():
        metadata = event.materialization.metadata
        quarantined = metadata.get("quarantined")
        if quarantined is not None and quarantined.value:
            where = metadata["quarantine_path"].value
            print(f"  quarantined  {quarantined.value} malformed trace line(s){DELIBERATE}: {where}")
        if event.asset_key == EXTRACTION_SCORES and "aligned" in metadata:
            figures = ", ".join(f"{c} {metadata[f'{c}_accuracy'].value:.4f}" for c in CHANNELS)
            aside = metadata["invalid_facts"].value
            aside = f"; {aside} malformed fact line(s) set aside{DELIBERATE}" if aside else ""
            print(f"  extraction   {figures}{aside}")
    for evaluation in result.get_asset_check_evaluations():
        if evaluation.asset_key == EXTRACTION_SCORES and not evaluation.passed:
            values = {key: value.value for key, value in evaluation.metadata.items()}
            if "threshold" in values:
                print(
                    f"  failed channel {evaluation.check_name.removeprefix('channel_')} = "
                    f"{values['accuracy']:.4f}, needs >= {values['threshold']:.4f}"
                )
    for evaluation in result.get_asset_check_evaluations():
        if evaluation.check_name not in ALERT_CHECKS:
            continue
        new_alert = evaluation.metadata.get("new_alert")
        if new_alert is not None and not str(new_alert.value).startswith("none"):
            print(f"alert: {new_alert.value}")


def print_delivery(flushed: FlushResult, outbox: str) -> None:
    """What became of the run's alerts (and anything older still waiting)."""
    if flushed.messages:
        print(f"alerts: {flushed.messages} message(s) posted to Slack")
    if flushed.expired:
        print(f"alerts: {len(flushed.expired)} undelivered alert(s) expired unposted (older than their TTL)")
    if flushed.pending:
        print(
            f"alerts: {flushed.pending} pending in {outbox} ({_delivery(flushed)}); "
            "see `ragspine-eval alerts list`"
        )


def _scoring_day(day: str, i: int, n: int) -> None:
    print(f"scoring production day {day} ({i} of {n} earlier days not scored yet)", flush=True)


def _delivery(flushed: FlushResult) -> str:
    return flushed.skipped or next(iter(flushed.failed.values()), "not attempted")


def _failed_steps(result: dg.ExecuteInProcessResult) -> list[str]:
    failures = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.step_failure_data.error
            failures.append(f"{event.step_key}: {error.message.strip() if error else 'failed'}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragspine_pipeline.defs.local", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="score the production days, evaluate the release, print the decision")
    run.add_argument("--partition", help="production day (default: yesterday, UTC)")
    run.add_argument(
        "--backfill-days",
        type=int,
        default=6,
        help="also score this many production days before --partition, where not done yet (default 6)",
    )
    reeval = sub.add_parser("reeval", help="tick index_rebuild_sensor once and run what it requests")
    reeval.add_argument("--expect", choices=["ship", "block"], help="exit 1 unless the decision is this")
    args = parser.parse_args(argv)

    instance = local_instance()
    from ragspine_pipeline.definitions import code_location  # after DAGSTER_HOME is set

    defs = code_location()  # read now: the environment of this invocation

    eval_files: EvalFiles = defs.resources["eval_files"]
    outbox = defs.resources["alerts"].outbox_path
    for run_id in recover_orphaned_runs(defs, instance):
        print(f"run {run_id} had been left STARTED by a runner that died: marked failed, alert queued")
    if args.command == "run":
        day = date.fromisoformat(args.partition) if args.partition else datetime.now(UTC).date() - DAY
        # From the demo trace store's first day to yesterday.
        days = defs.get_assets_def("production_traces").partitions_def
        if not days.has_partition_key(day.isoformat()):
            print(f"--partition {day}: not a production day of this deployment ({days})", file=sys.stderr)
            return 2
        earlier = [(day - DAY * back).isoformat() for back in range(args.backfill_days, 0, -1)]
        earlier = [d for d in earlier if days.has_partition_key(d)]
        for backfill in backfill_production(defs, instance, earlier, on_day=_scoring_day):
            print_run_notes(backfill)
            for failure in _failed_steps(backfill):
                print(f"  step failed  {failure}", file=sys.stderr)
        print(f"scoring production day {day}", flush=True)
        night = score_day(defs, instance, day.isoformat())
        print_run_notes(night)
        print_delivery(finish(defs, instance, night), outbox)
        print("evaluating: golden replay, decision, baseline, extraction, report", flush=True)
        result = run_everything(defs, instance)
        decision = print_decision(eval_files, result.run_id)
        print_run_notes(result)
        print_delivery(finish(defs, instance, result), outbox)
        for failure in _failed_steps(night) + _failed_steps(result):
            print(f"  step failed  {failure}", file=sys.stderr)
        ships = decision is not None and decision.ships
        return 0 if ships and night.success and result.success else 1
    message, result = reeval_as_sensor_requests(defs, instance)
    print(message)
    if result is None:
        return 0
    decision = print_decision(eval_files, result.run_id)
    print_run_notes(result)
    print_delivery(finish(defs, instance, result), outbox)
    if decision is None:
        for failure in _failed_steps(result):
            print(f"  step failed  {failure}", file=sys.stderr)
        return 1
    return 0 if args.expect in (None, decision.decision) else 1


if __name__ == "__main__":
    sys.exit(main())

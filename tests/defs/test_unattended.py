"""Unattended operation: runs that die end, blips are retried, and pending alerts go out on their own.

* every shipped ``dagster.yaml`` turns on run monitoring (a short poll interval, a maximum runtime) and
  run retries, as Dagster itself reads the file;
* every step of the code location has the one shared retry policy (exponential back-off, jitter), which
  retries a blip and never a user error;
* a run-failure alert names the root cause of a wrapped error, and never ends with a colon;
* the delivery sensor leaves an alert pending while Slack answers 500, and delivers it once Slack is
  back, on the real loopback Slack.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml
from botocore.exceptions import EndpointConnectionError
from dagster._core.instance.config import dagster_instance_config
from dagster._utils.error import SerializableErrorInfo

from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.defs.alerts import DELIVERY_INTERVAL_S, step_failure_alert
from ragspine_pipeline.defs.metadata import user_errors
from ragspine_pipeline.defs.retries import MAX_RETRIES, STEP_RETRIES, step_retries
from ragspine_pipeline.defs.run_errors import error_text
from ragspine_pipeline.defs.run_launcher import ProcessCheckingRunLauncher
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from tests.alerts.slack_server import TOKEN, SlackServer
from tests.defs.declared import demo_definitions

REPO = Path(__file__).resolve().parents[2]
SHIPPED = [
    "dagster.yaml",
    "deploy/postgres/dagster.yaml",
    "deploy/celery/dagster.yaml",
    "deploy/k8s/dagster.yaml",  # its K8sRunLauncher is loaded in tests/deploy/test_k8s.py
]
# What the deployed files read from the environment; a value each, so that Dagster's validation runs.
INSTANCE_ENV = {
    "DAGSTER_PG_HOST": "127.0.0.1",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "",
    "DAGSTER_COMPUTE_LOG_BUCKET": "logs",
    "DAGSTER_COMPUTE_LOG_PREFIX": "steps",
    "DAGSTER_S3_ENDPOINT_URL": "http://127.0.0.1:9",
}
NO_WAIT = {"RAGSPINE_STEP_RETRY_DELAY_S": "0"}


# -- the shipped instances -----------------------------------------------------------------------


def test_the_list_of_shipped_instance_files_is_complete():
    found = set()
    for folder, subfolders, files in os.walk(REPO):
        # Not the virtualenv, the run-time instances under var/, or hidden folders.
        subfolders[:] = [s for s in subfolders if s not in ("var", "node_modules") and not s.startswith(".")]
        if "dagster.yaml" in files:
            found.add(str((Path(folder) / "dagster.yaml").relative_to(REPO)))
    assert found == set(SHIPPED)


@pytest.mark.parametrize("shipped", SHIPPED)
def test_every_shipped_instance_monitors_runs_retries_them_and_bounds_their_runtime(
    shipped, tmp_path, monkeypatch
):
    """Dagster validates the file as shipped; an instance then loads it (PostgreSQL storage and the S3
    compute logs left out: they connect when created) and reports the settings as the daemon reads
    them."""
    for name, value in INSTANCE_ENV.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / shipped, home / "dagster.yaml")
    settings, _ = dagster_instance_config(str(home))  # raises on anything Dagster does not accept

    kubernetes = settings["run_launcher"]["class"] == "K8sRunLauncher"
    left_out = ("storage", "compute_logs", "run_launcher") if kubernetes else ("storage", "compute_logs")
    runnable = {key: value for key, value in settings.items() if key not in left_out}
    local = tmp_path / "local_home"
    local.mkdir()
    (local / "dagster.yaml").write_text(yaml.safe_dump(runnable))
    monkeypatch.setenv("DAGSTER_HOME", str(local))
    with dg.DagsterInstance.from_config(str(local)) as instance:
        assert instance.run_monitoring_enabled
        assert 0 < instance.run_monitoring_max_runtime_seconds <= 24 * 3600
        assert instance.run_monitoring_poll_interval_seconds <= 60  # Dagster's default is 120
        assert instance.run_monitoring_start_timeout_seconds > 0
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 1
        # A step's error is the step retry policy's; the run is retried when it died outside its steps.
        assert instance.run_retries_retry_on_asset_or_op_failure is False
        # A dead run's pool slots are given back (Dagster never frees them otherwise).
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0
        # The run monitor can tell that a run's process died (the Kubernetes launcher asks the cluster).
        assert kubernetes or isinstance(instance.run_launcher, ProcessCheckingRunLauncher)
        assert kubernetes or instance.run_launcher.supports_check_run_worker_health


def test_every_job_retries_a_run_from_failure_only():
    defs = demo_definitions({"RAGSPINE_HOME": "/nonexistent/ragspine"})
    for job in defs.get_repository_def().get_all_jobs():
        if not job.name.startswith("__"):
            assert job.run_tags.get("dagster/retry_strategy") == "FROM_FAILURE", job.name


# -- step retries --------------------------------------------------------------------------------


def steps_of(defs: dg.Definitions) -> dict[str, dg.OpDefinition]:
    """Every op that executes a step: each asset's, each asset check's, and the ops inside graph-backed
    assets (the production sample's shard steps)."""
    steps = {}
    for assets_def in defs.resolve_asset_graph().assets_defs:
        node = assets_def.node_def
        ops = [node] if isinstance(node, dg.OpDefinition) else list(node.iterate_op_defs())
        steps.update({op.name: op for op in ops})
    return steps


def test_the_shared_policy_backs_off_exponentially_with_jitter_and_retries_twice():
    assert STEP_RETRIES.max_retries == MAX_RETRIES == 2
    assert STEP_RETRIES.backoff == dg.Backoff.EXPONENTIAL and STEP_RETRIES.jitter == dg.Jitter.PLUS_MINUS
    # The n-th retry waits (2**n - 1) * delay ± delay: at the least 0, then 2 * delay. The last attempt
    # comes at least 30 s after the first failure, so a 30 s blip is outlasted.
    assert 2 * STEP_RETRIES.delay >= 30
    assert step_retries({}) == STEP_RETRIES
    assert step_retries(NO_WAIT).delay == 0 and step_retries(NO_WAIT).max_retries == 2
    for bad in ("soon", "-1", "1e9"):
        with pytest.raises(InputError, match="RAGSPINE_STEP_RETRY_DELAY_S"):
            step_retries({"RAGSPINE_STEP_RETRY_DELAY_S": bad})
    assert step_retries({"RAGSPINE_STEP_RETRIES": "0"}).max_retries == 0
    assert step_retries({"RAGSPINE_STEP_RETRIES": "5"}).delay == STEP_RETRIES.delay
    for bad in ("two", "-1", "1.5", "11"):
        with pytest.raises(InputError, match="RAGSPINE_STEP_RETRIES"):
            step_retries({"RAGSPINE_STEP_RETRIES": bad})


def test_every_step_of_the_code_location_has_the_shared_retry_policy():
    """The S3 / trace store, SUT and judge steps included: every asset, check and op."""
    from ragspine_pipeline.definitions import defs as code_location  # the services folder, named

    unnamed = demo_definitions({"RAGSPINE_HOME": "/nonexistent/ragspine"})
    for defs in (unnamed, code_location):
        steps = steps_of(defs)
        for name in ("golden_set", "golden_traces", "golden_evaluation", "plan_day_shards",
                     "sample_day_shard", "merge_day_sample", "production_metrics", "extraction_scores",
                     "baseline", "slice_report"):  # fmt: skip
            assert any(step == name or step.endswith(f"__{name}") for step in steps), name
        without = {name: op.retry_policy for name, op in steps.items() if op.retry_policy != step_retries()}
        assert without == {}


def test_the_step_policy_retries_a_blip_but_never_a_user_error():
    attempts = {"source": 0, "input": 0}

    @dg.op(retry_policy=step_retries(NO_WAIT))
    def flaky_store():
        attempts["source"] += 1
        with user_errors():
            if attempts["source"] < 3:  # down for the first two attempts, back for the third
                raise SourceError("s3://bucket/traces", "connection refused")

    @dg.op(retry_policy=step_retries(NO_WAIT))
    def malformed_input():
        attempts["input"] += 1
        with user_errors():
            raise InputError("gold.jsonl", "not JSON", line=3)

    @dg.job
    def blip():
        flaky_store()

    @dg.job
    def user():
        malformed_input()

    assert blip.execute_in_process().success and attempts["source"] == 3
    failed = user.execute_in_process(raise_on_error=False)
    assert not failed.success and attempts["input"] == 1  # a Failure(allow_retries=False): once


# -- the failure alert's error line --------------------------------------------------------------


def error(cls_name: str, message: str, cause: SerializableErrorInfo | None = None) -> SerializableErrorInfo:
    return SerializableErrorInfo(message=message, stack=[], cls_name=cls_name, cause=cause)


S3_DOWN = 'Could not connect to the endpoint URL: "http://127.0.0.1:9/work/golden_set.parquet"'
LOAD_INPUT = 'Error occurred while loading input "golden_set" of step "golden_traces":'


def test_a_wrapped_error_is_said_root_cause_first_and_never_ends_with_a_colon():
    # As Dagster serialises them: each message starts with its exception's qualified class name.
    nested = error(
        "RetryRequestedFromPolicy",
        "Exceeded max_retries of 2\n",
        error(
            "DagsterExecutionLoadInputError",
            f"dagster._core.errors.DagsterExecutionLoadInputError: {LOAD_INPUT}\n",
            error("EndpointConnectionError", f"botocore.exceptions.EndpointConnectionError: {S3_DOWN}\n"),
        ),
    )
    text = error_text(nested)
    assert text.startswith(f"EndpointConnectionError: {S3_DOWN} (context: ")
    assert 'DagsterExecutionLoadInputError: Error occurred while loading input "golden_set"' in text
    assert text.endswith("RetryRequestedFromPolicy: Exceeded max_retries of 2)")
    assert "\n" not in text and not text.endswith(":")
    alert = run_failure_alert("reeval_on_index_rebuild", "run-1", "golden_traces", text)
    assert alert.error == text

    # Only the wrapper: its message's colon goes, its class stays.
    wrapper = error_text(error("DagsterExecutionLoadInputError", LOAD_INPUT))
    assert wrapper == f"DagsterExecutionLoadInputError: {LOAD_INPUT.strip().rstrip(':')}"
    # A user error (a dg.Failure) is its one-line description; a retry around it is context.
    failure = error(
        "RetryRequestedFromPolicy",
        "Exceeded max_retries of 2",
        error("Failure", "dagster._core.definitions.events.Failure: gold.jsonl:3: bad"),
    )
    assert error_text(failure, "gold.jsonl:3: bad") == (
        "gold.jsonl:3: bad (context: RetryRequestedFromPolicy: Exceeded max_retries of 2)"
    )
    assert error_text(error("Failure", "gold.jsonl:3: bad"), "gold.jsonl:3: bad") == "gold.jsonl:3: bad"
    assert not run_failure_alert("job", "run-2", None, "Error while loading:").error.endswith(":")


def test_a_step_that_cannot_load_its_input_alerts_with_the_cause_after_its_retries():
    """The real Dagster machinery: S3 refusing every load of a step's input (an IO manager raising
    botocore's EndpointConnectionError) costs the step its two retries, then the failure alert names
    the connection error, not the wrapper's line that ends with a colon."""
    loads = []

    class DownStore(dg.IOManager):
        def handle_output(self, context, obj):
            pass

        def load_input(self, context):
            loads.append(context.upstream_output.step_key)
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9/work/produce")

    @dg.op(retry_policy=step_retries(NO_WAIT))
    def produce() -> int:
        return 1

    @dg.op(retry_policy=step_retries(NO_WAIT))
    def consume(value: int) -> int:
        return value

    @dg.job(resource_defs={"io_manager": dg.IOManagerDefinition.hardcoded_io_manager(DownStore())})
    def s3_down():
        consume(produce())

    with dg.instance_for_test() as instance:
        result = s3_down.execute_in_process(instance=instance, raise_on_error=False)
        failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        alert = step_failure_alert(result.dagster_run, failures, None)
    assert not result.success and len(loads) == 1 + MAX_RETRIES
    assert alert.step == "consume"
    assert alert.error == (
        'EndpointConnectionError: Could not connect to the endpoint URL: "http://127.0.0.1:9/work/produce" '
        "(context: RetryRequestedFromPolicy: Exceeded max_retries of 2)"
    )


# -- the delivery sensor -------------------------------------------------------------------------


class FlakySlack(SlackServer):
    """The loopback Slack, answering HTTP 500 to every call while ``down``."""

    down = False

    def _call(self, method, args, authorization):
        if self.down:
            return 500, {}, {"ok": False, "error": "internal_error"}, 0.0
        return super()._call(method, args, authorization)


@pytest.fixture
def flaky_slack():
    server = FlakySlack().start()
    yield server
    server.stop()


@pytest.fixture
def service_defs(tmp_path, monkeypatch, flaky_slack) -> dg.Definitions:
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-alerts")
    monkeypatch.setenv("SLACK_API_BASE_URL", flaky_slack.url)
    monkeypatch.delenv("RAGSPINE_ALERT_CONFIRM_AFTER_S", raising=False)
    return demo_definitions(
        {
            "RAGSPINE_HOME": str(tmp_path / "nowhere"),
            "RAGSPINE_REPORTS": str(tmp_path / "reports"),
            "RAGSPINE_WORK": str(tmp_path / "work"),
            "RAGSPINE_ALERTS_OUTBOX": str(tmp_path / "alerts" / "outbox.jsonl"),
        }
    )


def tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.SkipReason:
    sensor = defs.resolve_sensor_def("alert_delivery_sensor")
    context = dg.build_sensor_context(instance=instance, resources={"alerts": defs.resources["alerts"]})
    outcome = sensor(context)
    assert isinstance(outcome, dg.SkipReason)  # never a run request
    return outcome


def test_every_service_has_a_delivery_sensor_that_runs_every_minute_by_default():
    from ragspine_pipeline.definitions import defs as code_location

    sensors = [
        s for s in code_location.get_repository_def().sensor_defs if s.name.endswith("alert_delivery_sensor")
    ]
    assert sensors
    for sensor in sensors:
        assert sensor.minimum_interval_seconds == DELIVERY_INTERVAL_S == 60
        assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
        assert not sensor.targets  # it never starts a run


def test_with_nothing_pending_the_sensor_skips_without_touching_slack_or_the_outbox(
    service_defs, flaky_slack, tmp_path
):
    with dg.instance_for_test() as instance:
        outcome = tick(service_defs, instance)
    assert "no alert pending" in outcome.skip_message
    assert not (tmp_path / "alerts").exists()  # read only: no outbox, no lock file created
    assert flaky_slack.state.calls == {}


@pytest.mark.usefixtures("quick_slack_retries")
def test_the_sensor_keeps_an_alert_pending_while_slack_answers_500_and_delivers_it_once_back(
    service_defs, flaky_slack, monkeypatch
):
    alerts = service_defs.resources["alerts"]
    queued = alerts.queue(run_failure_alert("nightly_eval", "run-ended", "sample_day_shard", "S3 down"))
    assert queued is not None
    with dg.instance_for_test() as instance:
        flaky_slack.down = True
        down = tick(service_defs, instance)  # never raises: the outbox keeps the alert
        assert "0 alert(s) delivered" in down.skip_message and "1 pending" in down.skip_message
        assert "HTTP 500" in down.skip_message and TOKEN not in down.skip_message
        assert flaky_slack.messages == []
        with alerts.outbox() as outbox:
            [entry] = outbox.read().pending
        assert entry.alert.id == queued.id and entry.unconfirmed  # a 5xx: Slack may have taken it

        flaky_slack.down = False
        # Slack is back, but the unanswered post is too recent to tell from the channel's history:
        # it is neither lost nor posted blindly.
        held = tick(service_defs, instance)
        assert "1 pending" in held.skip_message and flaky_slack.messages == []

        monkeypatch.setenv("RAGSPINE_ALERT_CONFIRM_AFTER_S", "0")  # two minutes later
        back = tick(service_defs, instance)
        assert back.skip_message.startswith("1 alert(s) delivered in 1 message(s)")
        assert flaky_slack.posted_ids() == [queued.id]

        assert "no alert pending" in tick(service_defs, instance).skip_message
        assert flaky_slack.posted_ids() == [queued.id]  # delivered once
        assert instance.get_runs() == []  # the sensor started nothing


def test_a_run_that_failed_outside_its_steps_alerts_with_dagsters_reason():
    """A run the monitoring daemon ended (its process died, its maximum runtime ran out) has no failed
    step: the alert says what the run's failure event says."""

    @dg.op
    def noop():
        pass

    @dg.job
    def nightly():
        noop()

    reason = "This job is being forcibly marked as failed."
    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(nightly)
        instance.report_run_failed(run, reason)
        [record] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        alert = step_failure_alert(run, [], None, None, record.get_dagster_event())
    assert alert.step is None and alert.error == f"the run failed outside any step: {reason}"

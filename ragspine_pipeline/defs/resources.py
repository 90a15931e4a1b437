"""Dagster resources: where the evaluation reads and writes, the trace store, the index manifest, the SUT.

Each resource is a thin, configurable wrapper over a framework-free object of ``sources/`` or
``decision/``. A service's ``defs.yaml`` gives their settings (``component``), the demo's included;
nothing here holds a secret —
S3 credentials come from boto3's standard chain, never from resource config, so they never reach the UI
or run metadata.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from importlib import resources as package_files
from pathlib import Path
from typing import Literal

import dagster as dg
import pyarrow as pa
from pydantic import Field, TypeAdapter

from ragspine_pipeline.alerts.delivery import FlushResult, flush
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.model import Alert, runbook_line, with_report_links
from ragspine_pipeline.alerts.outbox import DEFAULT_OUTBOX, open_outbox
from ragspine_pipeline.alerts.slack import DEFAULT_TTL_HOURS, SlackSettings
from ragspine_pipeline.alerts.streams import StreamState
from ragspine_pipeline.contracts.columns import load_evidence
from ragspine_pipeline.contracts.spans import SpanSettings
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.sources.errors import ManifestMissing
from ragspine_pipeline.sources.manifest import IndexManifest, read_manifest
from ragspine_pipeline.sources.objects import ObjectFolder
from ragspine_pipeline.sources.replay import Answer
from ragspine_pipeline.sources.span_store import open_store
from ragspine_pipeline.sources.sut import HttpSut, PythonSut, RecordedSut, SutSettings
from ragspine_pipeline.sources.trace_store import TraceStore

PACKAGED_GATES = "demo/gates.yaml"


def packaged_gates() -> Path:
    """The demo's gates config as the package holds it."""
    return Path(str(package_files.files("ragspine_pipeline").joinpath(PACKAGED_GATES)))


# The code location evaluates its golden set with an evidence registry (``EvalFiles.evidence_path``), so
# the gates config, the baseline and past runs read old metric names as such a run means them
# (``faithfulness`` is claim_faithfulness), when the definitions load and in every run alike.
METRIC_SCOPE = Scope.WITH_REGISTRY


class EvalFiles(dg.ConfigurableResource):
    """The golden set, evidence registry and baseline of one deployment, and where its outputs go.

    `reports_dir` and `work_dir` are local folders (the embedded set-up) or `s3://` prefixes (steps
    on several hosts): every step writes there, never to its own disk, so any step can run anywhere.
    """

    golden_path: str = Field(description="frozen golden set (JSONL) with its .lock next to it")
    evidence_path: str | None = Field(default=None, description="evidence registry (JSONL)")
    baseline_path: str = Field(description="baseline JSON keyed by mode, path or s3://; only ratchets up")
    baseline_mode: str = "golden"
    reports_dir: str = Field(description="reports: latest/, runs/<run id>/, production/ (path or s3://)")
    work_dir: str = Field(description="replayed traces, production samples and quarantine (path or s3://)")
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (MinIO, moto, …)")
    extraction_facts: str | None = Field(default=None, description="extracted facts (JSONL), path or s3://")
    extraction_truth: str | None = Field(default=None, description="extraction ground truth (JSON)")
    extraction_baseline: str | None = Field(
        default=None, description="channel thresholds, path or s3://; only ratchet up"
    )
    production_sample_size: int = Field(
        default=200,
        ge=1,
        description="traces sampled a production day; with a production.sample target in the gates config "
        "the floor of the size the target works out (defs.production.night_sample_plan)",
    )
    production_seed: int = 7
    production_stratify: str | None = Field(
        default=None, description="tag dimension the daily sample is stratified on (None: not stratified)"
    )
    production_shards: int = Field(
        default=1, ge=1, le=256, description="steps one day of traces is sampled in (merged exactly)"
    )

    def evidence(self) -> pa.Table | None:
        """The evidence registry's canonical table; None when none is configured or the file is absent
        (then the layered metrics and admissibility are not computed)."""
        path = self.evidence_path
        return load_evidence(path).table if path and Path(path).exists() else None

    def reports(self) -> ObjectFolder:
        return ObjectFolder(self.reports_dir, endpoint_url=self.s3_endpoint_url)

    def work(self) -> ObjectFolder:
        return ObjectFolder(self.work_dir, endpoint_url=self.s3_endpoint_url)

    def publish(self, run_id: str, name: str, data: bytes | str, what: str) -> str:
        """Write a report as ``runs/<run id>/<name>`` and then as ``latest/<name>``; return the run's URI.

        ``latest/`` is replaced file by file, each write whole, so a reader never sees half a report.
        """
        body = data.encode("utf-8") if isinstance(data, str) else data
        reports = self.reports()
        uri = reports.child("runs", run_id).write_bytes(name, body, what)
        reports.child("latest").write_bytes(name, body, what)
        return uri


class AlertsResource(dg.ConfigurableResource):
    """Where alerts are kept, what they link to, what they tell people to do, and how long they wait.

    Alerts are queued while a run evaluates and delivered when it ends, one message per run: by the
    run-status sensors under the daemon, by `make run` / `make demo-regression` without one, and
    by any later run or `ragspine-eval alerts flush` for whatever is still pending.
    """

    outbox_path: str = Field(
        default=DEFAULT_OUTBOX,
        description="the persistent outbox: a JSONL file, or postgresql://user@host:port/db (no password)",
    )
    webserver_base_url: str | None = Field(
        default="http://127.0.0.1:3000", description="Dagster UI base URL for the run links in messages"
    )
    reports_base_url: str | None = Field(
        default=None,
        description="where the reports folder is served (its runs/<run id>/slice_report.html and "
        "case_explorer.html are linked from every message of a run)",
    )
    runbook_url: str | None = Field(default=None, description="runbook link shown in every alert")
    runbooks: dict[str, str] = Field(
        default_factory=dict,
        description="runbook line per stream (release, extraction, production, run_failure)",
    )
    ttl_hours: float = Field(
        default=DEFAULT_TTL_HOURS, gt=0, description="undelivered alerts expire after this"
    )
    slack_channel: str | None = Field(
        default=None, description="the Slack channel of this service's alerts (default: SLACK_CHANNEL)"
    )
    service: str | None = Field(default=None, description="the service named in every alert's title")

    def outbox(self) -> AlertOutbox:
        """The outbox (a file, or PostgreSQL when steps run on several hosts); close it after use."""
        return open_outbox(self.outbox_path)

    @property
    def outbox_name(self) -> str:
        """The outbox as it may be shown (never a password)."""
        return str(self.outbox().path)

    def stream_state(self, stream: str) -> StreamState | None:
        """What ``stream`` last announced (its open incidents, on a stream of production drops), read
        only; None before its first alert."""
        with self.outbox() as outbox:
            return outbox.states().get(stream)

    def runbook(self, stream: str) -> str | None:
        return runbook_line(stream, self.runbooks, self.runbook_url)

    def queue(self, alert: Alert, log=None) -> Alert | None:
        """Queue ``alert`` if it is news for its stream (de-duplication); it is delivered with the rest
        of its run's alerts when the run ends."""
        if self.service:
            alert = alert.model_copy(update={"title": f"{self.service}: {alert.title}"})
        alert = with_report_links(alert, self.reports_base_url)
        with self.outbox() as outbox:
            queued = outbox.observe(alert)  # a full disk: a one-line InputError, nothing queued
        if queued is not None and log is not None:
            log.warning(f"alert queued: {queued.title} (posted when the run ends)")
        return queued

    def deliver(self, log=None, instance: dg.DagsterInstance | None = None) -> FlushResult:
        """Deliver what is pending, one message per finished run (``instance`` says which runs have
        finished; without it every run has), with the Slack settings of the environment."""
        finished = None if instance is None else _finished_on(instance)
        try:
            with self.outbox() as outbox:
                result = flush(outbox, self.slack(), finished=finished, ttl_hours=self.ttl_hours)
        except InputError as exc:  # the outbox itself is unreachable: nothing was posted, nothing lost
            result = FlushResult(error=str(exc), skipped=f"the outbox cannot be read: {exc}")
        if log is not None:
            if result.delivered:
                log.info(
                    f"{len(result.delivered)} alert(s) delivered to Slack in {result.messages} message(s)"
                )
            if result.expired:
                log.warning(
                    f"{len(result.expired)} alert(s) older than {self.ttl_hours:g} h expired unposted"
                )
            if result.pending - result.waiting:
                reason = result.skipped or result.error or next(iter(result.failed.values()), "not attempted")
                log.warning(f"{result.pending - result.waiting} alert(s) pending in the outbox: {reason}")
        return result

    def slack(self) -> SlackSettings:
        """Slack's settings from the environment (the token never leaves it), this service's channel."""
        settings = SlackSettings.from_env(os.environ)
        return replace(settings, channel=self.slack_channel) if self.slack_channel else settings

    def alert_check(self, alert: Alert, log, check_name: str | None = None) -> dg.AssetCheckResult:
        """What an alert check does: queue ``alert`` (when it is news) and say so. It always passes:
        a regression fails its own checks, and Slack being absent or down never changes a run. An
        alert the outbox cannot take (a full disk) is a WARN with the reason; its stream's state is
        unchanged, so the next evaluation raises it again."""
        try:
            queued, problem = self.queue(alert, log), None
        except InputError as exc:
            queued, problem = None, f"not queued: {exc}"
            if log is not None:
                log.error(f"alert {alert.title!r} {problem}")
        return dg.AssetCheckResult(
            check_name=check_name,
            passed=problem is None,
            severity=dg.AssetCheckSeverity.WARN,
            description=problem,
            metadata={
                "new_alert": problem or ("none" if queued is None else f"{queued.kind}: {queued.title}"),
                "outbox": dg.MetadataValue.path(self.outbox_name),
            },
        )

    def check_result(self, result: FlushResult, check_name: str | None = None) -> dg.AssetCheckResult:
        """A delivery check's result: passes when nothing that could be delivered is left undelivered
        (alerts of runs still in progress wait for their run); a WARN otherwise, never blocking."""
        errors = sorted(set(result.failed.values()))
        undelivered = result.pending - result.waiting
        return dg.AssetCheckResult(
            check_name=check_name,
            passed=undelivered == 0,
            severity=dg.AssetCheckSeverity.WARN,
            description=(result.skipped or (errors[0] if errors else None)) if undelivered else None,
            metadata={
                "delivered": len(result.delivered),
                "messages": result.messages,
                "pending": result.pending,
                "waiting_for_their_run": result.waiting,
                "expired": len(result.expired),
                "corrupt_lines_set_aside": result.set_aside,
                "outbox": dg.MetadataValue.path(self.outbox_name),
            },
        )


def _finished_on(instance: dg.DagsterInstance):
    """Whether a run has ended, by the instance; a run the instance does not know is not ours to wait for."""

    def finished(run_id: str) -> bool:
        run = instance.get_run_by_id(run_id)
        return run is None or run.is_finished

    return finished


class TraceStoreResource(dg.ConfigurableResource):
    """Production traces under `<uri>/dt=YYYY-MM-DD/*.jsonl[.gz]`: a local folder or `s3://bucket/prefix`."""

    uri: str
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (MinIO, moto, …)")
    region: str | None = None
    max_attempts: int = Field(default=5, ge=1, description="botocore standard-mode retry attempts")
    format: str = Field(default="jsonl", description="jsonl (trace lines) or otlp (OpenTelemetry spans)")
    citation_pattern: str | None = None
    citation_attribute: str | None = None
    version_attribute: str = "service.version"

    def spans(self) -> SpanSettings | None:
        """How the store's spans become traces; None for a store of trace lines."""
        if self.format == "jsonl":
            return None
        if self.format != "otlp":
            raise InputError("trace_store", f"format must be jsonl or otlp, got {self.format!r}")
        try:
            return SpanSettings.of(self)
        except ValueError as exc:
            raise InputError("trace_store", str(exc)) from None

    def open(self) -> TraceStore:
        return open_store(
            self.uri,
            spans=self.spans(),
            endpoint_url=self.endpoint_url,
            region=self.region,
            max_attempts=self.max_attempts,
        )


class IndexManifestResource(dg.ConfigurableResource):
    """The index manifest the rebuild sensor watches (a JSON object naming the live `index_version`): a
    local path or `s3://bucket/key` (none: the service publishes no manifest, and the sensor skips)."""

    uri: str | None
    endpoint_url: str | None = None
    region: str | None = None

    def read(self) -> IndexManifest:
        if self.uri is None:
            raise ManifestMissing("index manifest", "none is configured for this service")
        return read_manifest(self.uri, endpoint_url=self.endpoint_url, region=self.region)

    def live_version(self) -> str | None:
        """The manifest's index version; None while there is no manifest."""
        try:
            return self.read().index_version
        except ManifestMissing:
            return None


@dataclass(frozen=True)
class OpenedSut:
    """A system under test ready to be asked."""

    answer: Answer
    description: str  # names the SUT without credentials
    identity: str | None  # what its answers depend on (the answer store's key); None: keep no answers
    concurrency: int
    release: str | None = None  # the release its settings name, expanded (part of the answers' key)


class SutResource(dg.ConfigurableResource):
    """The system under test: the built-in reference engine, or a SUT declared by its settings (an HTTP
    RAG service, a Python function, a recorded file: `sources.sut`).

    Answers are kept in `answers_dir` as they arrive, per SUT, index version, release (the settings'
    `release`) and run, so a step retried, or a run re-executed from its failure, asks only what is
    missing; a new run asks every case again unless `reuse_answers` says otherwise."""

    kind: Literal["reference", "declared"] = "reference"
    manifest_path: str | None = Field(default=None, description="reference: the index manifest to serve")
    settings_json: str | None = Field(
        default=None,
        description="declared: the SUT's settings as JSON (kind http, python or recorded); header values "
        "name environment variables, never hold a secret",
    )
    repeat: int = Field(
        default=1, ge=1, description="replays of the golden set per run (> 1: per-case flakiness is reported)"
    )
    max_failed_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of cases that may fail to be asked (scored missing and named); above it the "
        "replay fails",
    )
    answers_dir: str | None = Field(
        default=None, description="local folder keeping answers between attempts (None: not kept)"
    )
    reuse_answers: bool = Field(
        default=False,
        description="a new run also reuses the answers earlier runs kept for this SUT, release and index "
        "version (each reuse named in the decision's warnings); default: only a retry or re-execution of "
        "the same run does",
    )

    def settings(self) -> HttpSut | PythonSut | RecordedSut | None:
        if self.kind == "reference":
            return None
        return TypeAdapter(SutSettings).validate_json(_required(self.settings_json, "settings_json"))

    def open(self) -> OpenedSut:
        settings = self.settings()
        if settings is None:
            from ragspine_pipeline.demo.reference_engine import ReferenceEngine

            manifest = Path(_required(self.manifest_path, "manifest_path"))
            engine = ReferenceEngine.from_manifest(manifest)

            def answer(qid: str, question: str, reference_date: str | None) -> dict:
                return engine.answer(qid, question, reference_date=reference_date)

            description = f"reference engine, index {engine.index_version}"
            return OpenedSut(answer, description, None, 1)  # in process and free: nothing to keep
        client = settings.client()
        identity, release = settings.identity(), settings.release_identity()
        return OpenedSut(client.answer, client.describe(), identity, settings.concurrency, release)


def _required(value: str | None, name: str) -> str:
    if not value:
        raise dg.Failure(f"the SUT resource needs '{name}' for this kind")
    return value

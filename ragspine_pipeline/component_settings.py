"""The nested settings of a ``RagEvaluation`` declaration (its ``defs.yaml``): the alerts, the trace store,
the extraction channels and the LLM judge. Each is resolvable, so a value in them may come from the
environment with Dagster's templating (``outbox: "{{ env.SUPPORT_BOT_OUTBOX }}"``) as a top-level one can.
Numbers are checked when the service is built (``component.RagEvaluation.service``), not here: a
templated number is text until it is resolved."""

from __future__ import annotations

from typing import Literal

import dagster as dg
from pydantic import Field


class AlertSettings(dg.Model, dg.Resolvable):
    """Where this service's alerts are kept and posted, what they point to, and how long they wait."""

    outbox: str | None = Field(default=None, description="default: var/<name>/alerts/outbox.jsonl")
    slack_channel: str | None = Field(default=None, description="default: SLACK_CHANNEL")
    runbook: str | None = Field(default=None, description="a runbook link shown in every alert")
    webserver_url: str | None = Field(
        default=None, description="the Dagster UI the alerts link to (default: http://127.0.0.1:3000)"
    )
    reports_url: str | None = Field(default=None, description="where the reports folder is served")
    ttl_hours: float | None = Field(
        default=None, description="an undelivered alert is no longer posted after this (default: 24)"
    )


class TraceStoreSettings(dg.Model, dg.Resolvable):
    """Where a service's production traces land and in what form."""

    path: str = Field(description="a folder or s3:// prefix")
    format: Literal["jsonl", "otlp"] = Field(
        default="jsonl",
        description="jsonl: trace lines under dt=YYYY-MM-DD/; otlp: OpenTelemetry spans (OTLP/JSON, or a "
        "Parquet span table) under year=/month=/day=/... as the Collector's S3 exporter writes them, or dt=",
    )
    citation_pattern: str | None = Field(
        default=None, description=r"spans: the citations in the answer text, e.g. '\[(\w+#\d+)\]'"
    )
    citation_attribute: str | None = Field(default=None, description="spans: an attribute listing them")
    version_attribute: str = Field(
        default="service.version", description="spans: the attribute naming the index version"
    )


class ExtractionSettings(dg.Model, dg.Resolvable):
    """The extraction channels: facts a pipeline extracted, their ground truth and the per-channel
    thresholds. Without facts and truth the service has no extraction assets at all."""

    facts: str | None = Field(default=None, description="extracted facts (JSONL), a path or s3://")
    truth: str | None = Field(default=None, description="their ground truth (JSON)")
    baseline: str | None = Field(
        default=None, description="per-channel thresholds that only ratchet up (default: var/<name>/...)"
    )


class JudgeSettings(dg.Model, dg.Resolvable):
    """How the LLM judge is used when one is configured; its endpoint and key come from the environment
    when a run starts (``RAGSPINE_JUDGE_*``), never from here. A setting not given takes the judge
    resource's default (``defs.judge.JudgeResource``)."""

    repeat: int | None = Field(default=None, description="judgments per model; the median is kept (1)")
    thresholds: str | None = Field(default=None, description="pass thresholds, metric=score,... (default 3)")
    max_calls: int | None = Field(default=None, description="budget per run: judge calls")
    max_tokens: int | None = Field(default=None, description="budget per run: tokens")
    max_input_chars: int | None = Field(
        default=None, description="longest prompt input sent, per field (cut beyond; 8000)"
    )
    cache: str | None = Field(default=None, description="judgment cache (default: <work>/judge-cache)")
    production_sample: int | None = Field(default=None, description="nightly traces judged (0: none; 50)")

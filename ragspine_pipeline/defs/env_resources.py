"""The settings of a service configured by environment variables (the embedded demo's instance, and a
deployment set up that way): each path, the SUT, the alerts and the judge from ``RAGSPINE_*`` variables,
read once when the definitions load (docs/operations.md lists them)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from ragspine_pipeline.alerts.outbox import DEFAULT_OUTBOX
from ragspine_pipeline.alerts.slack import ttl_hours_from_env
from ragspine_pipeline.defs.judge import JudgeResource
from ragspine_pipeline.defs.resources import (
    AlertsResource,
    EvalFiles,
    IndexManifestResource,
    SutResource,
    TraceStoreResource,
)
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.judge.prompts import DEFAULT_MAX_INPUT_CHARS
from ragspine_pipeline.sources.sut import HttpSut, PythonSut, RecordedSut, load_sut_settings


def sut_settings_from_env(env: Mapping[str, str]) -> HttpSut | PythonSut | RecordedSut | None:
    """The SUT the environment declares: ``RAGSPINE_SUT_CONFIG`` (a YAML file, as ``ragspine-eval replay
    --sut`` reads), else ``RAGSPINE_SUT`` = ``http`` (``RAGSPINE_SUT_URL``: POST to ``<url>/answer``) or
    ``recorded`` (``RAGSPINE_SUT_RECORDED``); None for ``reference``, the demo's engine."""
    if env.get("RAGSPINE_SUT_CONFIG"):
        return load_sut_settings(env["RAGSPINE_SUT_CONFIG"])
    kind = env.get("RAGSPINE_SUT", "").strip() or "reference"
    if kind == "reference":
        return None
    if kind == "http":
        url = env.get("RAGSPINE_SUT_URL") or ""
        if not url:
            raise InputError("RAGSPINE_SUT_URL", "RAGSPINE_SUT=http needs the service's base URL")
        return HttpSut(url=url.rstrip("/") + "/answer")
    if kind == "recorded":
        path = env.get("RAGSPINE_SUT_RECORDED") or ""
        if not path:
            raise InputError("RAGSPINE_SUT_RECORDED", "RAGSPINE_SUT=recorded needs a trace file")
        return RecordedSut(path=str(Path(path).absolute()))
    raise InputError("RAGSPINE_SUT", f"unknown SUT {kind!r} (known: reference, http, recorded)")


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("RAGSPINE_HOME", "var/demo")).absolute()


def _location(env: Mapping[str, str], name: str, default: Path | str) -> str:
    """The setting ``name``, else its default; a URI (s3://, postgresql://) as it is, a path made absolute."""
    value = env.get(name) or str(default)
    return value if "://" in value else str(Path(value).absolute())


def _region(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def trace_store_from_env(env: Mapping[str, str] = os.environ, **options: int) -> TraceStoreResource:
    """The production trace store: ``RAGSPINE_TRACE_STORE`` (a folder or ``s3://``), else
    ``$RAGSPINE_HOME/traces``; ``RAGSPINE_S3_ENDPOINT_URL`` and the AWS region for S3. ``options``
    override the resource's other fields (``max_attempts``)."""
    return TraceStoreResource(
        uri=_location(env, "RAGSPINE_TRACE_STORE", _home(env) / "traces"),
        endpoint_url=env.get("RAGSPINE_S3_ENDPOINT_URL") or None,
        region=_region(env),
        **options,
    )


def default_resources(env: os._Environ | dict[str, str] = os.environ) -> dict[str, dg.ConfigurableResource]:
    """Resources for the embedded demo, each path overridable by an environment variable.

    ``RAGSPINE_HOME`` (default ``var/demo``) holds the demo inputs; ``RAGSPINE_REPORTS`` (default
    ``var/reports``) and ``RAGSPINE_WORK`` (default ``var/work``) the outputs. ``RAGSPINE_TRACE_STORE``
    and ``RAGSPINE_INDEX_MANIFEST`` may be ``s3://`` URIs (``RAGSPINE_S3_ENDPOINT_URL`` for an
    S3-compatible store); the SUT is :func:`sut_settings_from_env`'s; ``RAGSPINE_REPLAY_REPEAT`` (default
    1) replays the golden set that many times per run, ``RAGSPINE_REPLAY_MAX_FAILED_SHARE`` (default 0)
    is the share of cases that may fail to be asked, ``RAGSPINE_REPLAY_REUSE_ANSWERS=1`` lets a new run
    reuse answers earlier runs kept for the same SUT, release and index. ``RAGSPINE_ALERTS_OUTBOX`` (default
    ``var/alerts/outbox.jsonl``) is the alert outbox, ``RAGSPINE_UI_URL`` (or ``RAGSPINE_WEBSERVER_URL``)
    the Dagster UI the alerts link to, ``RAGSPINE_REPORTS_URL`` where the reports folder is served,
    ``RAGSPINE_RUNBOOK_URL`` a runbook link for every alert (the gates config's ``alerts.runbook`` gives
    a line per stream), ``RAGSPINE_ALERT_TTL_HOURS`` (default 24) how long an
    undelivered alert is still posted; Slack's own settings are read at delivery
    (``alerts.slack.SlackSettings``). The LLM
    judge's endpoint is read when a run starts (``judge.client.JudgeEndpoint.from_env``); how it is used
    comes from ``RAGSPINE_JUDGE_REPEAT``, ``_THRESHOLDS``, ``_MAX_CALLS``, ``_MAX_TOKENS``, ``_CACHE`` and
    ``_PRODUCTION_SAMPLE``.
    """
    home = _home(env)

    def path(name: str, default: Path | str) -> str:
        return _location(env, name, default)

    manifest = path("RAGSPINE_INDEX_MANIFEST", home / "index" / "manifest.json")
    declared = sut_settings_from_env(env)
    work = path("RAGSPINE_WORK", "var/work")
    endpoint = env.get("RAGSPINE_S3_ENDPOINT_URL") or None
    region = _region(env)
    return {
        "eval_files": EvalFiles(
            golden_path=path("RAGSPINE_GOLDEN", home / "golden" / "gold.jsonl"),
            evidence_path=path("RAGSPINE_EVIDENCE", home / "evidence.jsonl"),
            baseline_path=path("RAGSPINE_BASELINE", home / "baseline.json"),
            reports_dir=path("RAGSPINE_REPORTS", "var/reports"),
            work_dir=work,
            s3_endpoint_url=endpoint,
            extraction_facts=path("RAGSPINE_EXTRACTION_FACTS", home / "extraction" / "facts.jsonl"),
            extraction_truth=path("RAGSPINE_EXTRACTION_TRUTH", home / "extraction" / "truth.json"),
            extraction_baseline=path("RAGSPINE_EXTRACTION_BASELINE", home / "extraction" / "baseline.json"),
            production_sample_size=int(env.get("RAGSPINE_SAMPLE_SIZE", "200")),
            production_stratify=env.get("RAGSPINE_SAMPLE_STRATIFY") or None,
            production_shards=int(env.get("RAGSPINE_SAMPLE_SHARDS", "1")),
        ),
        "trace_store": trace_store_from_env(env),
        "index_manifest": IndexManifestResource(uri=manifest, endpoint_url=endpoint, region=region),
        "alerts": AlertsResource(
            outbox_path=path("RAGSPINE_ALERTS_OUTBOX", DEFAULT_OUTBOX),
            webserver_base_url=env.get("RAGSPINE_UI_URL")
            or env.get("RAGSPINE_WEBSERVER_URL")
            or "http://127.0.0.1:3000",
            reports_base_url=env.get("RAGSPINE_REPORTS_URL") or None,
            runbook_url=env.get("RAGSPINE_RUNBOOK_URL") or None,
            ttl_hours=ttl_hours_from_env(env),
        ),
        "judge": JudgeResource(
            repeat=int(env.get("RAGSPINE_JUDGE_REPEAT", "1")),
            thresholds=env.get("RAGSPINE_JUDGE_THRESHOLDS", ""),
            max_calls=int(env["RAGSPINE_JUDGE_MAX_CALLS"]) if env.get("RAGSPINE_JUDGE_MAX_CALLS") else None,
            max_tokens=int(env["RAGSPINE_JUDGE_MAX_TOKENS"])
            if env.get("RAGSPINE_JUDGE_MAX_TOKENS")
            else None,
            cache_uri=path("RAGSPINE_JUDGE_CACHE", posixpath.join(work, "judge-cache")),
            cache_endpoint_url=endpoint,
            production_sample=int(env.get("RAGSPINE_JUDGE_PRODUCTION_SAMPLE", "50")),
            max_input_chars=int(env.get("RAGSPINE_JUDGE_MAX_INPUT_CHARS") or DEFAULT_MAX_INPUT_CHARS),
        ),
        "sut": SutResource(
            kind="reference" if declared is None else "declared",
            manifest_path=None if manifest.startswith("s3://") else manifest,
            settings_json=None if declared is None else declared.model_dump_json(),
            repeat=int(env.get("RAGSPINE_REPLAY_REPEAT", "1")),
            max_failed_share=float(env.get("RAGSPINE_REPLAY_MAX_FAILED_SHARE") or 0),
            answers_dir=None if work.startswith("s3://") else posixpath.join(work, "answers"),
            reuse_answers=env.get("RAGSPINE_REPLAY_REUSE_ANSWERS", "").strip() == "1",
        ),
    }

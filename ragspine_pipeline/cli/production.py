"""``ragspine-eval production backfill``: the nightly summaries of the days before a deployment existed.

The nightly drop test compares each night with the summaries of the nights before it, and needs
``min_days`` of them: a new deployment is silent until it has them. This command fills them in from the
trace store: for each of the ``--days`` days up to ``--until`` (default: yesterday, UTC), oldest first,
that has a trace partition and no summary yet (``--force``: re-fill those too), it does what the nightly
``production_metrics`` asset does (``defs.production``): the day's seeded, redacted sample, its
reference-free metrics with the evidence registry and the config's required versions, the sample plan
and the drop tests against the earlier summaries, written as ``production/<day>.json`` in the reports
folder (``sources.production_nights``). Oldest first, so each day's drop tests see the days before it.

What a backfill does not do: judge the sample (the LLM judge of the nightly asset), queue alerts, or
keep the sample and its quarantine in the work folder (malformed lines are only counted).

One line per day; exit 0, 2 on unusable input (``main`` prints the one line).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import UTC, date, datetime, timedelta
from importlib import resources as package_files
from pathlib import Path

from ragspine_pipeline.cli.args import EXIT_PASS, UsageError, span_settings
from ragspine_pipeline.contracts.columns import load_evidence
from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.redaction import redact_line, redact_trace
from ragspine_pipeline.scoring.refusal import mark_refusals
from ragspine_pipeline.scoring.sample_plan import nightly_sample_plan
from ragspine_pipeline.sources.objects import ObjectFolder
from ragspine_pipeline.sources.production_nights import (
    night_summary,
    night_tests,
    read_summaries,
    sample_traces,
    summaries_folder,
    summary_document,
    summary_name,
)
from ragspine_pipeline.sources.sampling import sample_day
from ragspine_pipeline.sources.span_store import open_store
from ragspine_pipeline.sources.trace_store import TraceStore, check_day

# The demo instance's defaults (its ``services/demo/defs.yaml``, which reads the same variables), which
# the parser names in its help.
DEFAULT_SAMPLE_SIZE = 200  # RAGSPINE_SAMPLE_SIZE
DEFAULT_REPORTS = "var/reports"  # RAGSPINE_REPORTS
DEFAULT_HOME = "var/demo"  # RAGSPINE_HOME: the trace store is $RAGSPINE_HOME/traces
PACKAGED_GATES = "demo/gates.yaml"  # without RAGSPINE_GATES_CONFIG
MAX_DAYS = 90


def run_backfill(args: argparse.Namespace) -> int:
    env = os.environ
    if not 1 <= args.days <= MAX_DAYS:
        raise UsageError(f"production backfill: --days must be from 1 to {MAX_DAYS}, got {args.days}")
    until = _until(args.until)
    if until.toordinal() < args.days:  # the first day would fall before 0001-01-01
        raise UsageError(
            f"production backfill: --days {args.days} up to --until {until.isoformat()} would start "
            "before 0001-01-01"
        )
    size = _sample_size(args.sample_size, env)
    config = _config(args.config, env)
    evidence = _evidence(args.evidence, env)
    home = Path(env.get("RAGSPINE_HOME") or DEFAULT_HOME)
    endpoint = env.get("RAGSPINE_S3_ENDPOINT_URL") or None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
    store = open_store(
        args.store or env.get("RAGSPINE_TRACE_STORE") or str(home / "traces"),
        spans=span_settings(args) if args.format == "otlp" else None,
        endpoint_url=endpoint,
        region=region,
    )
    reports = ObjectFolder(
        args.reports or env.get("RAGSPINE_REPORTS") or DEFAULT_REPORTS, endpoint_url=endpoint, region=region
    )
    stratify = args.stratify if args.stratify is not None else env.get("RAGSPINE_SAMPLE_STRATIFY") or None
    folder = summaries_folder(reports)
    partitions = set(store.days())
    for back in range(args.days - 1, -1, -1):  # oldest first
        day = (until - timedelta(days=back)).isoformat()
        if day not in partitions:
            print(f"{day}: no traces", flush=True)
        elif folder.exists(summary_name(day)) and not args.force:
            print(f"{day}: skipped: a summary exists", flush=True)
        else:
            sampled = _fill(day, store, folder, config, evidence, size, args.seed, stratify)
            print(f"{day}: {sampled} sampled, summary written", flush=True)
    return EXIT_PASS


def _fill(
    day: str,
    store: TraceStore,
    folder: ObjectFolder,
    config: EvalConfig,
    evidence,
    fixed_size: int,
    seed: int,
    stratify: str | None,
) -> int:
    """Write the summary of ``day`` as the nightly asset does; return how many traces were sampled."""
    settings = config.production
    history = read_summaries(folder, days=settings.history_nights, before=day)
    # The size the day is sampled with (``defs.production.night_sample_plan``): the earlier nights
    # count only with a ``production.sample`` target.
    plan = nightly_sample_plan(history if settings.sample is not None else [], settings, fixed_size)
    sample = sample_day(
        store,
        day,
        n=plan.size,
        seed=seed,
        quarantine=None,
        stratify=stratify,
        redact=redact_trace,  # PII never reaches the sample
        redact_text=redact_line,
    )
    with tempfile.TemporaryDirectory(prefix="ragspine-backfill-") as scratch:
        traces = sample_traces(sample.records, Path(scratch))
    traces = mark_refusals(traces, config.refusals.phrases, config.refusals.patterns)
    result = night_summary(day, traces, evidence, config.required_versions, config.citations_are_retrieved)
    night_tests(result, history, settings, fixed_size)
    folder.write_text(summary_name(day), summary_document(result), "summary")
    return sample.counts["sampled"]


def _until(raw: str | None) -> date:
    if raw is None:
        return datetime.now(UTC).date() - timedelta(days=1)
    try:
        return date.fromisoformat(check_day(raw))
    except ValueError as exc:
        raise UsageError(f"production backfill: --until: {exc}") from None


def _sample_size(given: int | None, env) -> int:
    if given is not None:
        return given
    raw = env.get("RAGSPINE_SAMPLE_SIZE") or str(DEFAULT_SAMPLE_SIZE)
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise UsageError(
            f"production backfill: RAGSPINE_SAMPLE_SIZE must be a whole number from 1, got {raw!r}"
        )
    return size


def _config(given: str | None, env) -> EvalConfig:
    """The gates config: ``--config``, else ``RAGSPINE_GATES_CONFIG``, else the packaged demo gates (the
    demo instance's ``gates`` setting)."""
    path = given or env.get("RAGSPINE_GATES_CONFIG")
    if not path:
        path = str(package_files.files("ragspine_pipeline").joinpath(PACKAGED_GATES))
    return load_config(path, KNOWN_METRICS, Scope.WITH_REGISTRY)


def _evidence(given: str | None, env):
    """The evidence registry's table: ``--evidence`` (it must exist), else ``RAGSPINE_EVIDENCE`` or
    ``$RAGSPINE_HOME/evidence.jsonl`` when that file exists (as the code location reads it), else None."""
    if given is not None:
        return load_evidence(given).table
    home = Path(env.get("RAGSPINE_HOME") or DEFAULT_HOME)
    path = env.get("RAGSPINE_EVIDENCE") or str(home / "evidence.jsonl")
    return load_evidence(path).table if "://" not in path and Path(path).exists() else None

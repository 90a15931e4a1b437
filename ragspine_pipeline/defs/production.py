"""The nightly path: one day of production traces → a seeded sample → reference-free metrics → drop tests.

Daily partitions; the nightly schedule materialises the previous day. The day is sampled in shards
(``RAGSPINE_SAMPLE_SHARDS``, one step each, retried on a store error) that a last step merges into
exactly the sample one pass over the whole day gives (``sources.shards``). Malformed trace lines are
quarantined by the sampler (file and line named) and counted in metadata, never dropped silently.
Each night's rates are tested against their trailing nights (``scoring.significance``); a significant
drop is a WARN check and one alert, never a failed run.

The night's sample size is ``RAGSPINE_SAMPLE_SIZE`` (the component's ``sample_size``), or, with a target
in the gates config (``production: {sample: ...}``), the size the target needs given the previous
nights' summaries (``scoring.sample_plan.nightly_sample_plan``): worked out once, when the day's shards are
planned, and carried to every shard and the merge; the nightly asset states it and why.
"""

import tempfile
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa

from ragspine_pipeline.alerts.model import Drop
from ragspine_pipeline.alerts.nightly import drop_alert
from ragspine_pipeline.alerts.streams import incident_rows, observed
from ragspine_pipeline.contracts.schemas import TRACE_SCHEMA
from ragspine_pipeline.defs.io import IO_MANAGER_KEY, to_frame, to_table
from ragspine_pipeline.defs.judge import (
    JUDGE_POOL,
    TRACE_SCAN_POOL,
    JudgeOutcome,
    judge_check,
    judge_check_spec,
    judge_step,
)
from ragspine_pipeline.defs.metadata import markdown_table, user_errors
from ragspine_pipeline.defs.partitions import daily_partitions
from ragspine_pipeline.defs.resources import EvalFiles
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.judge.items import case_tags, judge_items
from ragspine_pipeline.redaction import redact_line, redact_trace
from ragspine_pipeline.scoring.refusal import mark_refusals
from ragspine_pipeline.scoring.sample_plan import SamplePlan, nightly_sample_plan
from ragspine_pipeline.scoring.significance import NightTests
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
from ragspine_pipeline.sources.sampling import priority
from ragspine_pipeline.sources.shards import merge_shards, plan_shards, sample_shard

GROUP = "production"


def production_assets(service: Service) -> list[dg.AssetsDefinition]:
    """The service's nightly `production_traces` (sampled in shards) and `production_metrics`, one
    partition per day of its own trace store."""
    metrics_key = service.key("production_metrics")
    daily = daily_partitions(service.trace_store)

    @dg.op(
        name=service.node("plan_day_shards"),
        out=dg.DynamicOut(dict, io_manager_key=IO_MANAGER_KEY),
        retry_policy=step_retries(),
    )
    def plan_day_shards(context: dg.OpExecutionContext) -> Iterator[dg.DynamicOutput[dict]]:
        """The day's trace objects in contiguous groups balanced by size, one per shard (one empty shard
        for a day without objects, so the merge still records the empty day), each with the night's
        sample size (`night_sample_plan`). Only the listing is read; the shards' reads are in the
        `trace_scan` pool."""
        trace_store, eval_files = service.trace_store, service.files
        plan = night_sample_plan(service, context.partition_key)
        log_sample_plan(plan, context.log)
        with user_errors():
            groups = plan_shards(trace_store.open(), context.partition_key, eval_files.production_shards)
        for number, objects in enumerate(groups or [[]]):
            yield dg.DynamicOutput(
                {"objects": objects, "sample_size": plan.size}, mapping_key=f"shard_{number}"
            )

    @dg.op(
        name=service.node("sample_day_shard"),
        out=dg.Out(dict, io_manager_key=IO_MANAGER_KEY),
        pool=TRACE_SCAN_POOL,
        retry_policy=step_retries(),
    )
    def sample_day_shard(context: dg.OpExecutionContext, shard: dict) -> dict:
        """One streaming pass over one shard's objects: its sample candidates, distinct-id digests, exact
        counts and quarantined lines (redacted) — plain data, merged by `merge_day_sample`."""
        trace_store, eval_files = service.trace_store, service.files
        with user_errors():
            result = sample_shard(
                trace_store.open(),
                context.partition_key,
                shard["objects"],
                n=shard["sample_size"],
                seed=eval_files.production_seed,
                stratify=eval_files.production_stratify,
                redact_text=redact_line,  # PII never reaches the quarantine
            )
        return {**result, "sample_size": shard["sample_size"]}

    @dg.op(
        name=service.node("merge_day_sample"),
        out=dg.Out(io_manager_key=IO_MANAGER_KEY),
        retry_policy=step_retries(),
    )
    def merge_day_sample(context: dg.OpExecutionContext, shards: list[dict]) -> dg.Output[pd.DataFrame]:
        """The day's sample from its shards — exactly what one pass over the whole day gives — redacted,
        as canonical trace rows; `sample.jsonl` and `quarantine.jsonl` are kept in the work folder
        (`production/dt=<day>/`)."""
        trace_store, eval_files = service.trace_store, service.files
        day = context.partition_key
        work = eval_files.work().child("production", f"dt={day}")
        size = shards[0]["sample_size"] if shards else eval_files.production_sample_size
        with user_errors(), tempfile.TemporaryDirectory(prefix="ragspine-sample-") as scratch:
            quarantine = Path(scratch) / "quarantine.jsonl"
            sample = merge_shards(
                day,
                shards,
                n=size,
                seed=eval_files.production_seed,
                stratify=eval_files.production_stratify,
                redact=redact_trace,  # PII never reaches the sample
                quarantine=quarantine,
            )
            table = sample_traces(sample.records, Path(scratch))
            sample_uri = work.upload("sample.jsonl", Path(scratch) / "sample.jsonl", "trace sample")
            if sample.quarantine_path is not None:
                quarantine_uri = work.upload("quarantine.jsonl", quarantine, "quarantine")
            else:
                work.delete("quarantine.jsonl")  # nothing bad today: no stale file from an earlier pass
                quarantine_uri = work.join("quarantine.jsonl")
        counts = sample.counts
        quarantined = sum(counts["quarantined"].values())
        if quarantined:
            context.log.warning(
                f"{quarantined} malformed trace line(s) of {day} quarantined in {quarantine_uri}"
            )
        return dg.Output(
            to_frame(table, day=day),
            metadata={
                "store": trace_store.open().describe(),
                "shards": len(shards),
                "read": counts["read"],
                "valid": counts["valid"],
                "duplicates": counts["duplicates"],
                "quarantined": quarantined,
                "quarantined_by_reason": dg.MetadataValue.json(counts["quarantined"]),
                "sampled": counts["sampled"],
                "sample_size": size,
                "seed": eval_files.production_seed,
                "redacted": dg.MetadataValue.json(counts.get("redacted", {})),
                "allocation": dg.MetadataValue.json(sample.allocation or {}),
                "quarantine_path": dg.MetadataValue.path(quarantine_uri),
                "sample_path": dg.MetadataValue.path(sample_uri),
            },
        )

    @dg.graph_asset(
        key=service.key("production_traces"), group_name=service.node(GROUP), partitions_def=daily
    )
    def production_traces():
        """A seeded, de-duplicated, redacted sample of one day's traces (canonical trace rows), sampled in
        shards and merged exactly; malformed lines quarantined and counted."""
        shards = plan_day_shards()
        return merge_day_sample(shards.map(sample_day_shard).collect())

    @dg.asset(
        key=metrics_key,
        io_manager_key=IO_MANAGER_KEY,
        ins={"production_traces": dg.AssetIn(service.key("production_traces"))},
        group_name=service.node(GROUP),
        partitions_def=daily,
        pool=JUDGE_POOL,
        retry_policy=step_retries(),
        check_specs=[
            dg.AssetCheckSpec(
                "no_significant_drop",
                asset=metrics_key,
                description="no rate is significantly worse than over its trailing nights, by at least "
                "min_drop or by min_relative_change of its failure share, with false discoveries "
                "controlled over the night's tests (WARN, never blocks)",
            ),
            dg.AssetCheckSpec(
                "production_alert", asset=metrics_key, description="announce drops or their recovery"
            ),
            judge_check_spec(metrics_key),
        ],
    )
    def production_metrics(
        context: dg.AssetExecutionContext, production_traces: pd.DataFrame
    ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        """Reference-free metrics of the day's sample, overall and per slice, with 95 % Wilson intervals
        (one row per metric and slice), each rate tested against its trailing nights (the nightly drop
        test, docs/nightly.md; settings in the gates config's `production:` section). The whole night,
        every test with its p- and q-value included, is also written as `production/<day>.json` in the
        reports folder: what later nights compare with and the report shows.

        The checks are evaluated in this step (a check on a daily-partitioned asset sees its day here): a
        significant drop is a WARN and an alert, not a release block. When an LLM judge is configured, a
        seeded sub-sample of `judge.production_sample` traces is judged too (faithfulness needs the
        evidence registry; context recall has no reference in production and does not apply).
        """
        eval_files, alerts, judge = service.files, service.alerts, service.judge
        day = context.partition_key
        with user_errors():
            config = service.config()
            settings = config.production
            traces = mark_refusals(
                to_table(production_traces, TRACE_SCHEMA), config.refusals.phrases, config.refusals.patterns
            )
            evidence = eval_files.evidence()
        result = night_summary(
            day, traces, evidence, config.required_versions, config.citations_are_retrieved
        )
        items = judge_items(traces, None, evidence)
        items = sorted(items, key=lambda item: priority(eval_files.production_seed, item.qid))[
            : judge.production_sample
        ]
        judged = judge_step(judge, items, case_tags(traces), context.log) if items else JudgeOutcome("off")
        if judged.report is not None:
            result["judge"] = {
                key: judged.report[key] for key in ("prompt_version", "models", "failed", "metrics")
            }
        history = recent_production_days(eval_files, days=settings.history_nights, before=day)
        stream = service.stream("production")
        with user_errors():
            before = alerts.stream_state(stream)  # its open incidents, judged against their own levels
        plan, night = night_tests(
            result,
            history,
            settings,
            eval_files.production_sample_size,
            incidents=before.open_levels() if before is not None else None,
            accepted=before.accepted_since() if before is not None else None,
        )
        if plan.warning is not None:
            context.log.warning(plan.warning)
        alert = drop_alert(
            day,
            [Drop.of(t) for t in night.alerts],
            stream=stream,
            run_id=context.run.run_id,
            webserver_base_url=alerts.webserver_base_url,
            runbook=alerts.runbook("production"),
            measured={t.key: t.current for t in night.tested if t.nights == 1},  # tonight's rates
            returns=night.returns,
        )
        # The open incidents after tonight, as the outbox will record them (the report shows them).
        result["incidents"] = incident_rows(observed(before, alert)[1], alert)
        with user_errors():
            summary_uri = production_summaries(eval_files).write_text(
                summary_name(day), summary_document(result), "summary"
            )
        rows = [(name, _shown(m), m.get("n", ""), _interval(m)) for name, m in result["metrics"].items()]
        yield dg.Output(
            metric_rows(result),
            metadata={
                "n": result["n"],
                "sample_size": plan.size,
                "sample_size_why": plan.line(),
                "sample_plan": dg.MetadataValue.json(result["sample_size"]),
                **({"sample_size_warning": plan.warning} if plan.warning is not None else {}),
                "drop_tests": len(night.tested),
                "alerting_drops": len(night.alerts),
                "drops": dg.MetadataValue.md(drop_table(night)),
                "open_incidents": dg.MetadataValue.md(incident_table(result["incidents"])),
                "metrics": dg.MetadataValue.md(markdown_table(["metric", "value", "n", "95% CI"], rows)),
                "admissibility_failures": dg.MetadataValue.json(result.get("admissibility_failures", {})),
                "summary_path": dg.MetadataValue.path(summary_uri),
            },
        )
        alerting = [t.to_dict() for t in night.alerts]
        yield dg.AssetCheckResult(
            check_name="no_significant_drop",
            passed=not alerting,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"{len(alerting)} significant drop(s) on {day}" if alerting else None,
            metadata={
                "drops": dg.MetadataValue.json(alerting),
                "tested": len(night.tested),
                "fdr": settings.fdr,
                "min_drop": settings.min_drop,
                "min_relative_change": "off"
                if settings.min_relative_change is None
                else settings.min_relative_change,
            },
        )
        yield alerts.alert_check(alert, context.log, check_name="production_alert")
        yield judge_check(judged, metrics_key)

    return [production_traces, production_metrics]


def night_sample_plan(service: Service, day: str) -> SamplePlan:
    """The sample size of ``day``: the fixed one (``RAGSPINE_SAMPLE_SIZE`` / the component's
    ``sample_size``), or with ``production.sample`` in the gates config the size its target needs given
    the summaries of the nights before ``day`` (the ones its drop tests read)."""
    eval_files = service.files
    with user_errors():
        settings = service.config().production
    if settings.sample is None:
        return nightly_sample_plan([], settings, eval_files.production_sample_size)
    history = recent_production_days(eval_files, days=settings.history_nights, before=day)
    return nightly_sample_plan(history, settings, eval_files.production_sample_size)


def log_sample_plan(plan: SamplePlan, log) -> None:
    """The plan's line (info), and its warning when the target is out of reach."""
    if plan.warning is not None:
        log.warning(plan.warning)
    else:
        log.info(f"sample size: {plan.line()}")


def drop_table(night: NightTests) -> str:
    """Every drop test of the night that ran (most significant first) and how many could not run."""
    rows = [
        (
            t.metric,
            t.slice,
            t.nights,
            f"{t.current:.4f} ({t.current_n})",
            f"{t.trailing:.4f} ({t.trailing_n}, {t.trailing_days} nights)",
            f"{100 * t.worse_by:+.1f}",
            f"{t.z:.2f}",
            f"{t.p_value:.2g}",
            f"{t.q_value:.2g}",
            "ALERT" if t.alert else "significant" if t.significant else "",
        )
        for t in sorted(night.tested, key=lambda t: (t.q_value, t.p_value, t.key, t.nights))
    ]
    header = ["rate", "slice", "nights", "tonight (n)", "trailing (n)", "worse by (pts)", "z", "p", "q", ""]
    untested = len(night.tests) - len(rows)
    settings = night.settings
    note = (
        f"\n\n{len(rows)} tests, false-discovery rate {settings.fdr:g} over all of them, alerts from "
        f"{100 * settings.min_drop:g} points worse"
        + (
            ""
            if settings.min_relative_change is None
            else f" or a failure share grown by {settings.min_relative_change:g} of itself"
        )
        + f"; {untested} rate(s) not tested (the summary JSON says why)."
    )
    return markdown_table(header, rows) + note


def incident_table(rows: list[dict]) -> str:
    """The open incidents' rates (``alerts.streams.incident_rows``) as a Markdown table."""
    if not rows:
        return "No open incident."

    def rate(value: float | None) -> str:
        return "" if value is None else f"{value:.4f}"

    def row(r: dict) -> list:
        return [r["rate"], r["opened"] or "", rate(r["level"]), rate(r["tonight"]), r["status"]]

    shown = [row(r) for r in rows]
    header = ["rate", "since", "level it dropped from", "tonight", "status"]
    return markdown_table(header, shown)


def metric_rows(result: dict) -> pd.DataFrame:
    """The night's metrics as a table: one row per metric, overall (``dimension`` and ``segment`` null)
    and per slice; ``value`` (a count for fabrication), ``rate`` (rates and counts), ``n`` and the 95 %
    Wilson interval ``low``–``high`` (null where it does not apply)."""
    rows = []
    sets = [(None, None, result["metrics"])]
    for dimension, values in result.get("slices", {}).items():
        sets += [(dimension, segment, entry["metrics"]) for segment, entry in values.items()]
    for dimension, segment, metrics in sets:
        for name, metric in metrics.items():
            value = metric.get("value")
            rows.append(
                {
                    "day": result["day"],
                    "dimension": dimension,
                    "segment": segment,
                    "metric": name,
                    "value": None if value is None else float(value),
                    "rate": metric.get("rate", value if "low" in metric else None),
                    "n": metric.get("n"),
                    "low": metric.get("low"),
                    "high": metric.get("high"),
                }
            )
    return to_frame(pa.Table.from_pylist(rows, schema=METRIC_ROWS))


METRIC_ROWS = pa.schema(
    [
        ("day", pa.string()),
        ("dimension", pa.string()),
        ("segment", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("rate", pa.float64()),
        ("n", pa.int64()),
        ("low", pa.float64()),
        ("high", pa.float64()),
    ]
)


def production_summaries(eval_files: EvalFiles) -> ObjectFolder:
    """Where the daily summaries live: ``production/`` in the reports folder."""
    return summaries_folder(eval_files.reports())


def recent_production_days(eval_files: EvalFiles, days: int = 14, before: str | None = None) -> list[dict]:
    """The latest ``days`` daily summaries (those before day ``before`` when given), oldest first: what
    the slice report's production trend shows and a night's drop tests compare with."""
    with user_errors():
        return read_summaries(production_summaries(eval_files), days=days, before=before)


def _shown(metric: dict) -> str:
    value = metric.get("value")
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _interval(metric: dict) -> str:
    if metric.get("low") is None:
        return ""
    return f"{metric['low']:.4f}–{metric['high']:.4f}"

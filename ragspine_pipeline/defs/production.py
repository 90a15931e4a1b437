"""The nightly path: one day of production traces → a seeded sample → reference-free metrics → drop tests.

Daily partitions; the nightly schedule materialises the previous day. Malformed trace lines are
quarantined by the sampler (file and line named) and counted in metadata, never dropped silently.
Each night's rates are tested against their trailing nights (``scoring.significance``); a significant
drop is a WARN check and one alert, never a failed run.
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from ragspine_pipeline import inputs
from ragspine_pipeline.alerts.model import Drop, drop_alert
from ragspine_pipeline.contracts.columns import load_evidence, load_traces
from ragspine_pipeline.defs.golden import write_json_file
from ragspine_pipeline.defs.judge import (
    JUDGE_POOL,
    TRACE_SCAN_POOL,
    JudgeOutcome,
    JudgeResource,
    judge_check,
    judge_check_spec,
    judge_step,
)
from ragspine_pipeline.defs.metadata import markdown_table, user_errors
from ragspine_pipeline.defs.resources import (
    AlertsResource,
    EvalFiles,
    TraceStoreResource,
    committed_config,
)
from ragspine_pipeline.judge.items import case_tags, judge_items
from ragspine_pipeline.redaction import redact_line, redact_trace
from ragspine_pipeline.scoring.production import production_metrics as score_production
from ragspine_pipeline.scoring.significance import NightTests, drop_tests
from ragspine_pipeline.sources.sampling import priority, sample_day, write_jsonl

GROUP = "production"
# Far enough back for any retained trace store; partitions before the store's first day are empty.
daily = dg.DailyPartitionsDefinition(start_date="2026-01-01", end_offset=0)


@dg.asset(group_name=GROUP, partitions_def=daily, pool=TRACE_SCAN_POOL)
def production_traces(
    context: dg.AssetExecutionContext, trace_store: TraceStoreResource, eval_files: EvalFiles
) -> dg.Output[str]:
    """A seeded, de-duplicated sample of one day's traces (the path of the sample JSONL)."""
    day = context.partition_key
    out = eval_files.work("production", f"dt={day}", "sample.jsonl")
    quarantine = eval_files.work("production", f"dt={day}", "quarantine.jsonl")
    with user_errors():
        store = trace_store.open()
        sample = sample_day(
            store,
            day,
            n=eval_files.production_sample_size,
            seed=eval_files.production_seed,
            quarantine=quarantine,
            stratify=eval_files.production_stratify,
            redact=redact_trace,  # PII never reaches the sample or quarantine files (issue 7)
            redact_text=redact_line,
        )
        write_jsonl(sample.records, out)
    counts = sample.counts
    quarantined = sum(counts["quarantined"].values())
    if quarantined:
        context.log.warning(f"{quarantined} malformed trace line(s) of {day} quarantined in {quarantine}")
    return dg.Output(
        str(out),
        metadata={
            "store": store.describe(),
            "read": counts["read"],
            "valid": counts["valid"],
            "duplicates": counts["duplicates"],
            "quarantined": quarantined,
            "quarantined_by_reason": dg.MetadataValue.json(counts["quarantined"]),
            "dagster/row_count": counts["sampled"],
            "seed": eval_files.production_seed,
            "redacted": dg.MetadataValue.json(counts.get("redacted", {})),
            "allocation": dg.MetadataValue.json(sample.allocation or {}),
            "quarantine_path": dg.MetadataValue.path(str(quarantine)),
            "sample_path": dg.MetadataValue.path(str(out)),
        },
    )


@dg.asset(
    group_name=GROUP,
    partitions_def=daily,
    pool=JUDGE_POOL,
    check_specs=[
        dg.AssetCheckSpec(
            "no_significant_drop",
            asset="production_metrics",
            description="no rate is significantly worse than over its trailing nights, by at least "
            "min_drop, with false discoveries controlled over the night's tests (WARN, never blocks)",
        ),
        dg.AssetCheckSpec(
            "production_alert", asset="production_metrics", description="announce drops or their recovery"
        ),
        judge_check_spec("production_metrics"),
    ],
)
def production_metrics(
    context: dg.AssetExecutionContext,
    production_traces: str,
    eval_files: EvalFiles,
    alerts: AlertsResource,
    judge: JudgeResource,
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Reference-free metrics of the day's sample, overall and per slice, with 95 % Wilson intervals,
    and each rate tested against its trailing nights (``scoring.significance``; settings in the gates
    config's ``production:`` section). Every test is recorded with its p- and q-value.

    The checks are evaluated in this step (a check on a daily-partitioned asset sees its day here): a
    significant drop is a WARN and an alert, not a release block. When an LLM judge is configured, a
    seeded sub-sample of ``judge.production_sample`` traces is judged too (faithfulness needs the
    evidence registry; context recall has no reference in production and does not apply).
    """
    day = context.partition_key
    with user_errors():
        settings = committed_config().production
        traces = load_traces(production_traces).table
        evidence_path = eval_files.evidence_path
        evidence = (
            load_evidence(evidence_path).table if evidence_path and Path(evidence_path).exists() else None
        )
    result = {"day": day, **score_production(traces, evidence).to_dict()}
    items = judge_items(traces, None, evidence)
    items = sorted(items, key=lambda item: priority(eval_files.production_seed, item.qid))[
        : judge.production_sample
    ]
    judged = judge_step(judge, items, case_tags(traces), context.log) if items else JudgeOutcome("off")
    if judged.report is not None:
        result["judge"] = {
            key: judged.report[key] for key in ("prompt_version", "models", "failed", "metrics")
        }
    history = recent_production_days(
        eval_files, days=settings.variance_window + settings.recent_nights, before=day
    )
    night = drop_tests(result, history, settings)
    result["drop_tests"] = night.to_dict()
    path = production_summary_dir(eval_files) / f"{day}.json"
    write_json_file(path, result)
    rows = [(name, _shown(m), m.get("n", ""), _interval(m)) for name, m in result["metrics"].items()]
    yield dg.Output(
        result,
        metadata={
            "n": result["n"],
            "drop_tests": len(night.tested),
            "alerting_drops": len(night.alerts),
            "drops": dg.MetadataValue.md(drop_table(night)),
            "metrics": dg.MetadataValue.md(markdown_table(["metric", "value", "n", "95% CI"], rows)),
            "admissibility_failures": dg.MetadataValue.json(result.get("admissibility_failures", {})),
            "summary_path": dg.MetadataValue.path(str(path)),
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
        },
    )
    alert = drop_alert(
        day,
        [Drop.of(t) for t in night.alerts],
        run_id=context.run.run_id,
        webserver_base_url=alerts.webserver_base_url,
        runbook=alerts.runbook("production"),
    )
    yield alerts.alert_check(alert, context.log, check_name="production_alert")
    yield judge_check(judged, "production_metrics")


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
        f"{100 * settings.min_drop:g} points worse; {untested} rate(s) not tested (the summary JSON says "
        "why)."
    )
    return markdown_table(header, rows) + note


def production_summary_dir(eval_files: EvalFiles) -> Path:
    path = Path(eval_files.reports_dir) / "production"
    path.mkdir(parents=True, exist_ok=True)
    return path


def recent_production_days(eval_files: EvalFiles, days: int = 14, before: str | None = None) -> list[dict]:
    """The latest ``days`` daily summaries (those before day ``before`` when given), oldest first: what
    the slice report's production trend shows and a night's drop tests compare with."""
    files = sorted(production_summary_dir(eval_files).glob("????-??-??.json"))
    files = [path for path in files if before is None or path.stem < before][-days:]
    return [inputs.load_json_file(path, "production summary") for path in files]


def _shown(metric: dict) -> str:
    value = metric.get("value")
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _interval(metric: dict) -> str:
    if metric.get("low") is None:
        return ""
    return f"{metric['low']:.4f}–{metric['high']:.4f}"

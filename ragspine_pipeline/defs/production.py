"""The nightly path: one day of production traces → a seeded sample → reference-free metrics (SPEC §3.5).

Daily partitions; the nightly schedule materialises the previous day. Malformed trace lines are
quarantined by the sampler (file and line named) and counted in metadata, never dropped silently.
"""

import json
from pathlib import Path

import dagster as dg

from ragspine_pipeline.contracts.columns import load_evidence, load_traces
from ragspine_pipeline.defs.golden import write_json_file
from ragspine_pipeline.defs.metadata import markdown_table, user_errors
from ragspine_pipeline.defs.resources import EvalFiles, TraceStoreResource
from ragspine_pipeline.scoring.production import production_metrics as score_production
from ragspine_pipeline.sources.sampling import sample_day, write_jsonl

GROUP = "production"
# Far enough back for any retained trace store; partitions before the store's first day are empty.
daily = dg.DailyPartitionsDefinition(start_date="2026-01-01", end_offset=0)


@dg.asset(group_name=GROUP, partitions_def=daily)
def production_traces(
    context: dg.AssetExecutionContext, trace_store: TraceStoreResource, eval_files: EvalFiles
) -> dg.Output[str]:
    """A seeded, de-duplicated sample of one day's traces (the path of the sample JSONL)."""
    day = context.partition_key
    out = eval_files.work("production", f"dt={day}", "sample.jsonl")
    quarantine = eval_files.work("production", f"dt={day}", "quarantine.jsonl")
    quarantine.unlink(missing_ok=True)  # the sampler appends: a re-run of the day starts afresh
    with user_errors():
        store = trace_store.open()
        sample = sample_day(
            store,
            day,
            n=eval_files.production_sample_size,
            seed=eval_files.production_seed,
            quarantine=quarantine,
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
            "quarantine_path": dg.MetadataValue.path(str(quarantine)),
            "sample_path": dg.MetadataValue.path(str(out)),
        },
    )


@dg.asset(group_name=GROUP, partitions_def=daily)
def production_metrics(
    context: dg.AssetExecutionContext, production_traces: str, eval_files: EvalFiles
) -> dg.Output[dict]:
    """Reference-free metrics of the day's sample, overall and per slice, with 95 % Wilson intervals."""
    day = context.partition_key
    with user_errors():
        traces = load_traces(production_traces).table
        evidence_path = eval_files.evidence_path
        evidence = (
            load_evidence(evidence_path).table if evidence_path and Path(evidence_path).exists() else None
        )
    result = {"day": day, **score_production(traces, evidence).to_dict()}
    path = production_summary_dir(eval_files) / f"{day}.json"
    write_json_file(path, result)
    rows = [(name, _shown(m), m.get("n", ""), _interval(m)) for name, m in result["metrics"].items()]
    return dg.Output(
        result,
        metadata={
            "n": result["n"],
            "metrics": dg.MetadataValue.md(markdown_table(["metric", "value", "n", "95% CI"], rows)),
            "admissibility_failures": dg.MetadataValue.json(result.get("admissibility_failures", {})),
            "summary_path": dg.MetadataValue.path(str(path)),
        },
    )


def production_summary_dir(eval_files: EvalFiles) -> Path:
    path = Path(eval_files.reports_dir) / "production"
    path.mkdir(parents=True, exist_ok=True)
    return path


def recent_production_days(eval_files: EvalFiles, days: int = 14) -> list[dict]:
    """The latest daily summaries, oldest first (what the slice report's production trend shows)."""
    files = sorted(production_summary_dir(eval_files).glob("????-??-??.json"))[-days:]
    return [json.loads(path.read_text(encoding="utf-8")) for path in files]


def _shown(metric: dict) -> str:
    value = metric.get("value")
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _interval(metric: dict) -> str:
    if metric.get("low") is None:
        return ""
    return f"{metric['low']:.4f}–{metric['high']:.4f}"

"""``slice_report``: the report people read, in the UI (Markdown) and as a standalone HTML page.

It depends on ``metric_table`` and ``production_metrics`` for ordering only and reads the latest
results back (the golden run's JSON summary, the daily production summaries, the extraction channels,
and the trend of past golden runs from the instance's materialisation history), so the nightly run can
refresh the report without re-running the golden replay, and a blocked release still gets its report.
"""

from pathlib import Path

import dagster as dg

from ragspine_pipeline import inputs
from ragspine_pipeline.defs.extraction import extraction_scores
from ragspine_pipeline.defs.golden import metric_table
from ragspine_pipeline.defs.metadata import copy_atomically
from ragspine_pipeline.defs.production import production_metrics, recent_production_days
from ragspine_pipeline.defs.resources import EvalFiles
from ragspine_pipeline.files import write_text_atomically
from ragspine_pipeline.reports.html import render_html
from ragspine_pipeline.reports.slice_report import slice_markdown

HISTORY_RUNS = 30


# Not downstream of extraction_scores: its blocking channel checks would skip the report exactly when
# an extraction regression needs showing. The extraction step has no upstream, so it runs in a run's
# first wave; the page names the extraction run it shows.
@dg.asset(group_name="reports", deps=[metric_table, production_metrics])
def slice_report(context: dg.AssetExecutionContext, eval_files: EvalFiles) -> dg.MaterializeResult:
    """Per-slice health of the latest golden run and production days; writes ``slice_report.{md,html}``."""
    instance = context.instance
    report = _latest_golden_report(instance)
    history = golden_history(instance)
    production = recent_production_days(eval_files)
    extraction = _latest_json(instance, extraction_scores.key, "report_path")
    extraction = extraction if extraction and extraction.get("configured") else None
    judge = _latest_json(instance, metric_table.key, "judge_report_path")
    markdown = slice_markdown(report, production, extraction, judge)
    run_dir, latest = eval_files.run_dir(context.run.run_id), eval_files.latest_dir()
    write_text_atomically(run_dir / "slice_report.md", markdown, "slice report")
    if report is not None:
        page = render_html(
            report,
            history=history,
            production=production,
            extraction=extraction,
            judge=judge,
            title="ragspine release evaluation",
        )
        write_text_atomically(run_dir / "slice_report.html", page, "HTML report")
        copy_atomically(run_dir / "slice_report.html", latest / "slice_report.html")
    copy_atomically(run_dir / "slice_report.md", latest / "slice_report.md")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(markdown),
            "decision": "none" if report is None else report["release"]["decision"],
            "golden_runs_in_trend": len(history),
            "production_days": len(production),
            "html": dg.MetadataValue.path(str(latest / "slice_report.html")),
        }
    )


def _latest_golden_report(instance: dg.DagsterInstance) -> dict | None:
    report = _latest_json(instance, metric_table.key, "report_path")
    if report is not None:
        report.pop("cases", None)  # per-case rows are in metric_table.parquet; the page shows aggregates
    return report


def _latest_json(instance: dg.DagsterInstance, key: dg.AssetKey, entry_name: str) -> dict | None:
    """The JSON file the asset's latest materialisation points to (metadata ``entry_name``), if any."""
    event = instance.get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        return None
    entry = event.asset_materialization.metadata.get(entry_name)
    path = None if entry is None else Path(str(entry.value))
    if path is None or not path.exists():
        return None
    return inputs.load_json_file(path, entry_name)


def golden_history(instance: dg.DagsterInstance, limit: int = HISTORY_RUNS) -> list[dict]:
    """Past golden runs, oldest first: run id, time, index version, decision and metrics."""
    records = instance.fetch_materializations(metric_table.key, limit=limit).records
    history = []
    for record in reversed(records):
        metadata = record.asset_materialization.metadata if record.asset_materialization else {}
        if "metrics" not in metadata:
            continue
        history.append(
            {
                "run_id": record.run_id,
                "timestamp": record.timestamp,
                "index_version": _text(metadata.get("index_version")),
                "decision": _text(metadata.get("decision")),
                "metrics": metadata["metrics"].value,
            }
        )
    return history


def _text(entry) -> str | None:
    return None if entry is None else str(entry.value)

"""``slice_report``: the report people read, in the UI (Markdown) and as a standalone HTML page.

It depends on ``metric_table``, ``production_metrics`` and ``extraction_scores`` (the lineage of what
it shows; in a run without one of them it shows that one's latest materialisation) and reads the latest
results back (the golden run's JSON summary, the daily production summaries, the extraction channels,
and the trend of past golden runs from the instance's materialisation history), so the nightly run can
refresh the report without re-running the golden replay, and a blocked release still gets its report.
Its value is the slice table of the latest golden run: one row per slice (tag value).
"""

import posixpath

import dagster as dg
import pandas as pd
import pyarrow as pa

from ragspine_pipeline.decision.gates import canonical_keys
from ragspine_pipeline.defs.io import IO_MANAGER_KEY, to_frame
from ragspine_pipeline.defs.metadata import user_errors
from ragspine_pipeline.defs.production import recent_production_days
from ragspine_pipeline.defs.resources import METRIC_SCOPE, EvalFiles
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.pages import REPORT_PAGE
from ragspine_pipeline.reports.html import render_html
from ragspine_pipeline.reports.html_trend import comparable_runs
from ragspine_pipeline.reports.slice_report import slice_markdown
from ragspine_pipeline.sources.objects import ObjectFolder

# Materialisations read for the trend: it charts the latest 30 of this golden set and mode among them.
HISTORY_RUNS = 100
SLICE_COLUMNS = pa.schema(
    [
        ("dimension", pa.string()),
        ("value", pa.string()),
        ("n", pa.int64()),
        ("releasable", pa.int64()),
        ("releasable_rate", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("failed", pa.bool_()),
    ]
)


def report_asset(service: Service) -> dg.AssetsDefinition:
    """The service's `slice_report`."""
    metric_table, extraction = service.key("metric_table"), service.key("extraction_scores")

    # Downstream of everything it shows. The extraction channel checks do not block, so a failed channel
    # is shown, never skipped; a blocked release's decision is shown too (the report follows
    # metric_table, written in the same step, not release_decision, whose gate checks block).
    @dg.asset(
        key=service.key("slice_report"),
        io_manager_key=IO_MANAGER_KEY,
        group_name=service.node("reports"),
        deps=[metric_table, service.key("production_metrics"), *([extraction] if service.extracts else [])],
        retry_policy=step_retries(),
    )
    def slice_report(context: dg.AssetExecutionContext) -> dg.Output[pd.DataFrame]:
        """Per-slice health of the latest golden run and production days; writes `slice_report.md` and
        `slice_report.html` (`runs/<run id>/` and `latest/` in the reports folder)."""
        eval_files = service.files
        instance = context.instance
        with user_errors():
            report = _latest_golden_report(instance, metric_table, eval_files)
            production = recent_production_days(eval_files)
            channels = (
                _latest_json(instance, extraction, "report_path", eval_files) if service.extracts else None
            )
            judge = _latest_json(instance, metric_table, "judge_report_path", eval_files)
        history = golden_history(instance, metric_table)
        channels = channels if channels and channels.get("configured") else None
        mode = eval_files.baseline_mode  # the trend compares runs of one golden set and one mode
        markdown = slice_markdown(report, production, channels, judge, history=history, mode=mode)
        run_id = context.run.run_id
        with user_errors():
            if report is not None:
                page = render_html(
                    report,
                    history=history,
                    production=production,
                    extraction=channels,
                    judge=judge,
                    title=service.title,
                    mode=mode,
                )
                html = eval_files.publish(run_id, REPORT_PAGE, page, "HTML report")
            eval_files.publish(run_id, "slice_report.md", markdown, "slice report")
        return dg.Output(
            slice_table(report),
            metadata={
                "report": dg.MetadataValue.md(markdown),
                "decision": "none" if report is None else report["release"]["decision"],
                "golden_runs_in_trend": len(comparable_runs(history, _golden_version(report), mode).runs),
                "production_days": len(production),
                **({"html": dg.MetadataValue.path(html)} if report is not None else {}),
            },
        )

    return slice_report


def slice_table(report: dict | None) -> pd.DataFrame:
    """The golden run's slices, one row per (dimension, value) with its releasable rate, 95 % interval
    and whether it failed the slice gate; empty without a layered evaluation."""
    failed = set()
    rows = []
    if report is not None:
        failed = {(s["dimension"], s["value"]) for s in report["release"]["failed_slices"]}
        for dimension, values in (report.get("slices") or {}).items():
            for value, entry in values.items():
                low, high = entry["releasable_ci95"]
                rows.append(
                    {
                        "dimension": dimension,
                        "value": value,
                        "n": entry["n"],
                        "releasable": entry["releasable"],
                        "releasable_rate": entry["releasable_rate"],
                        "ci_low": low,
                        "ci_high": high,
                        "failed": (dimension, value) in failed,
                    }
                )
    return to_frame(pa.Table.from_pylist(rows, schema=SLICE_COLUMNS))


def _latest_golden_report(
    instance: dg.DagsterInstance, metric_table: dg.AssetKey, eval_files: EvalFiles
) -> dict | None:
    report = _latest_json(instance, metric_table, "report_path", eval_files)
    if report is not None:
        report.pop("cases", None)  # per-case rows are in metric_table.parquet; the page shows aggregates
    return report


def _latest_json(
    instance: dg.DagsterInstance, key: dg.AssetKey, entry_name: str, eval_files: EvalFiles
) -> dict | None:
    """The JSON report the asset's latest materialisation points to (metadata ``entry_name``: a local
    path or an ``s3://`` URI), if it is still there."""
    event = instance.get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        return None
    entry = event.asset_materialization.metadata.get(entry_name)
    if entry is None:
        return None
    location = str(entry.value)
    folder = ObjectFolder(posixpath.dirname(location), endpoint_url=eval_files.s3_endpoint_url)
    name = posixpath.basename(location)
    if not folder.exists(name):
        return None  # removed since (a cleaned reports folder): the report shows what is left
    return folder.read_json(name, entry_name)


def golden_history(
    instance: dg.DagsterInstance, metric_table: dg.AssetKey, limit: int = HISTORY_RUNS
) -> list[dict]:
    """Past golden runs of a `metric_table` asset, oldest first: run id, time, index version, golden-set
    version and baseline mode (None for a run recorded before `metric_table` carried them), decision
    and metrics. A run that failed after it decided is left out."""
    records = instance.fetch_materializations(metric_table, limit=limit).records
    # A run that decided and then failed is not a decision (the decision's tag is withdrawn too).
    failed = {
        run.dagster_run.run_id
        for run in instance.get_run_records(
            dg.RunsFilter(run_ids=list({r.run_id for r in records}), statuses=[dg.DagsterRunStatus.FAILURE])
        )
    } if records else set()  # fmt: skip
    history = []
    for record in reversed(records):
        metadata = record.asset_materialization.metadata if record.asset_materialization else {}
        if "metrics" not in metadata or record.run_id in failed:
            continue
        history.append(
            {
                "run_id": record.run_id,
                "timestamp": record.timestamp,
                "index_version": _text(metadata.get("index_version")),
                "golden_version": _text(metadata.get("golden_version")),
                "mode": _text(metadata.get("mode")),
                "decision": _text(metadata.get("decision")),
                # Runs recorded before a metric was renamed read under its current name.
                "metrics": canonical_keys(metadata["metrics"].value, METRIC_SCOPE),
            }
        )
    return history


def _text(entry) -> str | None:
    return None if entry is None else str(entry.value)


def _golden_version(report: dict | None) -> str | None:
    return None if report is None else report["release"].get("golden_version")

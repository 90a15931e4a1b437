"""One step scores the replay and decides: ``metric_table`` and ``release_decision``.

Scoring, gates, slices and the baseline comparison are :func:`decision.evaluation.evaluate`, the same
call as ``ragspine-eval score``; the committed gates config is the one the checks were built from. The
two assets come out of one computation: ``metric_table`` is the per-case × metric table (a DataFrame),
``release_decision`` the :class:`~ragspine_pipeline.decision.release.ReleaseDecision` itself (kept as
its JSON between steps) — what the gate checks, the alert and the baseline ratchet read, on whichever
host they run. When an LLM judge is configured its scores join the table
and its aggregates can be gated; a judge that fails fails only the ``judge_completed`` check (WARN).
"""

import io
import math
from collections.abc import Iterator

import dagster as dg
import pandas as pd
import pyarrow.parquet as pq

from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision.coverage import coverage_warnings
from ragspine_pipeline.decision.evaluation import (
    KNOWN_METRICS,
    evaluate,
    with_replays,
)
from ragspine_pipeline.decision.flakiness import flakiness_sentence
from ragspine_pipeline.decision.release import ReleaseDecision
from ragspine_pipeline.decision.run_gates import run_gates
from ragspine_pipeline.defs.golden import GROUP, INDEX_VERSION_TAG, gold_of, replays_of
from ragspine_pipeline.defs.io import IO_MANAGER_KEY, to_frame
from ragspine_pipeline.defs.judge import EVALUATION_POOL, judge_check, judge_check_spec, judge_step
from ragspine_pipeline.defs.metadata import json_document, markdown_table, user_errors
from ragspine_pipeline.defs.release import DECISION_TAG, decision_metadata, decision_value
from ragspine_pipeline.defs.resources import METRIC_SCOPE
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.judge.items import case_tags, judge_items
from ragspine_pipeline.pages import CASE_EXPLORER_PAGE, CASES_DOCUMENT
from ragspine_pipeline.reports.evaluation import ReportInputs, summary, write_json
from ragspine_pipeline.reports.explorer import (
    baseline_cases,
    explorer_document,
    explorer_json,
    render_explorer,
)
from ragspine_pipeline.reports.metric_table import means_by_metric, metric_table
from ragspine_pipeline.sources.answer_store import reuse_warnings
from ragspine_pipeline.sources.replay import failure_warnings
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint


def evaluation_asset(service: Service) -> dg.AssetsDefinition:
    """The service's `metric_table` and `release_decision`, computed in one step."""
    golden_set, golden_traces = service.key("golden_set"), service.key("golden_traces")
    table_key = service.key("metric_table")
    upstream = {golden_set, golden_traces}

    @dg.multi_asset(
        name=service.node("golden_evaluation"),
        ins={"golden_set": dg.AssetIn(golden_set), "golden_traces": dg.AssetIn(golden_traces)},
        outs={
            "metric_table": dg.AssetOut(
                key=table_key,
                io_manager_key=IO_MANAGER_KEY,
                group_name=service.node(GROUP),
                description="Per-case × metric scores in long format (qid, metric, model, value, "
                "applicable): a flag is 1.0 / 0.0, a metric that does not apply to a case has a null value.",
            ),
            "release_decision": dg.AssetOut(
                key=service.key("release_decision"),
                io_manager_key=IO_MANAGER_KEY,
                group_name=service.node(GROUP),
                description="`ship` or `block` with every reason: failed gates and slices, regressions, "
                "the causes, index and golden versions; also written as release_decision.json.",
                dagster_type=ReleaseDecision,  # kept as its JSON, read back as the model (defs.io)
            ),
        },
        internal_asset_deps={"metric_table": upstream, "release_decision": {*upstream, table_key}},
        check_specs=[judge_check_spec(table_key)],
        pool=service.node(EVALUATION_POOL),
        retry_policy=step_retries(),
    )
    def golden_evaluation(
        context: dg.AssetExecutionContext, golden_set: pd.DataFrame, golden_traces: pd.DataFrame
    ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        """Score the run's replay, decide, and write the run's reports (`evaluation.json`,
        `metric_table.parquet`, `release_decision.json`, the judge's report, the case explorer
        `case_explorer.html` and its `cases.json`) under `runs/<run id>/` and `latest/`. A `block` is
        a result, not a crash: both assets are always stored."""
        eval_files, judge = service.files, service.judge
        gold, lock = gold_of(golden_set)
        traces, *replays = replays_of(golden_traces)
        with user_errors():
            config = service.config()
            evidence = eval_files.evidence()
            store = open_versioned(eval_files.baseline_path, "baseline", endpoint_url=s3_endpoint())
            text = store.read()
            entries = baselines.read_baseline(store, KNOWN_METRICS, METRIC_SCOPE, text)
        configured = config.gate_list(KNOWN_METRICS, METRIC_SCOPE)
        gates, said = run_gates(configured, gold, traces, baselines.is_ragspine_file(text, store.name))
        judged = judge_step(judge, judge_items(traces, gold, evidence), case_tags(traces, gold), context.log)
        evaluation = evaluate(
            gold,
            traces,
            gates=gates,
            config=config,
            run_id=context.run.run_id,
            evidence=evidence,
            baseline=entries.get(eval_files.baseline_mode),
            compare_baseline=True,
            lock=lock,
            judged=judged.metrics,
            # A run the index-rebuild sensor requested must replay that index, and only that one.
            expected_index_version=context.run.tags.get(INDEX_VERSION_TAG),
        )
        if replays:
            evaluation = with_replays(evaluation, gold, replays, config=config, evidence=evidence)
            context.log.info(flakiness_sentence(evaluation.flakiness))
        warnings = [
            *said,
            *golden_set.attrs.get("warnings", []),
            *failure_warnings(golden_traces.attrs.get("failed") or {}),
            *reuse_warnings(golden_traces.attrs.get("reused") or []),
            *coverage_warnings(evaluation, traces),
        ]
        for warning in warnings:
            context.log.warning(warning)
        inputs = ReportInputs(
            golden_set.attrs.get("source", eval_files.golden_path),
            golden_traces.attrs.get("source", "golden_traces"),
            eval_files.evidence_path if evidence is not None else None,
            warnings,
        )
        run_id = context.run.run_id
        table = metric_table(evaluation, [] if judged.run is None else judged.run.judgments)
        with user_errors():
            parquet = io.BytesIO()
            pq.write_table(table, parquet, use_dictionary=["metric", "model"], compression="zstd")
            table_uri = eval_files.publish(run_id, "metric_table.parquet", parquet.getvalue(), "metric table")
            if judged.report is not None:
                judge_uri = eval_files.publish(
                    run_id, "judge_report.json", json_document(judged.report), "judge report"
                )
            report = io.StringIO()
            write_json(evaluation, inputs, report)
            report_uri = eval_files.publish(run_id, "evaluation.json", report.getvalue(), "evaluation report")
            decision = decision_value(
                evaluation, summary(evaluation, inputs), config, golden_traces.attrs.get("release")
            )
            decision_uri = eval_files.publish(
                run_id, "release_decision.json", json_document(decision.record()), "release decision"
            )
            # Flips are against the run that set the baseline, judged from its own report where it is kept.
            baseline_run = baseline_cases(entries.get(eval_files.baseline_mode), eval_files.reports())
            explorer = explorer_document(evaluation, gold, traces, table, baseline_run)
            eval_files.publish(run_id, CASES_DOCUMENT, explorer_json(explorer), "case explorer data")
            explorer_uri = eval_files.publish(
                run_id, CASE_EXPLORER_PAGE, render_explorer(explorer), "case explorer"
            )
        context.instance.add_run_tags(run_id, {DECISION_TAG: decision.decision})
        means = means_by_metric(table)
        yield dg.Output(
            to_frame(table),
            output_name="metric_table",
            metadata={
                "n_cases": evaluation.grounded.counts["cases"],
                "decision": evaluation.release.decision,
                "index_version": evaluation.release.index_version or "unknown",
                # The report's trend compares only runs of the same golden set and baseline mode.
                "golden_version": evaluation.release.golden_version or "unknown",
                "mode": eval_files.baseline_mode,
                # The trend chart of the slice report reads these back from the instance; a metric that does
                # not apply to this run (denominator 0) is null.
                "metrics": dg.MetadataValue.json(
                    {name: _finite(v) for name, v in evaluation.metrics.items()}
                ),
                "not_applicable": ", ".join(evaluation.not_applicable) or "none",
                # One number per gated metric, so the asset page plots each over materialisations; a
                # metric that does not apply to this run has no entry (never NaN).
                **gated_figures(evaluation),
                "means_by_metric": dg.MetadataValue.md(
                    markdown_table(
                        ["metric", "mean", "applicable cases"],
                        [
                            (name, "n/a" if mean is None else f"{mean:.4f}", n)
                            for name, (mean, n) in sorted(means.items())
                        ],
                    )
                ),
                "parquet_path": dg.MetadataValue.path(table_uri),
                "report_path": dg.MetadataValue.path(report_uri),
                "case_explorer": dg.MetadataValue.path(explorer_uri),
                "flips": explorer["counts"]["changed"],  # cases pass→fail or fail→pass since the baseline run
                "judge": judged.status,
                **(
                    {"judge_report_path": dg.MetadataValue.path(judge_uri)}
                    if judged.report is not None
                    else {}
                ),
            },
        )
        yield dg.Output(
            decision,  # stored as its JSON (defs.io), read back as the model
            output_name="release_decision",
            metadata=decision_metadata(decision, decision_uri),
        )
        yield judge_check(judged, table_key)

    return golden_evaluation


def gated_figures(evaluation) -> dict[str, dg.FloatMetadataValue]:
    """``{"gate/<metric>": value}`` of every gate of the run whose metric applies."""
    figures = {}
    for gate in evaluation.gates:
        value = _finite(gate.value)
        if value is not None:
            figures[f"gate/{gate.gate.metric}"] = dg.MetadataValue.float(value)
    return figures


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None

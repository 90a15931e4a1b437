"""The golden path: frozen golden set → replay against the SUT → per-case metrics (SPEC §5).

Thin wrappers: loading, scoring and deciding are ``contracts``, ``scoring`` and ``decision`` functions;
these assets only move their results between steps and show them in the UI.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import (
    KNOWN_METRICS,
    Evaluation,
    coverage_warnings,
    default_gates_for,
    evaluate,
    with_replays,
)
from ragspine_pipeline.decision.flakiness import flakiness_sentence
from ragspine_pipeline.decision.golden import GoldenLock, verified_lock
from ragspine_pipeline.defs.judge import (
    JUDGE_POOL,
    JudgeResource,
    judge_check,
    judge_check_spec,
    judge_step,
)
from ragspine_pipeline.defs.metadata import copy_atomically, markdown_table, user_errors
from ragspine_pipeline.defs.resources import EvalFiles, SutResource, gates_config_path
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.judge.items import case_tags, judge_items
from ragspine_pipeline.reports.evaluation import ReportInputs, summary, write_json
from ragspine_pipeline.reports.metric_table import means_by_metric, write_metric_table
from ragspine_pipeline.sources.replay import replay
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint

GROUP = "golden"
INDEX_VERSION_TAG = "ragspine/index_version"  # the index a re-evaluation run was requested for


@dataclass(frozen=True)
class GoldenSet:
    """The validated golden set of one run, and the lock it matched."""

    path: str
    table: pa.Table
    lock: GoldenLock | None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GoldenTraces:
    """What the SUT answered to every golden question (canonical columns) and where it was written."""

    path: str
    table: pa.Table
    sut: str
    replays: tuple[str, ...] = ()  # the other replays' traces (``sut.repeat`` > 1): for flakiness only


@dataclass(frozen=True)
class ScoredRun:
    """One scored golden run: the evaluation, its JSON summary and the long metric table's path."""

    evaluation: Evaluation
    report: dict
    metric_table_path: str
    report_path: str


@dg.asset(group_name=GROUP)
def golden_set(context: dg.AssetExecutionContext, eval_files: EvalFiles) -> dg.Output[GoldenSet]:
    """The frozen golden set, validated line by line and verified against its freeze lock.

    A golden set whose content no longer matches its lock fails here (SPEC: frozen per release).
    """
    path = eval_files.golden_path
    with user_errors():
        lock, unfrozen = verified_lock(path)
        table = load_gold(path).table
    if unfrozen:
        context.log.warning(unfrozen)
    per_slice = _cases_per_slice(table)
    unanswerable = pc.sum(pc.invert(table.column("answerable"))).as_py() or 0
    return dg.Output(
        GoldenSet(path, table, lock, [unfrozen] if unfrozen else []),
        metadata={
            "version": lock.version if lock else "unfrozen",
            "sha256": lock.sha256 if lock else "",
            "approved_by": lock.approved_by if lock else "",
            "n_cases": table.num_rows,
            "unanswerable": unanswerable,
            "cases_per_slice": dg.MetadataValue.md(
                markdown_table(["dimension", "value", "cases"], per_slice)
            ),
            "golden_path": dg.MetadataValue.path(path),
        },
    )


@dg.asset(group_name=GROUP)
def golden_traces(
    context: dg.AssetExecutionContext, golden_set: GoldenSet, sut: SutResource, eval_files: EvalFiles
) -> dg.Output[GoldenTraces]:
    """Every golden question replayed through the SUT on its current index (SPEC §2.2 traces).

    A trace the contract rejects is quarantined (file in metadata) and its case scored as missing. With
    ``sut.repeat`` N > 1 the golden set is replayed N times: the first replay is the run's, the others
    only count towards the per-case flakiness ``metric_table`` reports.
    """
    questions = list(
        zip(
            *(golden_set.table.column(name).to_pylist() for name in ("qid", "question", "reference_date")),
            strict=True,
        )
    )
    results = []
    with user_errors():
        answer, description = sut.client()
        for number in range(sut.repeat):
            suffix = "" if number == 0 else f".replay{number + 1}"
            results.append(
                replay(
                    questions,
                    answer,
                    out=eval_files.work("golden_traces", context.run.run_id, f"traces{suffix}.jsonl"),
                    quarantine=eval_files.work(
                        "golden_traces", context.run.run_id, f"quarantine{suffix}.jsonl"
                    ),
                    concurrency=sut.concurrency if sut.kind == "http" else 1,
                )
            )
        result = results[0]
        table = load_traces(result.traces_path).table
    if result.quarantined:
        context.log.warning(f"{result.quarantined} trace(s) quarantined: {result.quarantine_path}")
    versions = pc.value_counts(table.column("index_version").drop_null()).to_pylist()
    return dg.Output(
        GoldenTraces(
            str(result.traces_path), table, description, tuple(str(r.traces_path) for r in results[1:])
        ),
        metadata={
            "sut": description,
            "replays": sut.repeat,
            "asked": result.asked,
            "answered": result.answered,
            "unanswered": result.unanswered,
            "quarantined": result.quarantined,
            "quarantine_path": dg.MetadataValue.path(str(result.quarantine_path)),
            "index_versions": ", ".join(f"{v['values']} ({v['counts']})" for v in versions) or "none",
            "traces_path": dg.MetadataValue.path(str(result.traces_path)),
        },
    )


@dg.asset(group_name=GROUP, check_specs=[judge_check_spec("metric_table")], pool=JUDGE_POOL)
def metric_table(
    context: dg.AssetExecutionContext,
    golden_set: GoldenSet,
    golden_traces: GoldenTraces,
    eval_files: EvalFiles,
    judge: JudgeResource,
) -> Iterator[dg.Output[ScoredRun] | dg.AssetCheckResult]:
    """Per-case × metric scores in long format (Parquet), and the run's evaluation and decision.

    Scoring, gates, slices and the baseline comparison are :func:`decision.evaluation.evaluate`, the
    same call as ``ragspine-eval score``; the committed gates config is the one the checks were built from.
    When an LLM judge is configured its scores join the table and its aggregates can be gated; a judge
    that fails fails only the ``judge_completed`` check (WARN), see ``defs.judge``.
    """
    config_path = gates_config_path()
    with user_errors():
        config = load_config(config_path, KNOWN_METRICS)
        evidence_path = eval_files.evidence_path
        evidence = (
            load_evidence(evidence_path).table if evidence_path and Path(evidence_path).exists() else None
        )
        store = open_versioned(eval_files.baseline_path, "baseline", endpoint_url=s3_endpoint())
        entries = baselines.read_baseline(store, KNOWN_METRICS)
    judged = judge_step(
        judge,
        judge_items(golden_traces.table, golden_set.table, evidence),
        case_tags(golden_traces.table, golden_set.table),
        context.log,
    )
    evaluation = evaluate(
        golden_set.table,
        golden_traces.table,
        gates=config.gate_list(KNOWN_METRICS) or default_gates_for(golden_set.table, golden_traces.table),
        config=config,
        run_id=context.run.run_id,
        evidence=evidence,
        baseline=entries.get(eval_files.baseline_mode),
        compare_baseline=True,
        lock=golden_set.lock,
        judged=judged.metrics,
        # A run the index-rebuild sensor requested must replay that index, and only that one.
        expected_index_version=context.run.tags.get(INDEX_VERSION_TAG),
    )
    if golden_traces.replays:
        with user_errors():
            replays = [load_traces(path).table for path in golden_traces.replays]
        evaluation = with_replays(evaluation, golden_set.table, replays, config=config, evidence=evidence)
        context.log.info(flakiness_sentence(evaluation.flakiness))
    warnings = [*golden_set.warnings, *coverage_warnings(evaluation.grounded.counts)]
    for warning in warnings:
        context.log.warning(warning)
    inputs = ReportInputs(golden_set.path, golden_traces.path, evidence_path if evidence else None, warnings)
    run_dir, latest = eval_files.run_dir(context.run.run_id), eval_files.latest_dir()
    judgments = [] if judged.run is None else judged.run.judgments
    table = write_metric_table(evaluation, run_dir / "metric_table.parquet", judgments)
    if judged.report is not None:
        write_json_file(run_dir / "judge_report.json", judged.report)
        copy_atomically(run_dir / "judge_report.json", latest / "judge_report.json")
    report_path = run_dir / "evaluation.json"
    with atomic_writer(report_path, "evaluation report") as out:
        write_json(evaluation, inputs, out)
    copy_atomically(run_dir / "metric_table.parquet", latest / "metric_table.parquet")
    report = summary(evaluation, inputs)
    means = means_by_metric(table)
    not_applicable = evaluation.not_applicable
    yield dg.Output(
        ScoredRun(evaluation, report, str(run_dir / "metric_table.parquet"), str(report_path)),
        metadata={
            "dagster/row_count": table.num_rows,
            "n_cases": evaluation.grounded.counts["cases"],
            "decision": evaluation.release.decision,
            "index_version": evaluation.release.index_version or "unknown",
            # The trend chart of the slice report reads these back from the instance; a metric that does
            # not apply to this run (denominator 0) is null, never its placeholder value.
            "metrics": dg.MetadataValue.json(
                {
                    name: None if name in not_applicable else _finite(v)
                    for name, v in evaluation.metrics.items()
                }
            ),
            "not_applicable": ", ".join(not_applicable) or "none",
            "means_by_metric": dg.MetadataValue.md(
                markdown_table(
                    ["metric", "mean", "applicable cases"],
                    [
                        (name, "n/a" if mean is None else f"{mean:.4f}", n)
                        for name, (mean, n) in sorted(means.items())
                    ],
                )
            ),
            "parquet_path": dg.MetadataValue.path(str(run_dir / "metric_table.parquet")),
            "report_path": dg.MetadataValue.path(str(report_path)),
            "judge": judged.status,
            **(
                {"judge_report_path": dg.MetadataValue.path(str(run_dir / "judge_report.json"))}
                if judged.report is not None
                else {}
            ),
        },
    )
    yield judge_check(judged, "metric_table")


def _cases_per_slice(table: pa.Table) -> list[tuple[str, str, int]]:
    tags = table.column("tags").combine_chunks()
    pairs = pa.table({"dimension": tags.keys, "value": tags.items})  # every (key, value) of every case
    counts = pairs.group_by(["dimension", "value"]).aggregate([([], "count_all")])
    rows = zip(*(counts.column(c).to_pylist() for c in ("dimension", "value", "count_all")), strict=True)
    return sorted(rows)


def _finite(value: float) -> float | None:
    return value if value == value and abs(value) != float("inf") else None


def write_json_file(path: Path, data: dict) -> None:
    """A JSON report next to the others, atomically (a reader never sees half a decision)."""
    with atomic_writer(path, "report") as out:
        json.dump(data, out, indent=2, ensure_ascii=False, allow_nan=False)
        out.write("\n")

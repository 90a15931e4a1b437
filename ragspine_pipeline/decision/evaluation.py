"""One evaluation run, from canonical columns to the release decision — shared by every shell.

The CLI and the Dagster assets load files their own way, then call :func:`evaluate`: grounded
metrics, the layered evaluation and slices when an evidence registry is given, the QA gates and
fabrication count when the golden set carries RAGSpine expectations, gates, the baseline comparison
(the fabrication count against the baseline's ``fabrication_count``) and the ``ship`` / ``block``
decision with its causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.decision.baseline import BaselineEntry, Comparison, compare
from ragspine_pipeline.decision.causes import release_causes
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.gates import Gate, GateResult, evaluate_gates, unmeasured
from ragspine_pipeline.decision.golden import GoldenLock
from ragspine_pipeline.decision.release import ReleaseDecision, decide, failed_slices
from ragspine_pipeline.judge.prompts import JUDGED_METRICS
from ragspine_pipeline.scoring.grounded import METRICS, GroundedScore, score_grounded
from ragspine_pipeline.scoring.layered import RATIO_METRICS, LayeredScore, score_layered
from ragspine_pipeline.scoring.qa_gates import GATES as QA_GATES
from ragspine_pipeline.scoring.qa_gates import QAGates, has_qa_cases, score_qa_gates
from ragspine_pipeline.scoring.slices import Slice, slices

LAYERED_METRICS = (*RATIO_METRICS, "admissible_rate", "releasable_rate")
FABRICATION = "fabrication"  # a count of refusal answers stating a number (target 0), gated like a metric
KNOWN_METRICS = (*METRICS, *LAYERED_METRICS, *QA_GATES, FABRICATION, *JUDGED_METRICS)


@dataclass(frozen=True)
class Evaluation:
    """Everything one run decided, ready to render or to store."""

    grounded: GroundedScore
    gates: list[GateResult]
    release: ReleaseDecision
    metrics: dict[str, float]
    layered: LayeredScore | None = None
    slices: list[Slice] = field(default_factory=list)
    comparison: Comparison | None = None
    qa: QAGates | None = None

    @property
    def passed(self) -> bool:
        return self.release.ships

    @property
    def fabrication_count(self) -> int | None:
        return None if self.qa is None else self.qa.fabrication.count

    @property
    def baseline_metrics(self) -> dict[str, float]:
        """What a baseline records: every metric but the fabrication count, kept as its own entry."""
        return {name: value for name, value in self.metrics.items() if name != FABRICATION}


def evaluate(
    gold: pa.Table,
    traces: pa.Table,
    *,
    gates: Sequence[Gate],
    config: EvalConfig,
    run_id: str,
    evidence: pa.Table | None = None,
    baseline: BaselineEntry | None = None,
    compare_baseline: bool = False,
    lock: GoldenLock | None = None,
    k: int | None = None,
    judged: dict[str, float] | None = None,
) -> Evaluation:
    """Score, gate and decide.

    ``compare_baseline`` with ``baseline=None`` means the baseline file has no entry for the mode yet.
    ``judged``: the LLM judge's aggregates (``judge.report.judged_metrics``), gated like any metric; a
    gate on a metric nobody measured fails (it blocks when hard).
    """
    grounded = score_grounded(gold, traces, k=k or config.k)
    metrics = dict(grounded.metrics)
    layered, all_slices = None, []
    if evidence is not None:
        layered = score_layered(gold, traces, evidence, config.required_versions)
        metrics.update(layered.metrics)
        all_slices = slices(gold.column("tags"), layered.cases, RATIO_METRICS)
    qa = score_qa_gates(gold, traces, config.period_pattern) if has_qa_cases(gold) else None
    if qa is not None:
        metrics.update(qa.metrics)
        metrics[FABRICATION] = float(qa.fabrication.count)
    metrics.update(judged or {})
    results = evaluate_gates(gates, metrics)
    comparison = None
    if compare_baseline:
        measured = {name: value for name, value in metrics.items() if name != FABRICATION}
        comparison = compare(baseline, measured, None if qa is None else qa.fabrication.count)
    release = decide(
        results,
        failed_slices(all_slices, config.slice_gate),
        comparison,
        histogram=None if layered is None else layered.stage_histogram(),
        index_versions=_value_counts(traces.column("index_version")),
        golden_version=None if lock is None else lock.version,
        golden_sha256=None if lock is None else lock.sha256,
        run_id=run_id,
        slice_gate=config.slice_gate if layered is not None else None,
        unmeasured=unmeasured(gates, metrics),
        causes=release_causes(gold, grounded.cases, layered),
    )
    return Evaluation(grounded, results, release, metrics, layered, all_slices, comparison, qa)


def coverage_warnings(counts: dict[str, int]) -> list[str]:
    """What a reader of the report must know about the join of gold and traces (SPEC §2.2)."""
    warnings = []
    if counts["missing"]:
        warnings.append(f"{counts['missing']} gold case(s) have no trace and are scored as empty answers")
    if counts["unmatched"]:
        warnings.append(f"{counts['unmatched']} trace id(s) are not in the golden set and were ignored")
    if counts["duplicates"]:
        warnings.append(f"{counts['duplicates']} duplicate trace(s): the last trace per case was kept")
    return warnings


def _value_counts(column: pa.ChunkedArray) -> dict[str, int]:
    counts = pc.value_counts(column.drop_null())
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))

"""The per-case × metric table in long format: one row per case and metric (the `metric_table` asset).

Columns: ``qid``, ``metric``, ``model``, ``value`` (float; flags are 1.0 / 0.0), ``applicable`` (false
where the metric does not apply to the case: then ``value`` is null, never NaN). Grounded flags always
appear; layered ratios, ``admissible`` and ``releasable`` appear when the run had an evidence registry;
the four QA gates (pass 1.0 / fail 0.0) when the golden set carries RAGSpine expectations. ``model`` is
null for these deterministic metrics.

When an LLM judge ran, its scores (1–5) join as ``judge_<metric>`` rows: one per case × metric × judge
model, plus one with ``model = "combined"`` (the ensemble). A judgment that failed is applicable with a
null value; the judge's report counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ragspine_pipeline.decision.evaluation import Evaluation
from ragspine_pipeline.files import atomic_output
from ragspine_pipeline.scoring.layered import RATIO_METRICS

if TYPE_CHECKING:
    from ragspine_pipeline.judge.run import Judgment

GROUNDED_FLAGS = ("answered", "contained", "citation_hit", "recall_hit")
LAYERED_FLAGS = ("admissible", "releasable")
SCHEMA = pa.schema(
    [
        pa.field("qid", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("model", pa.string()),
        pa.field("value", pa.float64()),
        pa.field("applicable", pa.bool_(), nullable=False),
    ]
)


def metric_table(evaluation: Evaluation, judgments: Sequence[Judgment] = ()) -> pa.Table:
    """Stack every per-case metric column into rows, metric by metric (cases in gold order), then the
    judge's ``judgments`` in their order."""
    sources = [(evaluation.grounded.cases, GROUNDED_FLAGS)]
    if evaluation.layered is not None:
        sources.append((evaluation.layered.cases, (*RATIO_METRICS, *LAYERED_FLAGS)))
    if evaluation.qa is not None:
        sources.append((evaluation.qa.cases, tuple(evaluation.qa.gates)))
    parts = []
    for cases, names in sources:
        qid = cases.column("qid").combine_chunks()
        for name in names:
            value = cases.column(name).combine_chunks().cast(pa.float64())
            parts.append(
                pa.table(
                    {
                        "qid": qid,
                        "metric": pa.array([name] * len(qid), pa.string()),
                        "model": pa.nulls(len(qid), pa.string()),
                        "value": value,
                        "applicable": value.is_valid(),
                    },
                    schema=SCHEMA,
                )
            )
    if judgments:
        parts.append(
            pa.table(
                {
                    "qid": [j.qid for j in judgments],
                    "metric": [f"judge_{j.metric}" for j in judgments],
                    "model": [j.model for j in judgments],
                    "value": [j.score for j in judgments],
                    "applicable": [j.applicable for j in judgments],
                },
                schema=SCHEMA,
            )
        )
    return pa.concat_tables(parts)


def write_metric_table(
    evaluation: Evaluation, path: str | Path, judgments: Sequence[Judgment] = ()
) -> pa.Table:
    """Write :func:`metric_table` as Parquet (metric and model dictionary-encoded) and return it."""
    table = metric_table(evaluation, judgments)
    with atomic_output(path, "metric table") as out:
        pq.write_table(table, out, use_dictionary=["metric", "model"], compression="zstd")
    return table


def means_by_metric(table: pa.Table) -> dict[str, tuple[float, int]]:
    """(mean over cases with a value, their count) per metric — per ``metric (model)`` for judged
    rows: a cross-check of the aggregates."""
    grouped = table.group_by(["metric", "model"]).aggregate([("value", "mean"), ("value", "count")])
    means = grouped.column("value_mean").to_pylist()
    counts = pc.cast(grouped.column("value_count"), pa.int64()).to_pylist()
    names = [
        metric if model is None else f"{metric} ({model})"
        for metric, model in zip(
            grouped.column("metric").to_pylist(), grouped.column("model").to_pylist(), strict=True
        )
    ]
    return dict(zip(names, zip(means, counts, strict=True), strict=True))

"""The long per-case × metric table agrees with the run's aggregates and survives Parquet."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.evaluation import evaluate
from ragspine_pipeline.decision.gates import default_gates
from ragspine_pipeline.reports.metric_table import means_by_metric, metric_table, write_metric_table
from ragspine_pipeline.scoring.layered import RATIO_METRICS
from tests.cli.test_release import build


@pytest.fixture
def evaluation(tmp_path):
    gold, traces, evidence = build(tmp_path, {"release-freeze": 3, "access": 2}, broken={"access-01"})
    return evaluate(
        load_gold(gold).table,
        load_traces(traces).table,
        gates=default_gates(),
        config=EvalConfig(),
        run_id="test",
        evidence=load_evidence(evidence).table,
    )


def test_one_row_per_case_and_metric_with_not_applicable_as_null(evaluation):
    table = metric_table(evaluation)
    metrics = set(table.column("metric").to_pylist())
    assert metrics == {"answered", "contained", "citation_hit", "recall_hit", *RATIO_METRICS, "admissible",
                       "releasable"}  # fmt: skip
    assert table.num_rows == 5 * len(metrics)
    rows = [r for r in table.to_pylist() if r["qid"] == "access-01"]
    assert {r["metric"]: r["value"] for r in rows}["releasable"] == 0.0
    assert all((r["value"] is None) == (not r["applicable"]) for r in table.to_pylist())


def test_means_over_applicable_rows_equal_the_run_aggregates(evaluation):
    summary = means_by_metric(metric_table(evaluation))
    for name in RATIO_METRICS:
        mean, n = summary[name]
        assert n == evaluation.layered.denominators[name]
        assert mean == pytest.approx(evaluation.layered.metrics[name])
    assert summary["releasable"][0] == pytest.approx(evaluation.layered.metrics["releasable_rate"])


def test_parquet_round_trip(evaluation, tmp_path):
    written = write_metric_table(evaluation, tmp_path / "metric_table.parquet")
    assert pq.read_table(tmp_path / "metric_table.parquet").equals(written)

"""Default gates follow the dialects the data carries; a gate on a metric that applies to no case is
n/a (never passes, never fails, never blocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.evaluation import evaluate
from ragspine_pipeline.decision.gates import DEFAULT_GATES, DEFAULT_QA_GATES, Gate, evaluate_gates
from ragspine_pipeline.decision.run_gates import default_gates_for
from ragspine_pipeline.metrics import MetricResult

WFGY_GOLD = {"qid": "w1", "question": "Who approves leave?", "answerable": True,
             "gold_claim_substr": ["line manager"], "gold_citations": ["hr#1"]}  # fmt: skip
QA_GOLD = {"id": "q1", "question": "Revenue in 2030?", "case_type": "refusal",
           "expected": {"clarification": "none", "refuse": True}}  # fmt: skip
CITED = {"answer_json": {"claim": "The line manager.", "citations": ["hr#1"]}, "retrieved_ids": ["hr#1"]}
OUTCOME_ONLY = {"answer": {"claim": "not in context", "citations": []}, "outcome": {"refused": True}}


def tables(tmp_path: Path, gold: list[dict], traces: list[dict]):
    gold_path, trace_path = tmp_path / "gold.jsonl", tmp_path / "traces.jsonl"
    gold_path.write_text("".join(json.dumps(row) + "\n" for row in gold))
    trace_path.write_text("".join(json.dumps(row) + "\n" for row in traces))
    return load_gold(gold_path).table, load_traces(trace_path).table


def metrics_of(gates: list[Gate]) -> list[str]:
    return [gate.metric for gate in gates]


GROUNDED, QA = list(DEFAULT_GATES), list(DEFAULT_QA_GATES)


@pytest.mark.parametrize(
    ("gold", "traces", "expected"),
    [
        # A WFGY golden set: the grounded gates, whatever its traces carry.
        ([WFGY_GOLD], [{"qid": "w1", **CITED}], GROUNDED),
        ([WFGY_GOLD], [{"qid": "w1", "answer_json": {"claim": "The line manager."}}], GROUNDED),
        # A RAGSpine golden set answered with outcomes and no citations: the QA gates only.
        ([QA_GOLD], [{"qid": "q1", **OUTCOME_ONLY}], QA),
        ([QA_GOLD], [], QA),  # no trace at all: the QA cases still say what is measured
        # ... a trace that cites but joins no gold case does not count.
        ([QA_GOLD], [{"qid": "q1", **OUTCOME_ONLY}, {"qid": "other", **CITED}], QA),
        # QA cases answered with citations, or a mixed golden set: both.
        ([QA_GOLD], [{"qid": "q1", **OUTCOME_ONLY, "retrieved_ids": ["deck#5"]}], GROUNDED + QA),
        ([WFGY_GOLD, QA_GOLD], [{"qid": "w1", **CITED}, {"qid": "q1", **OUTCOME_ONLY}], GROUNDED + QA),
    ],
)
def test_the_defaults_are_those_of_the_dialects_present(tmp_path, gold, traces, expected):
    assert metrics_of(default_gates_for(*tables(tmp_path, gold, traces))) == expected


def test_qa_defaults_thresholds():
    assert DEFAULT_QA_GATES == {
        "numeric_accuracy": 0.95,
        "citation_validity": 0.95,
        "refusal_appropriateness": 0.95,
        "clarification_appropriateness": 0.90,
        "fabrication": 0.0,
    }
    assert Gate("fabrication", 0.0).op == "<="


def test_a_gate_on_a_metric_that_applies_to_no_case_is_n_a():
    gates = [Gate("claim_containment", 0.5), Gate("precision", 0.5), Gate("fabrication", 0.0)]
    results = evaluate_gates(
        gates,
        {
            "claim_containment": MetricResult("claim_containment", None, 0, 0),  # no gold claim: null
            "precision": MetricResult("precision", 1.0, 3, 3),
            "fabrication": MetricResult("fabrication", 0.0, None, 0),
        },
    )
    assert [(r.passed, r.applicable, r.denominator) for r in results] == [
        (None, False, 0),
        (True, True, 3),
        (True, True, 0),  # a count always applies: nothing checked, nothing fabricated
    ]


def test_an_n_a_gate_never_blocks_and_an_unmeasured_one_still_does(tmp_path):
    gold, traces = tables(tmp_path, [QA_GOLD], [{"qid": "q1", **OUTCOME_ONLY}])
    run = evaluate(gold, traces, gates=[Gate("claim_containment", 0.9)], config=EvalConfig(), run_id="r")
    assert run.release.ships
    # One refusal case, refused: nothing shipped, nothing answerable, no value or source expected.
    assert run.not_applicable == [
        "precision", "chr", "over_refusal", "recall@k", "chr_answerable", "claim_containment",
        "numeric_accuracy", "citation_validity",
    ]  # fmt: skip
    assert run.denominators["claim_containment"] == 0 and run.denominators["under_refusal"] == 1
    (result,) = run.gates
    assert result.passed is None and not result.applicable
    judged = [Gate("judge_faithfulness", 4.0)]
    assert not evaluate(gold, traces, gates=judged, config=EvalConfig(), run_id="r").release.ships

"""``narrative_faithfulness`` on traces that carry no context passages: unmeasured, not unsupported.

A narrative case whose trace has neither ``outcome.retrieved_context`` nor ``contexts`` leaves the gate
unmeasured for it (out of ``total``, counted in ``unmeasured``, the fields named in ``needs``); a case
without a trace still fails; an empty list is carried and its claims are unsupported; a narrative
answer without claims needs no context and passes."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.scoring.qa_gates import score_qa_gates

NEEDS = "outcome.retrieved_context or contexts"
TOLD = "香港监管动态：MPFA 强积金新规要求披露管理费。"
CONTEXT = "香港监管动态：MPFA 强积金新规要求披露管理费，IA 加强销售流程审查。"


def narrative_case(qid: str) -> dict:
    expected = {"clarification": "none", "refuse": False, "narrative_doc": "REG_WATCH_HK.pptx"}
    return {"id": qid, "question": f"why {qid}?", "case_type": "narrative", "expected": expected, "tags": {}}


def narrative_trace(qid: str, told: str = TOLD, **carried) -> dict:
    """A RAGSpine-style narrative trace; ``retrieved_context=`` goes in its outcome, ``contexts=`` at
    the top level; neither given: the trace carries no context passages."""
    outcome = {"clarification_mode": "none", "refused": False, "narrative_answer": told}
    if "retrieved_context" in carried:
        outcome["retrieved_context"] = carried.pop("retrieved_context")
    return {"id": qid, "answer": {"claim": told, "citations": []}, "outcome": outcome, **carried}


def faithfulness(tmp_path, traces: list[dict], cases: int | None = None):
    n = len(traces) if cases is None else cases
    gold = [narrative_case(f"nar-{i}") for i in range(1, n + 1)]
    gold_path, trace_path = tmp_path / "gold.jsonl", tmp_path / "traces.jsonl"
    gold_path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in gold), encoding="utf-8")
    trace_path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in traces), encoding="utf-8")
    qa = score_qa_gates(load_gold(gold_path).table, load_traces(trace_path).table)
    return qa, qa.gates["narrative_faithfulness"]


def test_four_traces_without_context_leave_the_gate_unmeasured_not_failed(tmp_path):
    qa, gate = faithfulness(tmp_path, [narrative_trace(f"nar-{i}") for i in range(1, 5)])
    assert (gate.total, gate.passed, gate.unmeasured, gate.pass_rate) == (0, 0, 4, None)
    assert gate.failures == [] and gate.by_tag == {}
    note = f"4 narrative traces carry no {NEEDS}: narrative_faithfulness unmeasured for them"
    assert gate.note == note
    assert qa.unmeasured_notes() == {"narrative_faithfulness": note}
    assert qa.unmeasured_metrics() == {"narrative_faithfulness": note}  # null, and not "not applicable"
    assert gate.to_dict()["unmeasured"] == 4 and gate.to_dict()["needs"] == NEEDS
    assert qa.cases.column("narrative_faithfulness").null_count == 4  # no per-case verdict either
    assert gate.result.value is None and gate.result.denominator == 0  # null, never NaN or 1.0


def test_a_mixed_file_measures_only_the_traces_with_context(tmp_path):
    traces = [
        narrative_trace("nar-1", retrieved_context=[CONTEXT]),  # every token of the claim: faithful
        narrative_trace("nar-2", contexts=[{"id": "c1", "text": "nothing of the sort"}]),  # unfaithful
        narrative_trace("nar-3"),
        narrative_trace("nar-4", retrieved_context=None),  # written as null: not carried either
    ]
    qa, gate = faithfulness(tmp_path, traces)
    assert (gate.total, gate.passed, gate.unmeasured) == (2, 1, 2)
    assert gate.pass_rate == 0.5 and [f["id"] for f in gate.failures] == ["nar-2"]
    assert gate.note == f"2 narrative traces carry no {NEEDS}: narrative_faithfulness unmeasured for them"
    assert qa.unmeasured_metrics() == {}  # measured (over 2): a gate on it is judged as usual
    assert qa.cases.column("narrative_faithfulness").to_pylist() == [True, False, None, None]


def test_a_case_without_a_trace_still_fails(tmp_path):
    # nar-2 has no trace at all: a missing answer fails; nar-1's trace lacks only the context.
    _, gate = faithfulness(tmp_path, [narrative_trace("nar-1")], cases=2)
    assert (gate.total, gate.passed, gate.unmeasured) == (1, 0, 1)
    [failure] = gate.failures
    assert failure["id"] == "nar-2" and failure["actual"]["trace"] is False


@pytest.mark.parametrize("carried", [{"retrieved_context": []}, {"contexts": []}])
def test_an_empty_context_list_is_carried_and_the_claims_are_unsupported(tmp_path, carried):
    # The service says it retrieved nothing (RAGSpine's engine writes [] then): a measurement, a failure.
    _, gate = faithfulness(tmp_path, [narrative_trace("nar-1", **carried)])
    assert (gate.total, gate.passed, gate.unmeasured, gate.note) == (1, 0, 0, None)
    assert gate.failures[0]["actual"]["context_passages"] == 0


def test_an_answer_without_claims_needs_no_context(tmp_path):
    # The engine's refusal is a framing line: no claim to check, so nothing is missing to check it.
    _, gate = faithfulness(tmp_path, [narrative_trace("nar-1", told="未检索到与该问题相关的资料。")])
    assert (gate.total, gate.passed, gate.unmeasured) == (1, 1, 0)


def test_one_trace_without_context_is_named_in_the_singular(tmp_path):
    traces = [narrative_trace("nar-1"), narrative_trace("nar-2", retrieved_context=[CONTEXT])]
    _, gate = faithfulness(tmp_path, traces)
    assert gate.lacking == f"1 narrative trace carries no {NEEDS}"

"""Parity, fourth pass: a RAGSpine baseline decides as RAGSpine decides, and the seed-000 scorer's
inputs score as seed-000 scores them. As in ``test_peer_parity.py``: minimal inputs written the way
the source system writes them, each expected figure worked out by hand from that system's rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_peer_parity import REFUSAL_CASE, figure_case, figure_trace, ragspine_trace, rejected, score


def refusal_cases(n: int) -> list[dict]:
    return [{**REFUSAL_CASE, "id": f"ref-{i}"} for i in range(n)]


def test_with_a_ragspine_baseline_the_verdict_is_ragspines_the_baseline_alone(tmp_path, capsys):
    # Two refusal cases; the engine refuses one and answers the other (without a figure: no fabrication).
    # refusal_appropriateness = 1/2 = 0.5. RAGSpine's qa_baseline.json holds 0.5 for it, and RAGSpine
    # gates a release on its baseline only (a metric below its baseline value, or more fabrications
    # than the baseline's count, is a regression): 0.5 >= 0.5 and 0 <= 0 -> no regression -> ship.
    gold = refusal_cases(2)
    traces = [
        ragspine_trace("ref-0", "未找到相关信息", refused=True, clarification_mode="none"),
        ragspine_trace("ref-1", "Globex earned a lot", refused=False, clarification_mode="none"),
    ]
    baseline = tmp_path / "qa_baseline.json"
    entry = {"metrics": {"refusal_appropriateness": 0.5}, "fabrication_count": 0, "n_cases": 2}
    baseline.write_text(json.dumps({"tool": entry}), encoding="utf-8")
    args = ("--baseline", str(baseline), "--mode", "tool", "--format", "json")
    code, report, _ = score(tmp_path, capsys, gold, traces, *args)
    assert report["qa_gates"]["refusal_appropriateness"]["pass_rate"] == 0.5
    assert code == 0 and report["release"]["decision"] == "ship"
    assert report["gates"] == [] and report["release"]["regressions"] == []
    assert any("the verdict is RAGSpine's" in warning for warning in report["warnings"])

    # The default floor (refusal_appropriateness >= 0.95) applies when the gates config lists it.
    config = tmp_path / "gates.yaml"
    config.write_text("gates:\n  refusal_appropriateness: {min: 0.95}\n", encoding="utf-8")
    code, report, _ = score(tmp_path, capsys, gold, traces, *args, "--config", str(config))
    failed = [gate["metric"] for gate in report["release"]["failed_gates"]]
    assert code == 1 and failed == ["refusal_appropriateness"]
    assert not any("the verdict is RAGSpine's" in warning for warning in report["warnings"])

    # Without a baseline the defaults stand, as before: the floor blocks.
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    assert code == 1 and "refusal_appropriateness" in [g["metric"] for g in report["release"]["failed_gates"]]


def test_the_migration_table_has_as_many_rows_as_it_announces():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "migration.md").read_text(encoding="utf-8")
    table = doc.split("## Renamed metrics")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| topic")]
    [announced] = re.findall(r"What is left are (\d+) deliberate differences", table)
    assert len(rows) == int(announced)


def test_a_seed_trace_answering_in_text_is_read_as_its_answer_a_documented_difference(tmp_path, capsys):
    # seed-000 reads only answer_json: this trace's claim is "" there, shipped (not the refusal token):
    # answered 1, refused 0, under_refusal 1/1. Here the text is the answer, and it says the refusal
    # token: refused 1, under_refusal 0/1 (docs/migration.md, "a trace whose answer is text").
    gold = [{"qid": "u1", "question": "Explain Z.", "answerable": False, "gold_claim_substr": []}]
    traces = [{"qid": "u1", "answer": "not in context", "retrieved_ids": []}]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    assert (report["answered"], report["refused"], report["under_refusal"]) == (0, 1, 0.0) and code == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda case: case.update(question=None), "question"),
        (lambda case: case.update(question=5), "question"),
        (lambda case: case["expected"]["source"].update(locator=5), "expected.source.locator"),
    ],
)
def test_golden_cases_ragspine_loads_and_this_pipeline_rejects(tmp_path, capsys, change, field):
    # RAGSpine's _validate_case checks neither the question's type (str(None) is "None", not blank) nor
    # the locator's: it loads all three. Here each is one error line naming the line and field (exit 2).
    case = figure_case()
    change(case)
    code, _, err = score(tmp_path, capsys, [case], [figure_trace()])
    assert rejected(code, err, "gold.jsonl:1: id=num-1", field)


def test_a_ragspine_case_without_case_type_is_scored_by_what_it_expects(tmp_path, capsys):
    # RAGSpine: "缺少必填字段 'case_type'" -> the golden set is refused. Here the case states a value, a
    # unit and a source: numeric_accuracy applies and passes (1702.0 found: 1/1).
    case = figure_case()
    del case["case_type"]
    code, report, _ = score(tmp_path, capsys, [case], [figure_trace()], "--format", "json")
    numeric = report["qa_gates"]["numeric_accuracy"]
    assert (numeric["passed"], numeric["total"]) == (1, 1) and code == 0

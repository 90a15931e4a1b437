"""RAGSpine's QA gates and fabrication: every rule, in both directions."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.scoring.fabrication import check_period_pattern
from ragspine_pipeline.scoring.qa_gates import has_qa_cases, score_qa_gates

SOURCE = {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5,table=1,row=2,col=3"}
NUMERIC = {"clarification": "none", "refuse": False, "value": 1702.0, "unit": "USD_M", "source": SOURCE}


def case(qid: str, case_type: str, expected: dict, **tags: str) -> dict:
    return {
        "id": qid,
        "question": f"question {qid}",
        "case_type": case_type,
        "expected": expected,
        "tags": tags,
    }


def answer(qid: str, claim: str, **outcome) -> dict:
    return {"qid": qid, "answer": {"claim": claim, "citations": []}, "outcome": outcome}


def score(tmp_path, cases: list[dict], traces: list[dict], **kwargs):
    gold_path, trace_path = tmp_path / "gold.jsonl", tmp_path / "traces.jsonl"
    gold_path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
    trace_path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in traces), encoding="utf-8")
    return score_qa_gates(load_gold(gold_path).table, load_traces(trace_path).table, **kwargs)


FOUND = {"found_value": 1702, "found_unit": "USD_M", "found_source": SOURCE, "clarification_mode": "none"}
CITED = "HK revenue was 1702 USD_M [ACME_FY2025_Results.pptx slide=5,table=1,row=2,col=3]"


@pytest.mark.parametrize(
    ("claim", "outcome", "passes"),
    [
        (CITED, FOUND, True),
        (CITED, {**FOUND, "found_value": 1702.0000000001}, True),  # float noise is not a wrong figure
        (CITED, {**FOUND, "found_value": 1703}, False),
        (CITED, {**FOUND, "found_unit": "HKD_M"}, False),
        (CITED, {**FOUND, "found_value": None}, False),
    ],
)
def test_numeric_accuracy_needs_value_and_unit(tmp_path, claim, outcome, passes):
    result = score(tmp_path, [case("n1", "numeric", NUMERIC)], [answer("n1", claim, **outcome)])
    gate = result.gates["numeric_accuracy"]
    assert (gate.total, gate.passed) == (1, int(passes))
    if not passes:
        [failure] = gate.failures
        assert failure["id"] == "n1" and failure["expected"] == {"value": 1702.0, "unit": "USD_M"}


@pytest.mark.parametrize(
    ("claim", "found_source", "passes"),
    [
        (CITED, SOURCE, True),
        ("HK revenue was 1702 USD_M", SOURCE, False),  # the doc name is not in the answer
        (CITED, {**SOURCE, "locator": "slide=6"}, False),  # another cell of the deck
        (CITED, {"doc": "Other.pptx", "locator": SOURCE["locator"]}, False),
        (CITED, None, False),
    ],
)
def test_citation_validity_of_a_source(tmp_path, claim, found_source, passes):
    result = score(
        tmp_path,
        [case("n1", "numeric", NUMERIC)],
        [answer("n1", claim, **{**FOUND, "found_source": found_source})],
    )
    assert result.gates["citation_validity"].passed == int(passes)


NARRATIVE = {"clarification": "none", "refuse": False, "narrative_doc": "Outlook_Memo.docx"}


@pytest.mark.parametrize(
    ("claim", "sources", "passes"),
    [
        (
            "Growth slows in H2 [Outlook_Memo.docx]",
            [{"doc": "Deck.pptx"}, {"doc": "Outlook_Memo.docx"}],
            True,
        ),
        ("Growth slows in H2", [{"doc": "Outlook_Memo.docx"}], False),  # not named in the answer
        ("Growth slows in H2 [Outlook_Memo.docx]", [{"doc": "Deck.pptx"}], False),  # not among the sources
        ("Growth slows in H2 [Outlook_Memo.docx]", None, False),
    ],
)
def test_citation_validity_of_a_narrative(tmp_path, claim, sources, passes):
    result = score(tmp_path, [case("r1", "narrative", NARRATIVE)], [answer("r1", claim, sources=sources)])
    assert result.gates["citation_validity"].passed == int(passes)
    assert result.gates["numeric_accuracy"].total == 0  # no expected value: not applicable


def test_a_composite_case_needs_the_source_and_the_narrative(tmp_path):
    expected = {**NUMERIC, "narrative_doc": "Outlook_Memo.docx"}
    both = CITED + " and [Outlook_Memo.docx]"
    narrative = [{"doc": "Outlook_Memo.docx"}]
    result = score(
        tmp_path,
        [
            case("c1", "composite", expected),
            case("c2", "composite", expected),
            case("c3", "composite", expected),
        ],
        [
            answer("c1", both, **FOUND, sources=narrative),
            answer("c2", CITED, **FOUND, sources=narrative),  # the memo is not named
            answer("c3", both, **{**FOUND, "found_source": None}, sources=narrative),
        ],
    )
    gate = result.gates["citation_validity"]
    assert (gate.total, gate.passed) == (3, 1) and [f["id"] for f in gate.failures] == ["c2", "c3"]


REFUSE = {"clarification": "none", "refuse": True}


@pytest.mark.parametrize(
    ("expected", "claim", "outcome", "passes"),
    [
        (REFUSE, "not in context", {}, True),
        (REFUSE, "I cannot say.", {"refused": True}, True),  # outcome.refused decides too
        (REFUSE, "not in context", {"found_value": 5}, False),  # refused, but it found a value
        (REFUSE, "Revenue will be 2000.", {}, False),  # answered: under-refusal
        (NUMERIC, CITED, FOUND, True),
        (NUMERIC, "not in context", {}, False),  # refused an answerable case: over-refusal
        (NUMERIC, CITED, {**FOUND, "refused": True}, False),
    ],
)
def test_refusal_appropriateness_both_directions(tmp_path, expected, claim, outcome, passes):
    case_type = "refusal" if expected is REFUSE else "numeric"
    result = score(tmp_path, [case("x1", case_type, expected)], [answer("x1", claim, **outcome)])
    gate = result.gates["refusal_appropriateness"]
    assert (gate.total, gate.passed) == (1, int(passes))


@pytest.mark.parametrize(
    ("expected_mode", "mode", "passes"),
    [
        ("ask_first", "ask_first", True),
        ("ask_first", "none", False),
        ("ask_first", None, False),  # not saying is not asking
        ("answer_with_assumptions", "answer_with_assumptions", True),
        ("answer_with_assumptions", "ask_first", False),
        ("none", None, True),  # absent reads as none
        ("none", "ask_first", False),  # asked when it must not
    ],
)
def test_clarification_appropriateness_both_directions(tmp_path, expected_mode, mode, passes):
    case_type = "numeric" if expected_mode == "none" else "clarification"
    expected = {**NUMERIC, "clarification": expected_mode}
    result = score(
        tmp_path,
        [case("k1", case_type, expected)],
        [answer("k1", CITED, **{**FOUND, "clarification_mode": mode})],
    )
    assert result.gates["clarification_appropriateness"].passed == int(passes)


@pytest.mark.parametrize(
    ("claim", "numbers"),
    [
        ("No figure for FY2024 in context.", []),
        ("The 2025H1 results are not in context.", []),
        ("Nothing about FY 2023 Q3 or 2024年上半年 here.", []),
        ("Growth could reach 9999% next year.", ["9999"]),
        ("Maybe 8.18b in sales.", ["8.18"]),
        ("See slide=5,table=1 for FY2025.", ["5", "1"]),
    ],
)
def test_fabrication_counts_numbers_left_after_period_tokens(tmp_path, claim, numbers):
    result = score(tmp_path, [case("f1", "refusal", REFUSE)], [answer("f1", claim, refused=True)])
    assert result.fabrication.checked == 1
    assert result.fabrication.count == (1 if numbers else 0)
    if numbers:
        assert result.fabrication.cases[0]["numbers"] == numbers


def test_fabrication_only_reads_answers_that_should_be_refusals(tmp_path):
    result = score(
        tmp_path,
        [case("n1", "numeric", NUMERIC), case("f1", "refusal", REFUSE)],
        [answer("n1", CITED, **FOUND), answer("f1", "not in context")],
    )
    assert (result.fabrication.count, result.fabrication.checked) == (0, 1)


def test_the_period_pattern_is_configurable(tmp_path):
    cases, traces = [case("f1", "refusal", REFUSE)], [answer("f1", "Nothing for FY2024.", refused=True)]
    assert score(tmp_path, cases, traces, period_pattern=r"FY\d{4}").fabrication.count == 0
    assert score(tmp_path, cases, traces, period_pattern=r"Q[1-4]").fabrication.count == 1
    assert check_period_pattern(r"FY\d{4}") is None and check_period_pattern("(unclosed") is not None


def test_pass_rates_by_tag_missing_traces_and_not_applicable(tmp_path):
    cases = [
        case("n1", "numeric", NUMERIC, topic="FIN", scope="HK"),
        case("n2", "numeric", NUMERIC, topic="FIN", scope="GROUP"),
        case("r1", "refusal", REFUSE, topic="HR"),
    ]
    plain = {"id": "p1", "question": "layered case", "answerable": True, "gold_citations": ["c1"]}
    result = score(tmp_path, [*cases, plain], [answer("n1", CITED, **FOUND), answer("r1", "not in context")])
    numeric = result.gates["numeric_accuracy"]
    assert (numeric.total, numeric.passed, numeric.pass_rate) == (2, 1, 0.5)  # n2 has no trace: it fails
    assert numeric.by_tag == {
        "scope": {
            "GROUP": {"total": 1, "passed": 0, "pass_rate": 0.0},
            "HK": {"total": 1, "passed": 1, "pass_rate": 1.0},
        },
        "topic": {"FIN": {"total": 2, "passed": 1, "pass_rate": 0.5}},
    }
    refusal = result.gates["refusal_appropriateness"]
    assert refusal.total == 3  # every QA-gate case; the plain layered case is not one
    assert result.cases.column("numeric_accuracy").to_pylist() == [True, False, None, None]


def test_a_gate_that_applies_to_nothing_is_null_with_total_zero(tmp_path):
    result = score(tmp_path, [case("r1", "refusal", REFUSE)], [answer("r1", "not in context")])
    gate = result.gates["numeric_accuracy"]
    assert (gate.total, gate.pass_rate, gate.to_dict()["failures"]) == (0, None, [])
    assert gate.to_dict()["pass_rate"] is None  # JSON null, never a placeholder 1.0


def test_only_golden_sets_with_expectations_have_qa_cases(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"qid": "a", "question": "q", "answerable": True}) + "\n")
    assert not has_qa_cases(load_gold(plain).table)
    ragspine = tmp_path / "ragspine.jsonl"
    ragspine.write_text(json.dumps(case("r1", "refusal", REFUSE)) + "\n")
    assert has_qa_cases(load_gold(ragspine).table)

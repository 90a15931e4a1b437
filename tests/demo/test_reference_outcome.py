"""The reference engine's answer step: figures, clarification, refusal and the trace's ``outcome``."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest

from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.demo.build import DEGRADED, HEALTHY
from ragspine_pipeline.demo.chunks import Chunk
from ragspine_pipeline.demo.corpus import chunk_rows
from ragspine_pipeline.demo.finance import FINANCE_CASES
from ragspine_pipeline.demo.reference_engine import EngineConfig, ReferenceEngine
from ragspine_pipeline.demo.reference_outcome import REFUSAL, reference_day
from ragspine_pipeline.scoring.fabrication import fabricated


def qa_failures(case: dict, trace: dict) -> list[str]:
    """The QA-gate expectations a trace breaks, checked case by case."""
    expected, outcome, claim = case["expected"], trace["outcome"], trace["answer"]["claim"]
    refused = claim.strip().lower() == REFUSAL or outcome.get("refused") is True
    failed = []
    if "value" in expected and (
        outcome.get("found_value") != expected["value"] or outcome.get("found_unit") != expected["unit"]
    ):
        failed.append("numeric_accuracy")
    source, narrative = expected.get("source"), expected.get("narrative_doc")
    source_ok = source is None or (outcome.get("found_source") == source and source["doc"] in claim)
    narrative_ok = narrative is None or (
        any(s["doc"] == narrative for s in outcome.get("sources", [])) and narrative in claim
    )
    if not (source_ok and narrative_ok):
        failed.append("citation_validity")
    if expected["refuse"] != refused or (refused and outcome.get("found_value") is not None):
        failed.append("refusal_appropriateness")
    if outcome.get("clarification_mode", "none") != expected["clarification"]:
        failed.append("clarification_appropriateness")
    return failed


def demo_engine(config: EngineConfig) -> ReferenceEngine:
    return ReferenceEngine([Chunk.from_dict(row) for row in chunk_rows()], config, "ix-test")


def ask(engine: ReferenceEngine, case: dict) -> dict:
    return engine.answer(case["case_id"], case["question"], ts=0, reference_date=case["reference_date"])


@pytest.fixture(scope="module")
def healthy() -> ReferenceEngine:
    return demo_engine(HEALTHY)


@pytest.mark.parametrize("case", FINANCE_CASES, ids=lambda case: case["case_id"])
def test_the_healthy_engine_answers_every_finance_case_as_expected(healthy, case):
    trace = ask(healthy, case)
    assert qa_failures(case, trace) == [], trace["answer"]["claim"]
    Trace.model_validate(trace)  # the outcome fits the trace contract
    assert trace["outcome"]["refused"] == (trace["answer"]["claim"] == REFUSAL)
    cited = {claim["citation_id"] for claim in trace["answer"]["claims"]}
    assert cited <= set(trace["selected_context_ids"])


def test_the_degraded_engine_gets_finance_cases_wrong_where_the_qa_gates_look():
    degraded = demo_engine(DEGRADED)
    failures = {case["case_id"]: qa_failures(case, ask(degraded, case)) for case in FINANCE_CASES}
    # The restricted draft budget leaks: a figure where only a refusal was right.
    assert "refusal_appropriateness" in failures["FIN-10"]
    assert ask(degraded, FINANCE_CASES[9])["outcome"]["found_value"] == 468.0
    assert sum(bool(failed) for failed in failures.values()) >= 3


def test_refusals_state_no_number_once_periods_are_removed(healthy):
    refusals = [ask(healthy, case) for case in FINANCE_CASES if case["expected"]["refuse"]]
    assert refusals
    for trace in refusals:
        assert trace["answer"] == {"claim": REFUSAL, "citations": [], "claims": []}
        assert trace["outcome"]["refused"] is True and "found_value" not in trace["outcome"]
        assert not fabricated(pa.array([trace["answer"]["claim"]])).any()


def test_a_figure_answer_is_its_sentence_with_the_cell_it_cites(healthy):
    trace = healthy.answer("q", "What was Kestrel Group revenue in FY2025?", reference_date="2026-11-02")
    assert trace["answer"]["claim"] == (
        "Kestrel Group revenue was 412.6 USD million in FY2025. "
        "[Kestrel_FY2025_Results.pptx slide=3,table=1,row=2,col=3]"
    )
    assert trace["answer"]["claims"] == [
        {
            "claim_id": "c1",
            "text": "Kestrel Group revenue was 412.6 USD million in FY2025.",
            "citation_id": "fy2025-results#1",
            "answer_point": "group revenue FY2025 412.6",
        }
    ]
    assert trace["outcome"] == {
        "route": "numeric",
        "clarification_mode": "none",
        "refused": False,
        "found_value": 412.6,
        "found_unit": "USD_M",
        "found_source": {"doc": "Kestrel_FY2025_Results.pptx", "locator": "slide=3,table=1,row=2,col=3"},
        "sources": [{"doc": "Kestrel_FY2025_Results.pptx", "locator": "slide=3,table=1,row=2,col=3"}],
    }


def test_an_open_dimension_takes_its_default_and_says_so(healthy):
    scope_open = healthy.answer("q", "What was revenue in FY2024?")["outcome"]
    assert scope_open["clarification_mode"] == "answer_with_assumptions"
    assert (scope_open["found_value"], scope_open["assumptions"]) == (368.2, ["you mean the whole group"])
    period_open = healthy.answer("q", "What was the EMEA revenue?")["outcome"]
    assert period_open["clarification_mode"] == "answer_with_assumptions"
    assert period_open["found_value"] == 151.3  # the latest fiscal year
    assert period_open["assumptions"] == ["you mean the latest fiscal year, FY2025"]


def test_a_relative_period_is_resolved_on_the_reference_date(healthy):
    question = "What was EMEA revenue last year?"
    assert healthy.answer("q", question, reference_date="2026-03-01")["outcome"]["found_value"] == 151.3
    assert healthy.answer("q", question, reference_date="2025-06-30")["outcome"]["found_value"] == 133.9
    # In 2028 last year is FY2027, which nothing reports: a refusal, not the nearest figure.
    later = healthy.answer("q", question, reference_date="2028-01-10")
    assert later["answer"]["claim"] == REFUSAL and later["outcome"]["route"] == "numeric"


def test_an_ambiguous_question_is_answered_with_a_question_whose_ledger_the_context_supports(healthy):
    trace = healthy.answer("q", "What was our revenue?")
    outcome, claim = trace["outcome"], trace["answer"]["claim"]
    assert outcome["clarification_mode"] == "ask_first" and outcome["refused"] is False
    assert "found_value" not in outcome and "which scope and fiscal year do you mean?" in claim
    assert "Kestrel_FY2025_Results.pptx" in claim
    texts = {row["chunk_id"]: row["text"].lower() for row in chunk_rows()}
    for ledger in trace["answer"]["claims"]:
        assert ledger["citation_id"] in trace["selected_context_ids"]
        assert all(
            phrase.lower() in texts[ledger["citation_id"]] for phrase in ledger.get("support_phrases", [])
        )


@pytest.mark.parametrize(
    "question",
    [
        "What was APAC revenue in FY2025?",  # a scope nobody reports
        "What was EMEA revenue from the partner channel in FY2025?",  # a qualifier no figure has
        "What was the group gross margin in 2025 H1?",  # a half year: figures are annual
    ],
)
def test_a_figure_is_never_answered_for_a_qualifier_it_does_not_have(healthy, question):
    trace = healthy.answer("q", question)
    assert trace["answer"]["claim"] == REFUSAL
    assert trace["outcome"]["refused"] is True and "found_value" not in trace["outcome"]


def test_policy_answers_keep_their_extracted_text_and_carry_an_outcome(healthy):
    trace = healthy.answer("q", "Who approves a freeze exception?")
    assert trace["answer"]["claim"] == " ".join(c["text"] for c in trace["answer"]["claims"])
    outcome = trace["outcome"]
    assert (outcome["route"], outcome["clarification_mode"], outcome["refused"]) == ("policy", "none", False)
    assert outcome["sources"][0] == {"doc": "freeze-exceptions", "locator": "freeze-exceptions#2"}
    refusal = healthy.answer("q", "Which monitoring vendor do we use for alerting?")["outcome"]
    assert refusal == {"route": "policy", "clarification_mode": "none", "refused": True, "sources": []}


def test_reference_day_prefers_the_given_date_then_the_trace_time():
    assert reference_day("2026-11-02", 0) == date(2026, 11, 2)
    assert reference_day(date(2025, 1, 5), None) == date(2025, 1, 5)
    assert reference_day(None, "2026-07-14T09:30:00.000Z") == date(2026, 7, 14)
    assert reference_day(None, 86400 * 365) == date(1971, 1, 1)

"""Layered examples: each failure stops at the first failed stage its rule names."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ragspine_pipeline.contracts.columns import EVIDENCE_SCHEMA
from ragspine_pipeline.scoring.layered import score_layered
from tests.scoring.conftest import gold_table, trace_table

REGISTRY = [
    ("pol-1#1", "v1", True, True, "Release freezes start on the last Friday of the quarter."),
    ("pol-1#2", "v1", True, True, "The release manager approves any freeze exception in writing."),
    ("noise#1", "v3", True, True, "The cafeteria opens at eight."),
    ("hr-9#1", "v1", False, True, "Salary bands for engineering managers."),
    ("pol-0#1", "v0", True, False, "Freezes start on Monday."),
]
EVIDENCE = pa.Table.from_pylist(
    [
        {"chunk_id": c, "document_id": c.split("#")[0], "parent_id": None, "version": v, "permitted": p,
         "current": cur, "text": text}
        for c, v, p, cur, text in REGISTRY
    ],
    schema=EVIDENCE_SCHEMA,
)  # fmt: skip
# The permission-safe harness's version keys, the default ``required_versions``.
HARNESS_KEYS = ["retriever", "index", "sparse", "dense", "fusion", "reranker"]
GOOD_CLAIM = {
    "text": "The release manager approves a freeze exception.",
    "citation_id": "pol-1#2",
    "support_phrases": ["release manager approves"],
    "answer_point": "release manager approves",
}


def case(qid, answerable=True):
    if not answerable:
        return {"qid": qid, "answerable": False, "tags": {"workflow": "release-freeze"}}
    return {
        "qid": qid,
        "answerable": True,
        "gold_citations": ["pol-1#2"],
        "required_points": ["release manager approves"],
        "tags": {"workflow": "release-freeze"},
    }


def trace(qid, **changes):
    base = {
        "qid": qid,
        "retrieved_ids": ["pol-1#2", "pol-1#1", "noise#1"],
        "rerank_input_ids": ["pol-1#2", "pol-1#1", "noise#1"],
        "reranked_ids": ["pol-1#2", "pol-1#1", "noise#1"],
        "selected_context_ids": ["pol-1#2", "pol-1#1"],
        "selected_versions": ["v1", "v1"],
        "version_keys": HARNESS_KEYS,
        "index_version": "ix-1",
        "claims": [GOOD_CLAIM],
        "claim": GOOD_CLAIM["text"],
        "citations": ["pol-1#2"],
    }
    return {**base, **changes}


def stage_of(trace_row, gold_row=None):
    gold_row = gold_row or case(trace_row["qid"])
    result = score_layered(gold_table([gold_row]), trace_table([trace_row]), EVIDENCE)
    row = result.cases.to_pylist()[0]
    return row["first_failed_stage"], row


def test_a_correct_answer_passes():
    stage, row = stage_of(trace("ok"))
    assert stage == "pass" and row["releasable"] and row["admissible"]
    assert row["claim_faithfulness"] == row["citation_support"] == row["point_coverage"] == 1.0
    assert row["context_precision"] == 0.5  # one of the two selected chunks is required


def test_an_invented_bypass_claim_stops_at_faithfulness():
    bypass = {
        "text": "Admins can bypass the freeze with a flag.",
        "citation_id": "pol-1#1",
        "support_phrases": ["bypass the freeze"],
    }
    stage, row = stage_of(trace("bypass", claims=[GOOD_CLAIM, bypass]))
    assert stage == "answer faithfulness" and row["claim_faithfulness"] == 0.5


def test_a_correct_looking_claim_citing_the_wrong_selected_chunk_stops_at_citation_support():
    stage, row = stage_of(trace("wrongcite", claims=[{**GOOD_CLAIM, "citation_id": "pol-1#1"}]))
    assert stage == "citation support"
    assert row["claim_faithfulness"] == 1.0 and row["citation_support"] == 0.0


@pytest.mark.parametrize(
    "changes",
    [{"claims": []}, {"claims": None, "claim": "   "}],
    ids=["empty ledger", "blank answer"],
)
def test_an_empty_answer_stops_at_answer_completeness(changes):
    stage, row = stage_of(trace("empty", **changes))
    assert stage == "answer completeness" and row["n_claims"] == 0


def test_a_missing_answer_point_stops_at_answer_completeness():
    stage, row = stage_of(trace("nopoint", claims=[{**GOOD_CLAIM, "answer_point": None}]))
    assert (
        stage == "answer completeness" and row["point_coverage"] == 0.0 and row["claim_faithfulness"] == 1.0
    )


def test_a_dropped_source_stops_at_context_selection():
    stage, row = stage_of(trace("dropped", selected_context_ids=["pol-1#1"], selected_versions=["v1"]))
    assert stage == "context selection" and row["context_recall"] == 0.0 and row["candidate_recall"] == 1.0


def test_a_missing_candidate_stops_at_candidate_retrieval():
    stages = ["pol-1#1", "noise#1"]
    stage, row = stage_of(
        trace("nocand", retrieved_ids=stages, rerank_input_ids=stages, reranked_ids=stages,
              selected_context_ids=["pol-1#1"], selected_versions=["v1"])
    )  # fmt: skip
    assert stage == "candidate retrieval" and row["candidate_recall"] == 0.0


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"retrieved_ids": ["pol-1#2", "pol-1#1", "hr-9#1"]}, "restricted"),
        ({"retrieved_ids": ["pol-1#2", "pol-1#1", "pol-0#1"]}, "stale"),
        ({"retrieved_ids": ["pol-1#2", "pol-1#1", "ghost#7"]}, "unknown_chunk"),
        ({"retrieved_ids": ["pol-1#2", "pol-1#2", "pol-1#1"]}, "duplicate_id"),
        ({"selected_versions": ["v1", "v0"]}, "wrong_version"),
        ({"version_keys": ["index"]}, "missing_version"),
        ({"version_keys": None}, "missing_version"),
        ({"version_keys": [*HARNESS_KEYS, "index"]}, "repeated_version"),
        ({"selected_versions": ["v1"]}, "version_count"),
        ({"selected_context_ids": [], "selected_versions": []}, "empty_selection"),
        (
            {"rerank_input_ids": ["pol-1#2", "pol-1#1", "noise#1", "pol-2#9"]},
            "rerank_input_not_in_first_stage",
        ),
        ({"reranked_ids": ["pol-1#2", "pol-1#1"]}, "reranked_not_rerank_input"),
        (
            {
                "reranked_ids": ["pol-1#1", "noise#1", "pol-1#2"],
                "selected_context_ids": ["pol-1#2", "pol-1#1"],
            },
            None,
        ),
    ],
)
def test_inadmissible_evidence_stops_at_admissibility(changes, rule):
    stage, row = stage_of(trace("bad", **changes))
    if rule is None:  # reordering the reranked stage is not a violation
        assert stage == "pass"
        return
    assert stage == "admissibility" and rule in row["inadmissible"]


def test_restricted_evidence_fails_admissibility_even_when_it_is_only_a_candidate():
    stage, row = stage_of(trace("leak", retrieved_ids=["hr-9#1", "pol-1#2", "pol-1#1", "noise#1"]))
    assert stage == "admissibility" and row["inadmissible"] == ["restricted"]


def test_stages_a_trace_does_not_carry_are_skipped():
    stage, _ = stage_of(trace("lean", rerank_input_ids=None, reranked_ids=None))
    assert stage == "pass"


def test_a_missing_trace_is_inadmissible():
    result = score_layered(gold_table([case("a"), case("b")]), trace_table([trace("a")]), EVIDENCE)
    assert result.cases.column("first_failed_stage").to_pylist() == ["pass", "admissibility"]
    assert result.cases.column("inadmissible").to_pylist() == [[], ["missing_trace"]]


def test_refusals():
    refused = {"claims": None, "claim": "not in context", "citations": []}
    gold = [case("u1", answerable=False), case("u2", answerable=False), case("a1")]
    traces = [trace("u1", **refused), trace("u2"), trace("a1", **refused)]
    result = score_layered(gold_table(gold), trace_table(traces), EVIDENCE)
    assert result.cases.column("first_failed_stage").to_pylist() == ["pass", "refusal", "refusal"]
    assert result.stage_histogram()["refusal"] == 2


def test_token_overlap_support_without_phrases():
    # A trace without a ledger is one claim without support phrases: the token rule decides.
    plain = {**case("tokens"), "required_points": []}
    claim = {"claims": None, "claim": "The release manager approves exceptions", "citations": ["pol-1#2"]}
    # tokens: the, release, manager, approves, exceptions -> 4 of 5 in pol-1#2 (80 %)
    stage, _ = stage_of(trace("tokens", **claim), plain)
    assert stage == "pass"
    weak = {**claim, "claim": "Managers approve every exception quickly"}  # 0 of 5 shared tokens
    stage, _ = stage_of(trace("tokens", **weak), plain)
    assert stage == "answer faithfulness"


def test_an_empty_list_of_support_phrases_is_met_by_every_known_chunk():
    weak = {**GOOD_CLAIM, "text": "Managers approve every exception quickly", "support_phrases": []}
    stage, row = stage_of(trace("vacuous", claims=[weak]))
    assert stage == "pass" and row["claim_faithfulness"] == row["citation_support"] == 1.0


def test_a_trace_without_a_ledger_is_one_claim_cited_by_its_first_citation():
    stage, row = stage_of(
        trace("plain", claims=None, claim="The release manager approves any freeze exception in writing.",
              citations=["pol-1#2", "pol-1#1"]),
        {**case("plain"), "required_points": []},
    )  # fmt: skip
    assert row["n_claims"] == 1 and row["citation_support"] == 1.0 and stage == "pass"


def test_aggregates_exclude_not_applicable_cases():
    gold = [case("a"), case("u", answerable=False)]
    traces = [trace("a"), trace("u", claims=None, claim="not in context", citations=[])]
    result = score_layered(gold_table(gold), trace_table(traces), EVIDENCE)
    assert result.denominators["context_recall"] == 1  # the unanswerable case requires nothing
    assert result.denominators["claim_faithfulness"] == 1  # the refusal has no claims to judge
    assert result.metrics["releasable_rate"] == 1.0


def test_a_null_id_is_unknown_in_no_other_stage_and_never_a_repeat():
    stages = ["pol-1#2", None, None]
    _, row = stage_of(
        trace("nullid", retrieved_ids=stages, rerank_input_ids=stages, reranked_ids=stages,
              selected_context_ids=["pol-1#2"], selected_versions=["v1"])
    )  # fmt: skip
    assert row["inadmissible"] == [
        "unknown_chunk",
        "rerank_input_not_in_first_stage",
        "reranked_not_rerank_input",
    ]

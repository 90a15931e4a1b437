"""The reference engine: BM25 + rerank + extractive answers, ACL, refusal, layered-dialect traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.evaluation import evaluate
from ragspine_pipeline.demo.chunks import Chunk
from ragspine_pipeline.demo.reference_engine import EngineConfig, ReferenceEngine, file_sha256, tokenize
from ragspine_pipeline.demo.reference_outcome import REFUSAL
from ragspine_pipeline.errors import InputError


def chunk(chunk_id, sentences, *, version="v1", permitted=True, current=True, title=""):
    return {
        "chunk_id": chunk_id,
        "document_id": chunk_id.split("#")[0],
        "parent_id": None,
        "version": version,
        "permitted": permitted,
        "current": current,
        "title": title,
        "text": " ".join(s for s, _ in sentences),
        "points": [{"sentence": s, "point": p} for s, p in sentences],
    }


CORPUS = [
    chunk("freeze#1", [("The quarterly freeze starts on the last Friday of a quarter.", "freeze start"),
                       ("The freeze ends on the following Tuesday.", "freeze end")],
          version="v3", title="Release freeze — Quarterly freeze"),
    chunk("freeze#2", [("The release manager approves freeze exceptions in writing.", "manager approves")],
          version="v3", title="Release freeze — Exceptions"),
    chunk("expense#1", [("Travel expenses above 500 EUR need pre-approval from the budget owner.", "500")],
          version="v4", title="Expense policy — Pre-approval"),
    chunk("expense#2", [("Receipts are uploaded within thirty days of the purchase.", "thirty days")],
          version="v4", title="Expense policy — Receipts"),
    chunk("oncall#1", [("The on-call rotation hands over on Mondays at ten.", "monday handover")],
          version="v2", title="On-call handbook — Rotation"),
    chunk("salary#1", [("Salary bands for engineering managers range from 95,000 to 118,000 EUR.", "bands")],
          permitted=False, title="Salary bands"),
    chunk("expense@v3#1", [("Travel expenses above 250 EUR need pre-approval from the budget owner.", "250")],
          version="v3", current=False, title="Expense policy — Pre-approval"),
]  # fmt: skip


def engine(**config) -> ReferenceEngine:
    return ReferenceEngine([Chunk.from_dict(row) for row in CORPUS], EngineConfig(**config), "ix-test")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_tokenize_drops_stopwords_and_folds_inflections():
    assert tokenize("Who approves the freeze exceptions?") == ["approv", "freez", "exception"]
    assert tokenize("announced") == tokenize("announces") == tokenize("announce")
    assert tokenize("submitted") == tokenize("submit")


def test_bm25_ranks_the_obviously_relevant_chunk_first():
    trace = engine().answer("q1", "Who approves a freeze exception?")
    assert trace["first_stage_ids"][0] == "freeze#2"
    assert trace["reranked_ids"][0] == "freeze#2"
    assert trace["selected_context_ids"][0] == "freeze#2"
    assert trace["answer"]["citations"][0] == "freeze#2"
    first_claim = trace["answer"]["claims"][0]
    assert first_claim["text"] == "The release manager approves freeze exceptions in writing."
    assert first_claim["answer_point"] == "manager approves"
    assert first_claim["citation_id"] == "freeze#2"


def test_extracts_the_sentence_that_answers_and_labels_its_point():
    trace = engine().answer("q2", "When does the quarterly freeze start?")
    points = [claim["answer_point"] for claim in trace["answer"]["claims"]]
    assert "freeze start" in points
    assert trace["answer"]["claim"] == " ".join(claim["text"] for claim in trace["answer"]["claims"])


def test_refuses_below_the_relevance_threshold_but_still_traces_its_retrieval():
    trace = engine().answer("q3", "What is the gym membership subsidy for contractors?")
    assert trace["answer"] == {"claim": REFUSAL, "citations": [], "claims": []}
    assert trace["selected_context_ids"]  # admissibility needs a non-empty selection even for a refusal
    assert len(trace["selected_versions"]) == len(trace["selected_context_ids"])


def test_every_trace_carries_an_outcome_that_agrees_with_its_answer():
    sut = engine()
    for question in (
        "Who approves a freeze exception?",
        "What is the gym membership subsidy for contractors?",
    ):
        trace = sut.answer("q", question)
        outcome = trace["outcome"]
        assert outcome["refused"] == (trace["answer"]["claim"] == REFUSAL)
        assert (outcome["route"], outcome["clarification_mode"]) == ("policy", "none")
        assert [source["locator"] for source in outcome["sources"]] == trace["answer"]["citations"]


def test_a_chunk_of_a_named_file_keeps_its_place_and_figures():
    row = chunk("deck#1", [("EMEA revenue was 151.3 USD million in FY2025.", "emea revenue")])
    figure = {"metric": "revenue", "scope": "EMEA", "period": "FY2025", "value": 151.3, "unit": "USD_M",
              "doc": "Deck.pptx", "locator": "slide=5,table=1,row=2,col=3", "sentence": 0}  # fmt: skip
    parsed = Chunk.from_dict(
        {**row, "doc": "Deck.pptx", "locator": "slide=5,table=1,row=2", "figures": [figure]}
    )
    assert (parsed.doc, parsed.locator) == ("Deck.pptx", "slide=5,table=1,row=2")
    assert [(f.metric, f.scope, f.period, f.value, f.unit) for f in parsed.figures] == [
        ("revenue", "EMEA", "FY2025", 151.3, "USD_M")
    ]
    assert Chunk.from_dict(row).figures == () and Chunk.from_dict(row).doc is None


def test_min_relevance_is_the_refusal_threshold():
    question = "Which receipts need pre-approval?"  # half the query terms are in the best chunk
    assert engine(min_relevance=0.0).answer("q", question)["answer"]["claims"]
    assert engine(min_relevance=1.0).answer("q", question)["answer"]["claim"] == REFUSAL


def all_traced_ids(trace: dict) -> set[str]:
    stages = ("first_stage_ids", "rerank_input_ids", "reranked_ids", "selected_context_ids")
    return {chunk_id for stage in stages for chunk_id in trace[stage]}


@pytest.mark.parametrize(
    "question",
    ["What are the salary bands for engineering managers?", "Which travel expenses need pre-approval?"],
)
def test_acl_keeps_restricted_and_stale_chunks_out_of_every_stage(question):
    guarded = engine(candidates=10).answer("q", question)
    assert not all_traced_ids(guarded) & {"salary#1", "expense@v3#1"}
    assert guarded["acl"] == {"enforced": True, "filtered": 2}

    leaky = engine(candidates=10, enforce_acl=False).answer("q", question)
    assert all_traced_ids(leaky) & {"salary#1", "expense@v3#1"}
    assert leaky["acl"] == {"enforced": False, "filtered": 0}


def test_stages_nest_as_admissibility_requires():
    config = {"candidates": 5, "rerank_keep": 2, "context_size": 2}
    for question in ("Who approves a freeze exception?", "When are receipts uploaded?", "unrelated words"):
        trace = engine(**config).answer("q", question)
        assert trace["rerank_input_ids"] == trace["first_stage_ids"]
        assert len(trace["first_stage_ids"]) == 5
        assert sorted(trace["reranked_ids"]) == sorted(trace["rerank_input_ids"])
        assert 1 <= len(trace["selected_context_ids"]) <= 2
        assert set(trace["selected_context_ids"]) <= set(trace["reranked_ids"][:2])
        versions = {row["chunk_id"]: row["version"] for row in CORPUS}
        assert trace["selected_versions"] == [versions[i] for i in trace["selected_context_ids"]]
        assert set(trace["versions"]) == {"index", "retriever", "reranker"}


def test_traces_load_and_are_admissible(tmp_path):
    cases = [
        {"case_id": "A", "question": "Who approves a freeze exception?", "answerable": True,
         "required_source_ids": ["freeze#2"], "required_points": ["manager approves"]},
        {"case_id": "B", "question": "Within how many days are receipts uploaded?", "answerable": True,
         "required_source_ids": ["expense#2"], "required_points": ["thirty days"]},
        {"case_id": "C", "question": "What is the gym membership subsidy?", "answerable": False},
    ]  # fmt: skip
    gold = write_jsonl(tmp_path / "gold.jsonl", cases)
    fields = ("chunk_id", "version", "permitted", "current", "text")
    evidence = write_jsonl(tmp_path / "evidence.jsonl", [{k: row[k] for k in fields} for row in CORPUS])
    sut = engine()
    traces = write_jsonl(tmp_path / "traces.jsonl", [sut.answer(c["case_id"], c["question"]) for c in cases])

    result = evaluate(
        load_gold(gold).table,
        load_traces(traces).table,
        gates=[],
        config=EvalConfig(required_versions=["index", "retriever"]),  # as the demo's gates.yaml
        run_id="test",
        evidence=load_evidence(evidence).table,
    )
    cases = result.layered.cases.to_pydict()
    assert cases["admissible"] == [True, True, True]
    assert cases["releasable"] == [True, True, True]
    assert result.metrics["claim_faithfulness"] == 1.0
    assert result.metrics["citation_support"] == 1.0
    assert result.release.index_version == "ix-test"


def test_the_same_question_gives_the_same_trace_except_its_time():
    first = engine().answer("q7", "When does the on-call rotation hand over?")
    again = ReferenceEngine([Chunk.from_dict(r) for r in reversed(CORPUS)], EngineConfig(), "ix-test").answer(
        "q7", "When does the on-call rotation hand over?"
    )
    assert first.pop("ts") and again.pop("ts")
    assert first == again
    assert engine().answer("q7", "x", ts=1700000000)["ts"] == 1700000000


def test_config_round_trips_and_rejects_nonsense():
    config = EngineConfig(candidates=3, rerank_keep=2, context_size=1, enforce_acl=False)
    assert EngineConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown engine settings: top_k"):
        EngineConfig.from_dict({"top_k": 3})
    with pytest.raises(ValueError):
        EngineConfig(candidates=0)
    with pytest.raises(ValueError):
        EngineConfig(min_relevance=1.5)
    with pytest.raises(ValueError, match="enforce_acl"):
        EngineConfig.from_dict({"enforce_acl": "false"})
    with pytest.raises(ValueError, match="candidates"):
        EngineConfig.from_dict({"candidates": 8.0})


def test_from_manifest_builds_the_engine_and_refuses_a_changed_corpus(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
    (tmp_path / "index").mkdir()
    manifest = tmp_path / "index" / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "index_version": "ix-7",
                "built_at": "2026-11-20T00:00:00Z",
                "corpus_hash": file_sha256(corpus),
                "corpus": "../corpus.jsonl",
                "engine": {"candidates": 4, "enforce_acl": False},
            }
        )
    )
    sut = ReferenceEngine.from_manifest(manifest)
    assert sut.index_version == "ix-7"
    assert sut.config == EngineConfig(candidates=4, enforce_acl=False)
    assert "salary#1" in sut.visible_ids
    assert sut.answer("q", "Who approves a freeze exception?")["versions"]["index"] == "ix-7"

    write_jsonl(corpus, CORPUS[:-1])
    with pytest.raises(InputError, match="changed since index ix-7 was built"):
        ReferenceEngine.from_manifest(manifest)


def test_from_manifest_names_a_bad_manifest(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"index_version": "ix", "corpus": "corpus.jsonl", "engine": {"k": 1}}))
    with pytest.raises(InputError, match="unknown engine settings"):
        ReferenceEngine.from_manifest(manifest)
    with pytest.raises(InputError, match="not found"):
        ReferenceEngine.from_manifest(tmp_path / "missing.json")

"""The vectorised scorer agrees with the per-case oracle (tests/scoring/oracle.py) on random inputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine_pipeline.scoring import grounded
from tests.scoring import oracle
from tests.scoring.conftest import gold_table, trace_table

IDS = st.sampled_from(["p1", "p2", "p3", "p4", "doc#1", "DOC#1"])
WORDS = st.sampled_from(
    ["null", "keys", "rejects", "Rejects", "only", "domain", "example.com", "X", "é", "数据", "-"]
)
TEXT = st.lists(WORDS, max_size=6).map(" ".join)
CLAIMS = st.one_of(
    TEXT,
    st.sampled_from(["not in context", " Not in Context \n", "NOT IN CONTEXT", "not in context.", ""]),
    st.none(),
)
QIDS = st.sampled_from([f"q{i}" for i in range(8)])


@st.composite
def cases(draw):
    qids = draw(st.lists(QIDS, min_size=1, max_size=8, unique=True))
    gold = [
        {
            "qid": qid,
            "question": draw(st.sampled_from(["What is X?", "What is Y?", f"Q {qid}"])),
            "answerable": draw(st.booleans()),
            "gold_claim_substr": draw(st.lists(st.one_of(TEXT, WORDS), max_size=3)),
            "gold_claim": draw(st.one_of(st.none(), TEXT)),
            "gold_citations": draw(st.lists(IDS, max_size=3)),
        }
        for qid in qids
    ]
    trace_keys = st.one_of(st.sampled_from(qids), QIDS, st.just(None))
    traces = [
        {
            "qid": draw(trace_keys),
            "question": draw(st.sampled_from(["What is X?", "What is Y?", "Other?"])),
            "claim": draw(CLAIMS),
            "citations": draw(st.one_of(st.none(), st.lists(IDS, max_size=3))),
            "retrieved_ids": draw(st.one_of(st.none(), st.lists(IDS, max_size=6))),
        }
        for _ in range(draw(st.integers(0, 12)))
    ]
    return gold, traces


@settings(max_examples=400, deadline=None)
@given(data=cases(), k=st.integers(1, 6))
def test_vectorised_scorer_matches_per_case_oracle(data, k):
    gold, traces = data
    result = grounded.score_grounded(gold_table(gold), trace_table(traces), k=k)
    expected = oracle.score(gold, traces, k)
    assert result.cases.column("label").to_pylist() == expected.pop("labels")
    for name, value in expected.items():
        actual = result.metrics.get(name, result.counts.get(name))
        if value is None:  # not applicable: null, never a placeholder
            assert actual is None, name
        else:
            assert actual == pytest.approx(value, abs=0, rel=1e-12), name

"""Replaying golden questions through a SUT: valid traces kept, the others quarantined, both files written."""

from __future__ import annotations

import json
import logging

from ragspine_pipeline.contracts.columns import load_traces
from ragspine_pipeline.sources.replay import replay
from ragspine_pipeline.sources.sut import HttpSutClient
from tests.conftest import Reply

QUESTIONS = [("q1", "Capital of France?", None), ("q2", "Capital of Peru?", None), ("q3", "?", None)]


def test_an_answer_holding_a_lone_surrogate_is_quarantined_escaped_with_one_warning(
    tmp_path, http_server, caplog
):
    # On the wire the answer is the JSON escape "a\ud800b"; parsed, it is a string no UTF-8 encodes.
    http_server.script(
        Reply(200, {"qid": "q1", "answer": "a\ud800b"}),
        Reply(200, {"qid": "q2", "answer": "Lima, café", "retrieved_ids": ["c1"]}),
        Reply(200, {"qid": "q3", "answer": 7}),
    )
    sut = HttpSutClient(http_server.url, backoff=0.01)
    out, quarantine = tmp_path / "traces.jsonl", tmp_path / "quarantine.jsonl"
    with caplog.at_level(logging.WARNING):
        result = replay(QUESTIONS, sut.answer, out=out, quarantine=quarantine)

    assert (result.asked, result.answered, result.unanswered, result.quarantined) == (3, 1, 0, 2)
    lines = quarantine.read_bytes().decode("utf-8").splitlines()  # strict UTF-8: the file is text
    surrogate, wrong_type = (json.loads(line) for line in lines)
    assert surrogate == {
        "qid": "q1",
        "reason": "invalid_trace",
        "field": "answer",
        "error": "a lone surrogate (\\ud800) is not text",
        "raw": {"qid": "q1", "answer": "a\ud800b"},  # read back as the same string
    }
    assert '"answer": "a\\ud800b"' in lines[0]
    assert (wrong_type["qid"], wrong_type["reason"]) == ("q3", "invalid_trace")
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert str(quarantine) in warning.getMessage() and "1 record(s)" in warning.getMessage()

    # The kept trace is written as before (UTF-8, keys sorted) and the run reads it on.
    kept = {"answer": "Lima, café", "qid": "q2", "retrieved_ids": ["c1"]}
    assert out.read_text("utf-8") == json.dumps(kept, ensure_ascii=False, sort_keys=True) + "\n"
    assert load_traces(out).table.column("qid").to_pylist() == ["q2"]


def test_a_replay_with_nothing_to_quarantine_writes_an_empty_quarantine(tmp_path, caplog):
    def answer(qid: str, question: str, reference_date: str | None) -> dict | None:
        return None if qid == "q3" else {"qid": qid, "answer": f"answer to {question}"}

    result = replay(QUESTIONS, answer, out=tmp_path / "a" / "t.jsonl", quarantine=tmp_path / "a" / "q.jsonl")
    assert (result.answered, result.unanswered, result.quarantined) == (2, 1, 0)
    assert len(result.traces_path.read_text().splitlines()) == 2
    assert result.quarantine_path.read_text() == ""
    assert caplog.records == []

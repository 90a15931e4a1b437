"""SUT clients: an HTTP endpoint with urllib3's retries, and a recorded trace file."""

from __future__ import annotations

import json
import time

import pytest

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.sut import HttpSutClient, RecordedSutClient, SutClient
from tests.conftest import Reply

TRACE = {"qid": "q1", "answer": {"claim": "Paris", "citations": ["c1"]}, "retrieved_ids": ["c1", "c2"]}
TOKEN = "Bearer sk-test-0123456789"


def client(server, **kwargs) -> HttpSutClient:
    return HttpSutClient(server.url, backoff=0.01, headers={"Authorization": TOKEN}, **kwargs)


def test_http_answers_a_trace(http_server):
    http_server.script(Reply(200, TRACE, {"Content-Type": "application/json"}))
    sut = client(http_server)
    assert isinstance(sut, SutClient)
    assert sut.answer("q1", "Capital of France?") == TRACE
    (request,) = http_server.requests
    assert (request.method, request.path) == ("POST", "/answer")
    assert request.json() == {"qid": "q1", "question": "Capital of France?"}
    assert request.headers["Authorization"] == TOKEN
    assert sut.describe() == f"{http_server.url}/answer"


def test_http_passes_the_cases_reference_date(http_server):
    http_server.script(Reply(200, TRACE, {"Content-Type": "application/json"}))
    client(http_server).answer("q1", "Revenue last year?", "2026-06-12")
    assert http_server.requests[0].json() == {
        "qid": "q1",
        "question": "Revenue last year?",
        "reference_date": "2026-06-12",
    }


def test_http_answer_without_an_id_gets_the_asked_qid(http_server):
    http_server.script(Reply(200, {"answer": "not in context"}), Reply(200, {"qid": None, "answer": "x"}))
    sut = client(http_server, path="v1/ask")
    assert sut.answer("q7", "?") == {"answer": "not in context", "qid": "q7"}
    assert sut.answer("q8", "?") == {"qid": "q8", "answer": "x"}
    assert http_server.requests[0].path == "/v1/ask"


def test_http_answer_for_another_case_is_an_error(http_server):
    http_server.script(Reply(200, {"qid": "q2", "answer": "x"}))
    with pytest.raises(SourceError, match="asked qid=q1, answered for id=q2"):
        client(http_server).answer("q1", "?")


def test_a_replys_request_id_is_not_the_case_id_unless_mapped(http_server):
    """A service's ``request_id`` / ``id`` names its request: kept, never read as the golden case's id;
    a ``response:`` mapping may say it is (and then it must match)."""
    reply = {"request_id": "45b27393c18c", "id": 7, "answer": "x"}
    http_server.script(Reply(200, reply), Reply(200, reply))
    assert client(http_server).answer("num-003", "?") == {**reply, "qid": "num-003"}
    mapped = client(http_server, response={"qid": "request_id", "answer": "answer"})
    with pytest.raises(SourceError, match="asked qid=num-003, answered for id=45b27393c18c"):
        mapped.answer("num-003", "?")


def test_http_503_then_200_is_retried(http_server):
    http_server.script(Reply(503, "busy"), Reply(200, TRACE))
    assert client(http_server).answer("q1", "?") == TRACE
    assert len(http_server.requests) == 2


def test_http_429_with_retry_after_is_retried(http_server):
    http_server.script(Reply(429, "slow down", {"Retry-After": "0"}), Reply(200, TRACE))
    assert client(http_server).answer("q1", "?") == TRACE
    assert len(http_server.requests) == 2


def test_http_gives_up_after_its_retries(http_server):
    http_server.script(*[Reply(502, "down")] * 3)
    with pytest.raises(SourceError) as info:
        client(http_server, max_retries=2).answer("q1", "?")
    assert str(info.value) == f"{http_server.url}/answer: HTTP 502 Bad Gateway after 2 retries"
    assert len(http_server.requests) == 3


def test_http_client_error_is_not_retried(http_server):
    http_server.script(Reply(404, "no such route"))
    with pytest.raises(SourceError, match=r"HTTP 404 Not Found$"):
        client(http_server).answer("q1", "?")
    assert len(http_server.requests) == 1


@pytest.mark.parametrize("body", ["<html>oops</html>", "[1, 2]", ""])
def test_http_body_that_is_not_a_json_object(http_server, body):
    http_server.script(Reply(200, body))
    with pytest.raises(SourceError, match=r"the answer to qid=q1 is not (JSON|a JSON object)$"):
        client(http_server).answer("q1", "?")


def test_http_unreachable_is_one_line_without_headers(closed_port):
    sut = HttpSutClient(
        f"http://user:pw@127.0.0.1:{closed_port}/?key=secret",
        path="/answer",
        max_retries=1,
        backoff=0.01,
        timeout=1,
        headers={"Authorization": TOKEN},
    )
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        sut.answer("q1", "?")
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert message.startswith(f"http://127.0.0.1:{closed_port}/")
    assert "cannot connect (after 1 retries)" in message
    assert "\n" not in message
    for secret in (TOKEN, "pw", "secret"):
        assert secret not in message


def test_http_read_timeout(http_server):
    http_server.script(Reply(200, TRACE, delay=0.5), Reply(200, TRACE, delay=0.5))
    with pytest.raises(SourceError, match=r"/answer: no answer within 0.2 s \(after 1 retries\)$"):
        client(http_server, timeout=0.2, max_retries=1).answer("q1", "?")
    assert len(http_server.requests) == 2


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_recorded_answers_by_qid_and_by_question(tmp_path):
    rows = [
        {"request_id": "q1", "answer": "first"},
        {"case_id": "q2", "answer_json": {"claim": "two", "citations": ["c2"]}},
        {"question": "What is asked without an id?", "answer": "by text"},
        {"request_id": "q1", "answer": "last wins"},
    ]
    sut = RecordedSutClient(write_jsonl(tmp_path / "recorded.jsonl", rows))
    assert isinstance(sut, SutClient)
    assert sut.answer("q1", "anything") == {"request_id": "q1", "answer": "last wins"}
    assert sut.answer("q2", "anything") == rows[1]
    assert sut.answer("q9", "What is asked without an id?") == {**rows[2], "qid": "q9"}
    assert sut.answer("q10", "Unknown question") is None
    answer = sut.answer("q2", "")
    answer["answer_json"]["citations"].append("mutated")
    assert sut.answer("q2", "") == rows[1]  # answers are copies


def test_recorded_malformed_file_raises_the_loader_error(tmp_path):
    path = write_jsonl(tmp_path / "recorded.jsonl", [{"qid": "q1"}, {"qid": "q2", "retrieved_ids": "c1"}])
    with pytest.raises(InputError) as info:
        RecordedSutClient(path)
    assert (info.value.file, info.value.line, info.value.record_id, info.value.field) == (
        str(path),
        2,
        "q2",
        "retrieved_ids",
    )
    with pytest.raises(InputError, match="file not found"):
        RecordedSutClient(tmp_path / "absent.jsonl")

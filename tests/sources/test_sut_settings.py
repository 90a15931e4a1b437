"""A SUT declared by its settings: an HTTP service of any JSON shape behind a token, a Python function,
a recorded file; asked over real loopback HTTP (tests/fake_rag_service.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.sut import (
    HttpSut,
    PythonSut,
    RateLimit,
    RecordedSut,
    load_sut_settings,
    render_body,
)
from tests.fake_rag_service import NESTED_MAPPING, FakeRagService

ROOT = Path(__file__).resolve().parents[2]
TRACES = {
    json.loads(line)["qid"]: json.loads(line)
    for line in (ROOT / "examples/wfgy/traces.jsonl").read_text().splitlines()
}
TOKEN = "tok-5c1d9e0f2a7b"


def test_a_nested_reply_behind_a_bearer_token_is_mapped_to_a_trace():
    with FakeRagService(TRACES, shape="nested", token=TOKEN, path="/v2/ask") as service:
        settings = HttpSut(
            url=service.url,
            headers={"Authorization": "Bearer ${SUPPORT_BOT_TOKEN}"},
            body={"id": "{qid}", "input": {"text": "{question}"}, "channel": "eval-{qid}", "top_k": 5},
            response=NESTED_MAPPING,
        )
        client = settings.client(env={"SUPPORT_BOT_TOKEN": TOKEN})
        trace = client.answer("HR-001", "How many days of paid parental leave?", None)
        assert trace == {
            "qid": "HR-001",
            "answer_json": TRACES["HR-001"]["answer_json"],
            "retrieved_ids": TRACES["HR-001"]["retrieved_ids"],
        }  # the reply's null index version is left out
        assert service.bodies == [
            {
                "id": "HR-001",
                "input": {"text": "How many days of paid parental leave?"},
                "channel": "eval-HR-001",
                "top_k": 5,
            }
        ]
        assert TOKEN not in client.describe() and TOKEN not in settings.model_dump_json()


def test_a_wrong_token_is_a_one_line_error_without_the_token():
    with FakeRagService(TRACES, token=TOKEN) as service:
        client = HttpSut(url=service.url, headers={"Authorization": "Bearer ${T}"}).client(env={"T": "wrong"})
        with pytest.raises(SourceError) as info:
            client.answer("HR-001", "?")
    assert str(info.value) == f"{service.url}: HTTP 401 Unauthorized"
    assert service.unauthorised == 1


def test_a_header_naming_an_unset_variable_is_one_line_naming_both():
    settings = HttpSut(url="http://127.0.0.1:9/answer", headers={"X-Api-Key": "${SUPPORT_BOT_KEY}"})
    with pytest.raises(InputError, match="header 'X-Api-Key' needs the environment variable SUPPORT_BOT_KEY"):
        settings.client(env={})


def test_the_identity_of_a_sut_is_every_setting_its_answers_depend_on_never_a_secret():
    """Headers count as written: a rotated token (the same ``${TOKEN}``) is the same service, another
    model header is another; transport settings and the release are not part of the identity."""
    headers = {"Authorization": "Bearer ${TOKEN}", "X-Model": "a"}
    one = HttpSut(url="http://svc/answer", headers=headers, concurrency=4)
    same = HttpSut(url="http://svc/answer", headers=headers, timeout_s=3, retries=0, release="r9")
    assert one.identity() == same.identity()
    for changed in (
        {"headers": {**headers, "X-Model": "b"}},
        {"body": {"q": "{question}"}},
        {"response": {"answer": "data.reply"}},
        {"method": "PUT"},
        {"url": "http://svc/v2/answer"},
    ):
        assert (
            HttpSut(**{"url": "http://svc/answer", "headers": headers, **changed}).identity()
            != one.identity()
        )
    assert PythonSut(function="a:b").identity() != PythonSut(function="a:c").identity()
    assert PythonSut(function="a:b", release="r1").identity() == PythonSut(function="a:b").identity()


def test_a_recorded_file_replaced_at_the_same_path_is_another_sut(tmp_path):
    path = tmp_path / "recorded.jsonl"
    path.write_text(json.dumps(TRACES["HR-003"]) + "\n")
    before = RecordedSut(path=str(path)).identity()
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    assert RecordedSut(path=str(copy)).identity() == before  # the content, not the path
    path.write_text(json.dumps({**TRACES["HR-003"], "answer": "changed"}) + "\n")
    assert RecordedSut(path=str(path)).identity() != before
    with pytest.raises(InputError, match="cannot read the recorded traces"):
        RecordedSut(path=str(tmp_path / "gone.jsonl")).identity()


def test_a_release_is_expanded_from_the_environment_as_headers_are():
    settings = PythonSut(function="a:b", release="${GIT_COMMIT}-img")
    assert settings.release_identity({"GIT_COMMIT": "3f9a1c2"}) == "3f9a1c2-img"
    assert PythonSut(function="a:b").release_identity({}) is None
    with pytest.raises(InputError) as info:
        settings.release_identity({})
    assert (
        str(info.value)
        == "SUT settings: release '${GIT_COMMIT}-img' needs the environment variable GIT_COMMIT"
    )
    with pytest.raises(InputError, match="is empty"):
        PythonSut(function="a:b", release="${TAG}").release_identity({"TAG": " "})


def test_the_body_template_keeps_types_and_leaves_out_a_missing_reference_date():
    template = {
        "qid": "{qid}",
        "when": "{reference_date}",
        "text": "Q: {question} ({reference_date})",
        "n": [1],
    }
    assert render_body(template, "q1", "Why?", None) == {"qid": "q1", "text": "Q: Why? ()", "n": [1]}
    assert render_body(template, "q1", "Why?", "2026-01-31")["when"] == "2026-01-31"


def test_a_get_service_takes_the_body_as_query_parameters():
    with FakeRagService(TRACES) as service:
        client = HttpSut(url=service.url, method="GET", body={"qid": "{qid}", "q": "{question}"}).client()
        assert client.answer("HR-002", "Carry over & keep?")["qid"] == "HR-002"
    assert service.bodies == [{"qid": "HR-002", "q": "Carry over & keep?"}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: http\nurl: ftp://x/y\n", "not an http(s) URL"),
        (
            "kind: http\nurl: http://x/y\nresponse: {answer: 'data.[reply'}\n",
            "response.answer: not a JMESPath",
        ),
        ("kind: http\nurl: http://x/y\ntoken: abc\n", "Extra inputs are not permitted"),
        ("kind: grpc\n", "does not match any of the expected tags"),
        ("kind: python\nfunction: no_colon\n", "not module:function"),
    ],
)
def test_a_malformed_sut_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "sut.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_sut_settings(path)
    assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def answer_from_a_chain(case: dict) -> dict | None:
    """What a user's wrapper around a LangChain/LlamaIndex chain looks like."""
    if case["qid"] == "none":
        return None
    if case["qid"] == "boom":
        raise RuntimeError("the vector store is down\nsecond line")
    return {"answer": f"echo {case['question']}", "retrieved_ids": ["c1"]}


def test_a_python_function_answers_in_process():
    client = PythonSut(function=f"{__name__}:answer_from_a_chain").client()
    assert client.answer("q1", "hi") == {"qid": "q1", "answer": "echo hi", "retrieved_ids": ["c1"]}
    assert client.answer("none", "hi") is None
    with pytest.raises(SourceError, match=r"qid=boom: RuntimeError: the vector store is down$"):
        client.answer("boom", "hi")
    with pytest.raises(InputError, match="has no function nothing_here"):
        PythonSut(function=f"{__name__}:nothing_here").client()


def test_a_recorded_file_answers_from_its_traces():
    client = RecordedSut(path=str(ROOT / "examples/wfgy/traces.jsonl")).client()
    assert client.answer("HR-003", "?")["answer_json"] == TRACES["HR-003"]["answer_json"]


def test_a_rate_limit_spaces_the_starts_across_threads():
    limit = RateLimit(50)
    started = time.monotonic()
    for _ in range(11):
        limit.wait()
    assert time.monotonic() - started >= 10 / 50 - 0.005  # ten intervals at least, never a burst

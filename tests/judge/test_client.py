"""JudgeClient against the fake OpenAI-compatible server, over real HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import socket
import threading
import time

import pytest

from ragspine_pipeline.judge.client import (
    Budget,
    BudgetStop,
    ChatRequest,
    JudgeClient,
    JudgeEndpoint,
    env_number,
    estimated_tokens,
)
from tests.judge.fake_judge import DEFAULT_REPLY, FakeJudge, FakeReply

SECRET = "sk-test-SECRET-0123456789"


def endpoint(url: str, **kwargs) -> JudgeEndpoint:
    kwargs.setdefault("timeout_s", 5.0)
    kwargs.setdefault("max_retries", 2)
    return JudgeEndpoint(base_url=url, models=("judge-a",), **kwargs)


def reqs(n: int, content: str = "x" * 40, model: str = "judge-a") -> list[ChatRequest]:
    return [
        ChatRequest(key=f"k{i}", model=model, messages=({"role": "user", "content": f"{content}{i:03d}"},))
        for i in range(n)
    ]


def test_replies_in_request_order_under_concurrency(fake_judge: FakeJudge) -> None:
    def echo_slowly(request_json: dict) -> str:
        time.sleep(random.uniform(0, 0.03))
        return "echo:" + request_json["messages"][0]["content"]

    fake_judge.reply_for = echo_slowly
    requests = reqs(40, content="q")
    results = JudgeClient(endpoint(fake_judge.url, concurrency=8)).complete_all(requests)
    assert [r.key for r in results] == [q.key for q in requests]
    assert [r.text for r in results] == [f"echo:q{i:03d}" for i in range(40)]
    assert {(r.status, r.attempts, r.model) for r in results} == {("ok", 1, "judge-a")}
    assert fake_judge.requests[0]["model"] == "judge-a"
    assert fake_judge.requests[0]["max_tokens"] == 256 and fake_judge.requests[0]["temperature"] == 0.0


@pytest.mark.parametrize("concurrency", [1, 4])
def test_concurrency_bound(fake_judge: FakeJudge, concurrency: int) -> None:
    fake_judge.latency_s = 0.05
    results = JudgeClient(endpoint(fake_judge.url, concurrency=concurrency)).complete_all(reqs(16))
    assert all(r.status == "ok" for r in results)
    assert fake_judge.max_in_flight <= concurrency
    if concurrency > 1:
        assert fake_judge.max_in_flight > 1


def test_429_then_success_is_retried(fake_judge: FakeJudge) -> None:
    fake_judge.script(FakeReply(429, headers={"retry-after-ms": "10"}))
    [result] = JudgeClient(endpoint(fake_judge.url)).complete_all(reqs(1))
    assert (result.status, result.attempts, result.text) == ("ok", 2, DEFAULT_REPLY)
    assert len(fake_judge.requests) == 2


def test_500_until_retries_exhausted(fake_judge: FakeJudge) -> None:
    fake_judge.script(*[FakeReply(500, headers={"retry-after-ms": "1"})] * 3)
    client = JudgeClient(endpoint(fake_judge.url, max_retries=2, api_key=SECRET))
    [result] = client.complete_all(reqs(1))
    assert (result.status, result.attempts, result.text) == ("error", 3, None)
    assert result.error.startswith("HTTP 500 after 3 attempts: ") and "\n" not in result.error
    assert SECRET not in result.error
    assert len(fake_judge.requests) == 3
    assert client.usage["errors"] == 1 and client.usage["calls"] == 1


def test_non_retryable_status_is_one_attempt(fake_judge: FakeJudge) -> None:
    fake_judge.script(FakeReply(400))
    [result] = JudgeClient(endpoint(fake_judge.url)).complete_all(reqs(1))
    assert (result.status, result.attempts) == ("error", 1)
    assert result.error.startswith("HTTP 400 after 1 attempt: fake judge error 400")


def test_closed_port_is_unreachable_quickly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = JudgeClient(endpoint(f"http://127.0.0.1:{port}/v1", timeout_s=2.0, max_retries=1))
    start = time.perf_counter()
    results = client.complete_all(reqs(3))
    assert time.perf_counter() - start < 5
    assert {(r.status, r.attempts, r.error) for r in results} == {
        ("unreachable", 2, "connection refused after 2 attempts")
    }
    assert client.usage["unreachable"] == 3 and client.usage["calls"] == 3


def test_timeout_is_an_error(fake_judge: FakeJudge) -> None:
    fake_judge.script(FakeReply(delay=5.0))
    [result] = JudgeClient(endpoint(fake_judge.url, timeout_s=0.2, max_retries=0)).complete_all(reqs(1))
    assert (result.status, result.attempts) == ("error", 1)
    # The call gave up long before the reply (5 s) would have come: the timeout fired, not the server.
    assert "timed out" in result.error and result.latency_s < 3


def test_malformed_replies(fake_judge: FakeJudge) -> None:
    fake_judge.script(
        FakeReply(body=b"{this is not json"),
        FakeReply(body=b'{"object": "chat.completion", "choices": []}'),
        FakeReply(content="not json at all"),  # the judge's reply is text; parsing it is the caller's job
    )
    results = JudgeClient(endpoint(fake_judge.url, concurrency=1)).complete_all(reqs(3))
    assert [r.status for r in results] == ["error", "error", "ok"]
    assert results[0].error.startswith("unparseable response body")
    assert results[1].error.startswith("unparseable response body")
    assert results[2].text == "not json at all"


def test_budget_by_calls_stops_cleanly(fake_judge: FakeJudge) -> None:
    client = JudgeClient(endpoint(fake_judge.url, concurrency=1), Budget(max_calls=3))
    results = client.complete_all(reqs(5))
    assert [r.status for r in results] == ["ok"] * 3 + ["budget"] * 2
    assert all(r.attempts == 0 and r.latency_s == 0 and r.text is None for r in results[3:])
    assert len(fake_judge.requests) == 3
    usage = client.usage
    assert (usage["calls"], usage["ok"], usage["budget_skipped"], usage["budget_exhausted"]) == (
        3,
        3,
        2,
        True,
    )
    # the budget accumulates across complete_all calls
    assert [r.status for r in client.complete_all(reqs(2))] == ["budget", "budget"]
    assert len(fake_judge.requests) == 3 and client.usage["budget_skipped"] == 4


def test_budget_by_tokens_is_checked_on_the_estimate_before_sending(fake_judge: FakeJudge) -> None:
    # Each call: 43 bytes of prompt -> estimate 15 + 8 per message + 10 completion = 33 tokens; the fake
    # judge reports 10 prompt + 8 completion = 18 tokens used. Budget 100: sent while 33 fits in what is
    # left (100, 82, 64, 46), then 28 left < 33: not sent. Never over the budget.
    client = JudgeClient(endpoint(fake_judge.url, concurrency=1), Budget(max_tokens=100))
    requests = [dataclasses.replace(r, max_tokens=10) for r in reqs(6)]
    assert estimated_tokens(requests[0]) == 33
    results = client.complete_all(requests)
    assert [r.status for r in results] == ["ok"] * 4 + ["budget"] * 2
    assert results[4].error == "token budget: estimated 33 tokens > 28 left of 100, not sent"
    assert results[5].error == "not sent: the token budget stopped judging at an earlier call"
    assert client.stopped == BudgetStop("k4", "judge-a", "tokens", estimate=33, left=28, limit=100)
    usage = client.usage
    assert usage["prompt_tokens"] + usage["completion_tokens"] == 72 and usage["calls"] == 4
    assert len(fake_judge.requests) == 4


def test_the_first_refusal_stops_the_client_even_for_calls_that_would_fit(fake_judge: FakeJudge) -> None:
    # Skipping the long case and judging the short ones after it would leave only short answers judged,
    # and every mean would lean towards them: once a call is refused, nothing more is sent.
    client = JudgeClient(endpoint(fake_judge.url, concurrency=1), Budget(max_tokens=1000))
    small, huge, later = reqs(1)[0], reqs(1, content="x" * 30_000)[0], reqs(1, content="y")[0]
    huge, later = dataclasses.replace(huge, key="huge"), dataclasses.replace(later, key="later")
    assert estimated_tokens(small) + estimated_tokens(later) < 1000 < estimated_tokens(huge)
    assert [r.status for r in client.complete_all([small, huge, later])] == ["ok", "budget", "budget"]
    assert [r["messages"][0]["content"] for r in fake_judge.requests] == [small.messages[0]["content"]]
    assert [r.status for r in client.complete_all([later])] == ["budget"]  # stopped for good
    assert client.stopped is not None and client.stopped.key == "huge" and client.usage["budget_exhausted"]


def test_a_spent_call_budget_stops_the_client_at_the_first_call_it_refuses(fake_judge: FakeJudge) -> None:
    client = JudgeClient(endpoint(fake_judge.url, concurrency=1), Budget(max_calls=1))
    requests = reqs(3)
    assert [r.status for r in client.complete_all(requests)] == ["ok", "budget", "budget"]
    estimate = estimated_tokens(requests[1])
    assert client.stopped == BudgetStop("k1", "judge-a", "calls", estimate=estimate, left=0, limit=1)


def test_a_request_larger_than_the_whole_token_budget_is_never_sent(fake_judge: FakeJudge) -> None:
    client = JudgeClient(endpoint(fake_judge.url, concurrency=4), Budget(max_tokens=1000))
    results = client.complete_all(reqs(3, content="x" * 20_000_000))  # 20 MB of prompt each
    assert [r.status for r in results] == ["budget"] * 3 and fake_judge.requests == []
    assert "estimated 6666932 tokens > 1000 left" in results[0].error  # ceil(20000003 / 3) + 8 + 256


def test_concurrent_calls_cannot_overshoot_the_token_budget(fake_judge: FakeJudge) -> None:
    fake_judge.latency_s = 0.05
    client = JudgeClient(endpoint(fake_judge.url, concurrency=8), Budget(max_tokens=100))
    results = client.complete_all([dataclasses.replace(r, max_tokens=10) for r in reqs(8)])
    # In flight together, each reserves its 33-token estimate: 3 fit in 100, the rest are not sent.
    assert sum(r.status == "ok" for r in results) == 3
    usage = client.usage
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 100


def test_token_and_latency_accounting(fake_judge: FakeJudge) -> None:
    fake_judge.latency_s = 0.05
    client = JudgeClient(endpoint(fake_judge.url, concurrency=4))
    fresh = client.usage
    assert fresh["calls"] == 0 and fresh["latency_s_p50"] is None and fresh["budget_exhausted"] is False
    results = client.complete_all(reqs(8))
    assert {(r.prompt_tokens, r.completion_tokens) for r in results} == {(43 // 4, len(DEFAULT_REPLY) // 4)}
    assert all(r.latency_s >= 0.05 for r in results)
    client.complete_all(reqs(2))  # accounting accumulates
    usage = client.usage
    assert (usage["calls"], usage["ok"], usage["errors"], usage["unreachable"]) == (10, 10, 0, 0)
    assert usage["prompt_tokens"] == 10 * 10 and usage["completion_tokens"] == 10 * 8
    assert usage["latency_s_total"] >= 10 * 0.05
    assert 0.05 <= usage["latency_s_p50"] <= usage["latency_s_p95"] < 2


def test_works_without_a_loop_in_a_thread_and_inside_a_running_loop(fake_judge: FakeJudge) -> None:
    client = JudgeClient(endpoint(fake_judge.url))
    out: list = []
    worker = threading.Thread(target=lambda: out.append(client.complete_all(reqs(3))))
    worker.start()
    worker.join(timeout=30)
    assert [r.status for r in out[0]] == ["ok"] * 3

    async def from_async_code() -> list:
        return client.complete_all(reqs(2))

    assert [r.status for r in asyncio.run(from_async_code())] == ["ok"] * 2
    assert [r.status for r in client.complete_all(reqs(2))] == ["ok"] * 2
    assert client.usage["calls"] == 7 and client.complete_all([]) == []


def test_from_env() -> None:
    assert JudgeEndpoint.from_env({}) is None
    assert JudgeEndpoint.from_env({"RAGSPINE_JUDGE_BASE_URL": "http://h/v1"}) is None
    assert JudgeEndpoint.from_env({"RAGSPINE_JUDGE_MODEL": "m"}) is None
    assert JudgeEndpoint.from_env({"RAGSPINE_JUDGE_BASE_URL": " ", "RAGSPINE_JUDGE_MODEL": "m"}) is None
    assert (
        JudgeEndpoint.from_env({"RAGSPINE_JUDGE_BASE_URL": "http://h/v1", "RAGSPINE_JUDGE_MODEL": " , "})
        is None
    )
    ep = JudgeEndpoint.from_env({"RAGSPINE_JUDGE_BASE_URL": "http://h/v1", "RAGSPINE_JUDGE_MODEL": "m"})
    assert ep == JudgeEndpoint("http://h/v1", ("m",))
    ep = JudgeEndpoint.from_env(
        {
            "RAGSPINE_JUDGE_BASE_URL": "http://h/v1",
            "RAGSPINE_JUDGE_MODEL": "m1, m2,m3",
            "RAGSPINE_JUDGE_API_KEY": SECRET,
            "RAGSPINE_JUDGE_CONCURRENCY": "3",
            "RAGSPINE_JUDGE_TIMEOUT": "2.5",
            "RAGSPINE_JUDGE_MAX_RETRIES": "0",
        }
    )
    assert ep == JudgeEndpoint("http://h/v1", ("m1", "m2", "m3"), SECRET, 2.5, 0, 3)
    assert SECRET not in repr(ep)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RAGSPINE_JUDGE_CONCURRENCY", "many"),
        ("RAGSPINE_JUDGE_CONCURRENCY", "0"),
        ("RAGSPINE_JUDGE_TIMEOUT", "1s"),
        ("RAGSPINE_JUDGE_TIMEOUT", "-1"),
        ("RAGSPINE_JUDGE_MAX_RETRIES", "2.5"),
    ],
)
def test_from_env_bad_number_names_the_variable(name: str, value: str) -> None:
    env = {"RAGSPINE_JUDGE_BASE_URL": "http://h/v1", "RAGSPINE_JUDGE_MODEL": "m", name: value}
    with pytest.raises(ValueError, match=name) as info:
        JudgeEndpoint.from_env(env)
    assert value not in str(info.value)


def test_api_key_is_sent_but_never_shown(fake_judge: FakeJudge, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    leaky = f'{{"error": {{"message": "invalid key {SECRET}"}}}}'.encode()
    fake_judge.script(FakeReply(401, body=leaky), FakeReply(500, headers={"retry-after-ms": "1"}))
    ep = endpoint(fake_judge.url, api_key=SECRET, concurrency=1, max_retries=1)
    client = JudgeClient(ep, Budget(max_calls=3))
    results = client.complete_all(reqs(4))
    assert [r.status for r in results] == ["error", "ok", "ok", "budget"]
    assert results[0].error == "HTTP 401 after 1 attempt: invalid key ***"
    assert fake_judge.authorizations == [f"Bearer {SECRET}"] * 4  # 401, 500 + its retry, ok
    shown = [repr(ep), str(ep), repr(client), repr(results), str(client.usage), caplog.text]
    assert not [text for text in shown if SECRET in text]


def test_without_a_key_a_placeholder_is_sent(fake_judge: FakeJudge) -> None:
    [result] = JudgeClient(endpoint(fake_judge.url)).complete_all(reqs(1))
    assert result.status == "ok"
    assert fake_judge.authorizations[0].startswith("Bearer ") and len(fake_judge.authorizations[0]) > 7


def test_env_number_reads_a_bounded_number_and_names_only_the_variable() -> None:
    assert env_number("RAGSPINE_JUDGE_MAX_TOKENS", environ={}) is None
    assert env_number("RAGSPINE_JUDGE_MAX_TOKENS", environ={"RAGSPINE_JUDGE_MAX_TOKENS": " 500 "}) == 500
    for raw, message in (
        ("lots", "must be an integer"),
        ("0", "must be >= 1"),
        (SECRET, "must be an integer"),
    ):
        with pytest.raises(ValueError, match=f"RAGSPINE_JUDGE_MAX_TOKENS {message}") as info:
            env_number("RAGSPINE_JUDGE_MAX_TOKENS", environ={"RAGSPINE_JUDGE_MAX_TOKENS": raw})
        assert raw not in str(info.value)

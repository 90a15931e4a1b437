"""Judging runs against a loopback OpenAI-compatible server: repeats, ensembles, budget, cache, faults."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter

import pytest

from ragspine_pipeline.judge.cache import LocalJudgmentCache
from ragspine_pipeline.judge.client import Budget, ChatRequest, JudgeClient, JudgeEndpoint, estimated_tokens
from ragspine_pipeline.judge.prompts import (
    DEFAULT_MAX_INPUT_CHARS,
    STRICT_REMINDER,
    JudgeItem,
    build_messages,
    metric_inputs,
    truncate_inputs,
)
from ragspine_pipeline.judge.report import judge_report, judged_metrics
from ragspine_pipeline.judge.run import COMBINED, JudgeSettings, run_judge
from tests.judge.fake_judge import DEFAULT_REPLY, FakeReply

FIXED_PROMPT_BYTES = 3000  # the system prompt (< 1 KB), section titles, passage labels, the JSON envelope


def items(n: int = 6) -> list[JudgeItem]:
    return [
        JudgeItem(
            f"q{i}",
            question=f"Question {i}?",
            answer=f"Answer {i}." + (" BAD" if i % 3 == 0 else ""),
            context=(f"Context for answer {i}.",),
            reference=(f"fact {i}",) if i % 2 == 0 else (),
        )
        for i in range(n)
    ]


def scored(by_model: dict[str, int] | None = None, bad: int = 2):
    """A judge that scores ``bad`` when the answer says BAD, else the model's score (default 4)."""

    def reply(request: dict) -> str:
        text = request["messages"][1]["content"]
        score = bad if "BAD" in text else (by_model or {}).get(request["model"], 4)
        return json.dumps({"score": score, "reason": f"{request['model']} says {score}"})

    return reply


def client(fake, models=("judge-a",), **budget) -> JudgeClient:
    endpoint = JudgeEndpoint(fake.url, tuple(models), api_key="sk-test-secret", max_retries=1, timeout_s=5)
    return JudgeClient(endpoint, Budget(**budget))


def by(run, metric, model=COMBINED):
    return {j.qid: j for j in run.judgments if j.metric == metric and j.model == model}


def test_scores_repeats_median_and_not_applicable(fake_judge):
    asked = Counter()  # per prompt, the repeats answer 2, 5, 4 in turn (whatever order requests arrive in)
    lock = threading.Lock()

    def reply(request: dict) -> str:
        with lock:
            turn = asked[request["messages"][1]["content"]]
            asked[request["messages"][1]["content"]] += 1
        return json.dumps({"score": (2, 5, 4)[turn % 3], "reason": "ok"})

    fake_judge.reply_for = reply
    run = run_judge(items(2), JudgeSettings(metrics=("faithfulness",), repeat=3), client(fake_judge))
    judged = by(run, "faithfulness", "judge-a")
    for judgment in judged.values():
        assert sorted(judgment.repeats) == [2, 4, 5] and judgment.score == 4.0 and judgment.passed
    assert len(fake_judge.requests) == 6

    run = run_judge(items(4), JudgeSettings(metrics=("context_recall",)), client(fake_judge))
    recall = by(run, "context_recall")
    assert {q: j.applicable for q, j in recall.items()} == {"q0": True, "q1": False, "q2": True, "q3": False}
    assert recall["q1"].score is None and recall["q1"].error is None  # not applicable is not an error
    assert run.summary["context_recall"]["not_applicable"] == 2


def test_an_ensemble_is_reported_per_model_and_combined(fake_judge):
    fake_judge.reply_for = scored({"judge-a": 5, "judge-b": 3})
    run = run_judge(
        items(6), JudgeSettings(metrics=("faithfulness",)), client(fake_judge, ("judge-a", "judge-b"))
    )
    summary = run.summary["faithfulness"]
    # q0 and q3 say BAD: both models give 2. The others: 5 and 3, combined 4.
    assert summary["models"]["judge-a"]["mean"] == pytest.approx((4 * 5 + 2 * 2) / 6, abs=1e-4)
    assert summary["models"]["judge-b"]["mean"] == pytest.approx((4 * 3 + 2 * 2) / 6, abs=1e-4)
    assert summary[COMBINED]["mean"] == pytest.approx((4 * 4 + 2 * 2) / 6, abs=1e-4)
    assert summary[COMBINED]["pass_rate"] == pytest.approx(4 / 6, abs=1e-4)
    low, high = summary[COMBINED]["mean_ci"]
    assert low <= summary[COMBINED]["mean"] <= high
    assert judged_metrics(run)["judge_faithfulness"] == summary[COMBINED]["mean"]


def test_unparseable_output_is_retried_strictly_then_counted_never_scored(fake_judge):
    fake_judge.script(FakeReply(content="I would say 4 out of 5."), FakeReply(content="Definitely a 4!"))
    fake_judge.reply_for = scored()
    run = run_judge(items(1), JudgeSettings(metrics=("faithfulness",)), client(fake_judge))
    (judgment,) = by(run, "faithfulness", "judge-a").values()
    assert judgment.score is None and judgment.error.startswith(
        "unparseable judge output after a strict retry"
    )
    assert fake_judge.requests[1]["messages"][-1]["content"] == STRICT_REMINDER
    assert fake_judge.requests[1]["messages"][-2] == {
        "role": "assistant",
        "content": "I would say 4 out of 5.",
    }
    summary = run.summary["faithfulness"]
    assert summary["errors"] == {"unparseable": 1} and summary[COMBINED]["n"] == 0
    assert summary[COMBINED]["excluded"] == 1 and summary[COMBINED]["mean"] is None

    fake_judge.script(FakeReply(content="not json"))  # the strict retry succeeds
    run = run_judge(items(1), JudgeSettings(metrics=("faithfulness",)), client(fake_judge))
    assert by(run, "faithfulness")["q0"].score == 2.0 and run.summary["faithfulness"]["errors"] == {}


def test_http_errors_and_rate_limits(fake_judge):
    fake_judge.reply_for = scored()
    fake_judge.script(FakeReply(429, headers={"retry-after-ms": "5"}), *[FakeReply(500)] * 2)
    run = run_judge(items(2), JudgeSettings(metrics=("answer_relevancy",)), client(fake_judge))
    judged = by(run, "answer_relevancy", "judge-a")
    # one call got 429 then an answer; the other 500 twice (max_retries=1): an error, counted
    assert sorted(j.error is None for j in judged.values()) == [False, True]
    assert run.summary["answer_relevancy"]["errors"] == {"error": 1}
    assert run.failed is None
    assert run.counts == {
        "applicable": 2,
        "not_applicable": 0,
        "scored": 1,
        "failed": 1,
        "errors": {"error": 1},
    }
    assert run.nothing_judged is None  # one failure of two is counted, not a run that judged nothing


def test_an_unreachable_endpoint_fails_the_run_with_the_reason(closed_port):
    endpoint = JudgeEndpoint(f"http://127.0.0.1:{closed_port}/v1", ("judge-a",), max_retries=0, timeout_s=2)
    run = run_judge(items(2), JudgeSettings(), JudgeClient(endpoint))
    assert run.failed is not None and "connection refused" in run.failed
    assert all(j.score is None for j in run.judgments)


def test_the_budget_stops_judging_cleanly(fake_judge):
    fake_judge.reply_for = scored()
    endpoint = JudgeEndpoint(fake_judge.url, ("judge-a",), concurrency=1)
    run = run_judge(
        items(6), JudgeSettings(metrics=("faithfulness",)), JudgeClient(endpoint, Budget(max_calls=4))
    )
    judged = by(run, "faithfulness", "judge-a")
    assert sum(j.score is not None for j in judged.values()) == 4 and len(fake_judge.requests) == 4
    assert run.summary["faithfulness"]["errors"] == {"budget": 2} and run.usage["budget_exhausted"]
    assert run.failed is None


def test_unchanged_answers_are_served_from_the_cache(fake_judge, tmp_path):
    fake_judge.reply_for = scored()
    cache = LocalJudgmentCache(tmp_path / "cache")
    settings = JudgeSettings(repeat=2)
    first = run_judge(items(4), settings, client(fake_judge), cache)
    calls = len(fake_judge.requests)
    assert calls == 2 * (4 + 4 + 2) and first.cache == {"hits": 0, "misses": 10}

    again = run_judge(items(4), settings, client(fake_judge), cache)
    assert len(fake_judge.requests) == calls and again.cache == {"hits": 10, "misses": 0}
    assert [j.score for j in again.judgments] == [j.score for j in first.judgments]
    assert all(j.cached for j in again.judgments if j.applicable and j.model != COMBINED)

    changed = items(4)
    changed[1] = JudgeItem(
        "q1", question="Question 1?", answer="A different answer.", context=("Context for answer 1.",)
    )
    run_judge(changed, settings, client(fake_judge), cache)
    # q1's faithfulness and relevancy changed (q1 has no reference): 2 judgments x 2 repeats
    assert len(fake_judge.requests) == calls + 4

    more = run_judge(items(4), JudgeSettings(repeat=3), client(fake_judge), cache)  # one more repeat each
    assert len(fake_judge.requests) == calls + 4 + 10 and more.cache["hits"] == 10


def test_errors_are_not_cached(fake_judge, tmp_path):
    cache = LocalJudgmentCache(tmp_path / "cache")
    fake_judge.script(*[FakeReply(500)] * 2)
    fake_judge.reply_for = scored()
    run_judge(items(1), JudgeSettings(metrics=("faithfulness",)), client(fake_judge), cache)
    run = run_judge(items(1), JudgeSettings(metrics=("faithfulness",)), client(fake_judge), cache)
    assert by(run, "faithfulness")["q0"].score == 2.0 and run.cache == {"hits": 0, "misses": 1}


def test_the_report_carries_no_secret_and_no_nan(fake_judge):
    fake_judge.reply_for = scored()
    fake_judge.script(
        FakeReply(500, body=b'{"error": {"message": "bad key sk-test-secret"}}'), FakeReply(500)
    )
    run = run_judge(items(3), JudgeSettings(), client(fake_judge))
    text = json.dumps(judge_report(run, tags={"q0": [("topic", "a")]}), allow_nan=False)
    assert "sk-test-secret" not in text and re.search(r"\bNaN\b", text) is None


def test_a_huge_input_is_cut_before_it_is_sent_and_every_cut_is_listed(fake_judge):
    fake_judge.reply_for = scored()
    huge_question = "why? " * 400_000  # 2,000,000 characters
    many_passages = tuple(f"passage {i:05d} " + "x" * 86 for i in range(50_000))  # 5,000,000 characters
    cases = [
        JudgeItem("big-question", question=huge_question, answer="Because.", context=("A context.",)),
        JudgeItem("many-passages", question="Why?", answer="Because.", context=many_passages),
    ]
    settings = JudgeSettings(metrics=("answer_relevancy", "faithfulness"))
    run = run_judge(cases, settings, client(fake_judge))

    assert len(fake_judge.body_sizes) == 4  # every judgment was asked, none with more than its cut inputs
    assert max(fake_judge.body_sizes) < DEFAULT_MAX_INPUT_CHARS + FIXED_PROMPT_BYTES
    shown = [r["messages"][1]["content"] for r in fake_judge.requests]
    assert sum("[… 1992000 more characters not shown to the judge]" in text for text in shown) == 1
    assert sum("[… 49920 more passages not shown to the judge]" in text for text in shown) == 1
    assert run.truncated == [
        {
            "qid": "big-question",
            "metric": "answer_relevancy",
            "field": "question",
            "chars": 2_000_000,
            "kept": 8000,
        },
        {
            "qid": "many-passages",
            "metric": "faithfulness",
            "field": "context",
            "chars": 5_000_000,
            "kept": 8000,
        },
    ]
    assert judge_report(run)["truncated"] == run.truncated
    assert all(j.score is not None for j in run.judgments if j.applicable)


def test_the_token_budget_stops_at_the_first_call_that_does_not_fit(fake_judge):
    fake_judge.reply_for = scored()
    cases = [JudgeItem(f"q{i}", question=f"Question {i}?", answer=f"Answer {i}.") for i in range(5)]
    cases[2] = JudgeItem("q2", question="Question 2?", answer="A long answer. " * 1000)
    settings = JudgeSettings(metrics=("answer_relevancy",))
    shown = [truncate_inputs(metric_inputs("answer_relevancy", c), DEFAULT_MAX_INPUT_CHARS)[0] for c in cases]
    estimate = [
        estimated_tokens(ChatRequest("k", "judge-a", build_messages("answer_relevancy", inputs)))
        for inputs in shown
    ]
    budget = 3 * estimate[0]  # q0 and q1 fit; q2 does not; q3 and q4 would fit in what is left
    endpoint = JudgeEndpoint(fake_judge.url, ("judge-a",), concurrency=1)
    run = run_judge(cases, settings, JudgeClient(endpoint, Budget(max_tokens=budget)))

    sent = [r["messages"][1]["content"] for r in fake_judge.requests]
    assert len(sent) == 2 and "Question 0?" in sent[0] and "Question 1?" in sent[1]
    received = [
        estimated_tokens(ChatRequest("k", r["model"], tuple(r["messages"]), max_tokens=r["max_tokens"]))
        for r in fake_judge.requests
    ]
    assert sum(received) <= budget  # nothing above the budget reached the endpoint
    spent = run.usage["prompt_tokens"] + run.usage["completion_tokens"]
    assert budget - spent >= estimate[3]  # q3 would have fit: it was not sent because judging stopped
    assert run.stopped == (
        f"token budget reached before case q2 (answer_relevancy, judge-a): estimate {estimate[2]} > "
        f"remaining {budget - spent} of {budget} tokens; 3 call(s) not sent"
    )
    judged = by(run, "answer_relevancy")
    assert [q for q, j in judged.items() if j.score is not None] == ["q0", "q1"]
    assert run.counts["errors"] == {"budget": 3} and run.nothing_judged is None
    assert judge_report(run)["stopped"] == run.stopped


def test_a_budget_that_fits_no_call_judges_nothing_and_sends_nothing(fake_judge):
    endpoint = JudgeEndpoint(fake_judge.url, ("judge-a",))
    run = run_judge(items(3), JudgeSettings(), JudgeClient(endpoint, Budget(max_tokens=50)))
    assert fake_judge.requests == [] and run.counts["scored"] == 0
    assert run.stopped.startswith("token budget reached before case q0 (faithfulness, judge-a): estimate ")
    assert run.nothing_judged.startswith(
        "no judgment succeeded: all 8 failed (budget 8; first: budget: token budget: estimated "
    )


def test_an_ensemble_whose_one_model_rejects_every_call_judged_nothing(fake_judge):
    fake_judge.reply_for = lambda request: FakeReply(401) if request["model"] == "judge-b" else DEFAULT_REPLY
    run = run_judge(
        items(3), JudgeSettings(metrics=("answer_relevancy",)), client(fake_judge, ("judge-a", "judge-b"))
    )
    assert run.succeeded == 3 and run.counts["scored"] == 0  # judge-a scored, no case has the ensemble's
    assert run.nothing_judged.startswith(
        "no judgment succeeded: no case was judged by every model of the ensemble "
        "(3 of 6 model judgments failed: error 3; first: error: HTTP 401 after 1 attempt"
    )
    assert judged_metrics(run) == {}


def test_nothing_to_judge_is_said_so():
    endpoint = JudgeEndpoint("http://127.0.0.1:9/v1", ("judge-a",))  # never called
    run = run_judge([], JudgeSettings(), JudgeClient(endpoint))
    assert run.counts == {"applicable": 0, "not_applicable": 0, "scored": 0, "failed": 0, "errors": {}}
    assert run.nothing_judged == (
        "no judgment succeeded: nothing to judge (no case has the inputs of a requested metric)"
    )

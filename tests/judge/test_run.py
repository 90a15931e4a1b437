"""Judging runs against a loopback OpenAI-compatible server: repeats, ensembles, budget, cache, faults."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter

import pytest

from ragspine_pipeline.judge.cache import LocalJudgmentCache
from ragspine_pipeline.judge.client import Budget, JudgeClient, JudgeEndpoint
from ragspine_pipeline.judge.prompts import STRICT_REMINDER, JudgeItem
from ragspine_pipeline.judge.report import judge_report, judged_metrics
from ragspine_pipeline.judge.run import COMBINED, JudgeSettings, run_judge
from tests.judge.fake_judge import FakeReply


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

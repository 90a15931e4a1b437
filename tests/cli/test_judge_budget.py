"""``ragspine-eval judge`` bounds its cost before it sends anything, never passes on nothing, and reads
hostile labels as one-line errors — against a real loopback judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from tests.judge.fake_judge import FakeJudge, FakeReply

REPO = Path(__file__).resolve().parents[2]
BIG = 2_000_000  # characters of one question: what a runaway trace can carry


@pytest.fixture
def fake(monkeypatch):
    with FakeJudge() as judge:
        monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", judge.url)
        monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a")
        monkeypatch.setenv("RAGSPINE_JUDGE_API_KEY", "sk-budget-secret")
        monkeypatch.setenv("RAGSPINE_JUDGE_MAX_RETRIES", "0")
        yield judge


def traces(tmp_path, question: str = "What is the refund window?", n: int = 2) -> str:
    path = tmp_path / "traces.jsonl"
    rows = [
        {"qid": f"q{i}", "question": question, "answer": "Refunds are accepted for 30 days."}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def judge(capsys, trace: str, *args: str) -> tuple[int, dict | str, str]:
    code = main(["judge", "--trace", trace, "--metrics", "answer_relevancy", *args])
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except ValueError:
        return code, out, err


def test_a_huge_question_is_cut_before_it_is_sent_and_the_cut_is_reported(tmp_path, capsys, fake):
    code, report, err = judge(capsys, traces(tmp_path, "why? " * (BIG // 5), n=1))
    assert code == 0 and report["pass"] is True
    [request] = fake.requests
    assert len(json.dumps(request)) < 8000 + 4000  # the 8,000-character field plus the fixed prompt
    assert "more characters not shown to the judge]" in request["messages"][1]["content"]
    assert report["truncated"] == [
        {"qid": "q0", "metric": "answer_relevancy", "field": "question", "chars": BIG, "kept": 8000}
    ]
    assert "1 judgment input(s) cut to 8000 characters" in err


def test_max_tokens_is_checked_on_the_estimate_so_nothing_over_budget_is_sent(tmp_path, capsys, fake):
    big = traces(tmp_path, "x" * BIG, n=1)
    code, report, err = judge(
        capsys, big, "--max-tokens", "1000", "--max-calls", "1", "--max-input-chars", str(BIG)
    )
    assert fake.requests == []  # ~667,000 estimated tokens: not sent at all
    assert code == 1 and report["pass"] is False
    assert report["reason"].startswith("no judgment succeeded: all 1 failed (budget 1")
    assert "token budget: estimated" in report["reason"] and err.count("\n") == 1


def test_every_call_rejected_is_exit_1_with_the_reason_never_a_pass(tmp_path, capsys, fake):
    fake.script(*[FakeReply(status=401) for _ in range(10)])
    code, report, err = judge(capsys, traces(tmp_path), "--gates", "judge_answer_relevancy_pass_rate=0")
    assert len(fake.requests) == 1 and code == 1  # the two cases ask the same thing: judged once
    assert report["pass"] is False and "HTTP 401" in report["reason"]
    assert err.startswith("ragspine-eval: error: no judgment succeeded: all 2 failed (error 2")
    assert "sk-budget-secret" not in err + json.dumps(report)


def test_nothing_to_judge_is_not_a_pass(tmp_path, capsys, fake):
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps({"qid": "q0", "answer": "no question to judge relevancy against"}) + "\n")
    code, report, _ = judge(capsys, str(path))
    assert code == 1 and report["pass"] is False and "nothing to judge" in report["reason"]


def test_model_names_and_case_ids_are_escaped_in_the_markdown_report(tmp_path, capsys, fake, monkeypatch):
    monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "<img src=x onerror=alert(1)>")
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps({"qid": "<script>q</script>", "question": "q" * 9000, "answer": "a"}) + "\n")
    code, out, _ = judge(capsys, str(path), "--format", "markdown")
    assert code == 0
    assert "<img" not in out and "<script" not in out
    assert "&lt;img src=x onerror=alert(1)&gt;" in out and "&lt;script&gt;q&lt;/script&gt;" in out


@pytest.mark.parametrize("kind", ["fifo", "deep", "huge_int"])
def test_hostile_labels_are_one_line_exit_2_and_never_hang(tmp_path, fake, kind):
    labels = tmp_path / "labels.jsonl"
    if kind == "fifo":
        os.mkfifo(labels)
    elif kind == "deep":
        labels.write_text(
            '{"qid": "q0", "metric": "answer_relevancy", "score": ' + "[" * 10_000 + "]" * 10_000 + "}\n"
        )
    else:
        labels.write_text('{"qid": "q0", "metric": "answer_relevancy", "score": ' + "9" * 5000 + "}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = ["judge", "--trace", traces(tmp_path), "--metrics", "answer_relevancy", "--labels", str(labels)]
    done = subprocess.run(
        [sys.executable, "-m", "ragspine_pipeline.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(labels) in done.stderr

"""``ragspine-eval judge`` end to end against a loopback OpenAI-compatible judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.judge.client import ChatRequest, estimated_tokens
from tests.judge.fake_judge import DEFAULT_REPLY, FakeJudge, FakeReply

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "layered"
GOLD, TRACES, EVIDENCE = (str(EXAMPLES / name) for name in ("gold.jsonl", "traces.jsonl", "evidence.jsonl"))


def varied(request: dict) -> str:
    """A deterministic judge whose scores vary with what it is shown (so agreement can be measured)."""
    text = request["messages"][1]["content"]
    return json.dumps({"score": 1 + len(text) % 5, "reason": "varies with the input"})


@pytest.fixture
def judge_env(monkeypatch):
    with FakeJudge(reply_for=varied) as fake:
        monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", fake.url)
        monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a,judge-b")
        monkeypatch.setenv("RAGSPINE_JUDGE_API_KEY", "sk-cli-secret")
        monkeypatch.setenv("RAGSPINE_JUDGE_MAX_RETRIES", "0")
        yield fake


def judge(capsys, *args):
    code = main(["judge", "--trace", TRACES, "--gold", GOLD, "--evidence", EVIDENCE, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_without_a_judge_nothing_pretends_to_judge(capsys):
    code, out, err = judge(capsys)
    assert code == 2 and out == ""
    assert "no judge configured: set RAGSPINE_JUDGE_BASE_URL and RAGSPINE_JUDGE_MODEL" in err


def test_json_report_agreement_cache_and_gates(capsys, judge_env, tmp_path):
    cache = str(tmp_path / "cache")
    code, out, err = judge(capsys, "--cache", cache, "--gates", "judge_answer_relevancy=1")
    report = json.loads(out)
    assert code == 0 and report["pass"] is True, err
    assert report["models"] == ["judge-a", "judge-b"] and set(report["metrics"]) == {
        "faithfulness",
        "answer_relevancy",
        "context_recall",
    }
    relevancy = report["metrics"]["answer_relevancy"]
    assert relevancy["combined"]["n"] == 14 and relevancy["models"]["judge-a"]["n"] == 14
    assert report["slices"]["workflow"]  # per slice, with intervals
    calls = len(judge_env.requests)
    assert calls == report["usage"]["calls"] > 0
    assert "sk-cli-secret" not in out and all(a == "Bearer sk-cli-secret" for a in judge_env.authorizations)

    # Human labels equal to the judge's own (rounded) combined scores: perfect agreement.
    labels = tmp_path / "labels.jsonl"
    rows = [c for c in report["cases"] if c["model"] == "combined" and c["score"] is not None]
    labels.write_text(
        "".join(
            json.dumps({"qid": c["qid"], "metric": c["metric"], "score": int(c["score"] + 0.5)}) + "\n"
            for c in rows
        )
    )
    code, out, _ = judge(capsys, "--cache", cache, "--labels", str(labels), "--format", "markdown")
    assert code == 0 and len(judge_env.requests) == calls  # unchanged answers: zero calls
    assert "Krippendorff's α vs human labels: 1.000" in out and "| combined |" in out
    assert "cache hits" in out


def test_judgments_are_cached_in_the_user_cache_by_default(capsys, judge_env, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, out, err = judge(capsys, "--metrics", "answer_relevancy")
    assert code == 0, err
    calls = len(judge_env.requests)
    assert calls == json.loads(out)["cache"]["misses"] > 0
    assert list((tmp_path / "xdg" / "ragspine-eval" / "judge").rglob("*.json"))

    code, out, _ = judge(capsys, "--metrics", "answer_relevancy")
    assert code == 0 and len(judge_env.requests) == calls  # unchanged answers: zero calls
    assert json.loads(out)["cache"] == {"hits": calls, "misses": 0}

    code, out, _ = judge(capsys, "--metrics", "answer_relevancy", "--no-cache")
    assert code == 0 and len(judge_env.requests) == 2 * calls  # judged again
    assert json.loads(out)["cache"] == {"hits": 0, "misses": calls}


def test_no_cache_keeps_nothing(capsys, judge_env, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, _, err = judge(capsys, "--metrics", "answer_relevancy", "--no-cache")
    assert code == 0, err
    calls = len(judge_env.requests)
    code, _, err = judge(capsys, "--metrics", "answer_relevancy", "--no-cache")
    assert code == 0 and len(judge_env.requests) == 2 * calls > 0, err
    assert not (tmp_path / "xdg").exists()


def test_an_unwritable_default_cache_is_one_line_saying_how_to_go_on(
    capsys, judge_env, tmp_path, monkeypatch
):
    (tmp_path / "xdg").write_text("a file where the cache folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, out, err = judge(capsys, "--metrics", "answer_relevancy")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "cannot write the judgment cache" in err and err.rstrip().endswith(
        "(choose another with --cache DIR, or run with --no-cache)"
    )


def test_cache_and_no_cache_together_are_a_usage_error(capsys, judge_env, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        judge(capsys, "--cache", str(tmp_path / "c"), "--no-cache")
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_failing_or_unmeasured_gate_exits_1(capsys, judge_env):
    code, out, err = judge(capsys, "--metrics", "answer_relevancy", "--gates", "judge_answer_relevancy=5")
    assert code == 1 and "gate failed: judge_answer_relevancy" in err
    report = json.loads(out)
    assert report["pass"] is False and report["reason"].startswith("gate(s) failed: judge_answer_relevancy ")
    code, out, err = judge(capsys, "--metrics", "answer_relevancy", "--gates", "judge_faithfulness=1")
    assert code == 1 and "judge_faithfulness not measured" in err
    assert json.loads(out)["gates"][0] == {
        "metric": "judge_faithfulness", "op": ">=", "threshold": 1.0, "value": None, "passed": False
    }  # fmt: skip


def test_an_unreachable_judge_fails_the_step_with_its_reason(capsys, monkeypatch, closed_port):
    monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", f"http://127.0.0.1:{closed_port}/v1")
    monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a")
    monkeypatch.setenv("RAGSPINE_JUDGE_MAX_RETRIES", "0")
    code, out, err = judge(capsys, "--metrics", "answer_relevancy")
    assert code == 1 and "the judge step failed: unreachable: connection refused" in err
    assert json.loads(out)["failed"].startswith("unreachable")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "labels.jsonl:1: malformed JSON"),
        (
            '{"qid": "FRZ-01", "metric": "faithfulness", "score": ' + "[" * 10_000 + "]" * 10_000 + "}",
            "labels.jsonl:1: JSON nested 10001 levels deep; at most 64 are accepted",
        ),
        ('{"qid": "FRZ-01", "metric": "faithfulness", "score": ' + "7" * 5000 + "}", "too many digits"),
        ('{"qid": "FRZ-01", "metric": "' + "m" * 100_000 + '", "score": 3}', "unknown metric 'mmmmmm"),
        ('{"qid": "FRZ-01", "metric": "tone", "score": 3}', "unknown metric 'tone'"),
        ('{"qid": "FRZ-01", "metric": "faithfulness", "score": 7}', "score must be an integer from 1 to 5"),
        (
            '{"qid": "FRZ-01", "metric": "faithfulness", "score": 2, "score": 5}',
            "labels.jsonl:1: field 'score': duplicate key",
        ),
    ],
)
def test_bad_labels_are_one_line_errors(capsys, judge_env, tmp_path, line, message):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(line + "\n")
    code, out, err = judge(capsys, "--labels", str(labels))
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1
    assert len(err) < 400  # the error shows a bounded part of what the line holds


def test_labels_end_at_newlines_only(capsys, judge_env, tmp_path):
    labels = tmp_path / "labels.jsonl"  # U+2028 is text inside a JSON string, not a line break
    labels.write_text('{"qid": "FRZ\u2028-01", "metric": "faithfulness", "score": 2}\n', encoding="utf-8")
    code, _, err = judge(capsys, "--metrics", "answer_relevancy", "--labels", str(labels))
    assert code == 0, err


def test_a_labels_path_that_is_not_a_regular_file_is_one_line(capsys, judge_env, tmp_path):
    code, out, err = judge(capsys, "--labels", str(tmp_path))
    assert (
        code == 2
        and out == ""
        and err.strip().endswith("cannot read the labels: not a regular file (a directory)")
    )


def test_an_unusable_cache_is_one_line(capsys, judge_env, tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be")
    code, out, err = judge(capsys, "--metrics", "answer_relevancy", "--cache", str(blocked))
    assert code == 2 and out == "" and "cannot" in err and "judgment cache" in err
    assert len(err.strip().splitlines()) == 1


# -- cost bounds, partial failures and the report's verdict -------------------------------------------


def small_traces(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def judge_traces(capsys, trace: str, *args: str) -> tuple[int, str, str]:
    code = main(["judge", "--trace", trace, "--metrics", "answer_relevancy", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def one_judge(monkeypatch):
    """One judge model, one call at a time (so which call the budget stops at is fixed), no retries."""
    with FakeJudge() as fake:
        monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", fake.url)
        monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a")
        monkeypatch.setenv("RAGSPINE_JUDGE_MAX_RETRIES", "0")
        monkeypatch.setenv("RAGSPINE_JUDGE_CONCURRENCY", "1")
        for name in (
            "RAGSPINE_JUDGE_MAX_CALLS",
            "RAGSPINE_JUDGE_MAX_TOKENS",
            "RAGSPINE_JUDGE_MAX_INPUT_CHARS",
        ):
            monkeypatch.delenv(name, raising=False)
        yield fake


def test_a_2_mb_question_is_sent_cut_and_the_cut_is_reported(capsys, one_judge, tmp_path):
    big = small_traces(tmp_path, [{"qid": "huge", "question": "why? " * 400_000, "answer": "Because."}])
    code, out, err = judge_traces(capsys, big)
    report = json.loads(out)
    assert code == 0 and report["pass"] is True
    [size] = one_judge.body_sizes  # bytes on the wire: the 8,000-character question and a fixed prompt
    assert size < 8000 + 3000
    assert report["truncated"] == [
        {"qid": "huge", "metric": "answer_relevancy", "field": "question", "chars": 2_000_000, "kept": 8000}
    ]
    assert err == (
        "ragspine-eval: warning: 1 judgment input(s) cut to 8000 characters (see 'truncated' in the report)\n"
    )
    code, out, _ = judge_traces(capsys, big, "--format", "markdown")
    assert "| huge | answer_relevancy | question | 2000000 | 8000 |" in out  # the cut, per case


def test_the_budget_stops_before_the_first_call_that_does_not_fit(capsys, one_judge, tmp_path):
    rows = [{"qid": f"q{i}", "question": f"Question {i}?", "answer": "Answer."} for i in range(4)]
    rows[1]["answer"] = "A long answer. " * 400
    trace = small_traces(tmp_path, rows)
    code, out, err = judge_traces(capsys, trace, "--max-tokens", "1200")
    report = json.loads(out)
    sent = [
        estimated_tokens(ChatRequest("k", r["model"], tuple(r["messages"]), max_tokens=r["max_tokens"]))
        for r in one_judge.requests
    ]
    assert len(sent) == 1 and sum(sent) <= 1200  # q0 only: q1 does not fit, q2 and q3 are not sent after it
    assert report["stopped"].startswith(
        "token budget reached before case q1 (answer_relevancy, judge-a): estimate "
    )
    assert report["stopped"].endswith("of 1200 tokens; 3 call(s) not sent")
    assert code == 0 and report["pass"] is True  # something was judged, and no gate asks for more
    assert report["judgments"] == {
        "applicable": 4, "not_applicable": 0, "scored": 1, "failed": 3, "errors": {"budget": 3}
    }  # fmt: skip
    assert err.splitlines() == [
        f"ragspine-eval: warning: {report['stopped']}",
        "ragspine-eval: warning: 3 of 4 judgment(s) got no score (budget 3); "
        "they are left out of every mean and rate",
    ]
    code, out, _ = judge_traces(capsys, trace, "--max-tokens", "1200", "--format", "markdown")
    assert "**Judging stopped early:** token budget reached before case q1" in out
    assert "Judged: 1 of 4 case × metric judgments got a score (3 without one; errors: budget 3)" in out


def test_a_budget_no_call_fits_sends_nothing_and_does_not_pass(capsys, one_judge, tmp_path):
    trace = small_traces(tmp_path, [{"qid": "q0", "question": "Why?", "answer": "Because."}])
    code, out, err = judge_traces(capsys, trace, "--max-tokens", "100")
    report = json.loads(out)
    assert one_judge.requests == [] and code == 1 and report["pass"] is False
    assert report["reason"].startswith(
        "no judgment succeeded: all 1 failed (budget 1; first: budget: token budget"
    )
    assert err == f"ragspine-eval: error: {report['reason']}\n"


def test_every_call_rejected_is_exit_1_with_one_line(capsys, one_judge, tmp_path):
    one_judge.reply_for = lambda request: FakeReply(401)
    rows = [{"qid": f"q{i}", "question": f"Question {i}?", "answer": "Answer."} for i in range(3)]
    code, out, err = judge_traces(capsys, small_traces(tmp_path, rows), "--gates", "judge_answer_relevancy=1")
    report = json.loads(out)
    assert len(one_judge.requests) == 3 and code == 1 and report["pass"] is False
    assert report["reason"] == (
        "no judgment succeeded: all 3 failed (error 3; "
        "first: error: HTTP 401 after 1 attempt: fake judge error 401)"
    )
    assert err == f"ragspine-eval: error: {report['reason']}\n"


def test_an_ensemble_whose_one_model_rejects_every_call_does_not_pass(
    capsys, one_judge, monkeypatch, tmp_path
):
    monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a,judge-b")
    one_judge.reply_for = lambda request: FakeReply(401) if request["model"] == "judge-b" else DEFAULT_REPLY
    rows = [{"qid": f"q{i}", "question": f"Question {i}?", "answer": "Answer."} for i in range(2)]
    code, out, err = judge_traces(capsys, small_traces(tmp_path, rows))
    report = json.loads(out)
    assert code == 1 and report["pass"] is False
    assert "no case was judged by every model of the ensemble" in report["reason"]
    assert len(err.splitlines()) == 1


def test_some_calls_failing_passes_with_the_failures_counted_and_named(capsys, one_judge, tmp_path):
    one_judge.script(FakeReply(500))
    rows = [{"qid": f"q{i}", "question": f"Question {i}?", "answer": "Answer."} for i in range(3)]
    code, out, err = judge_traces(capsys, small_traces(tmp_path, rows), "--gates", "judge_answer_relevancy=4")
    report = json.loads(out)
    assert code == 0 and report["pass"] is True and "reason" not in report
    assert report["judgments"]["failed"] == 1 and report["judgments"]["errors"] == {"error": 1}
    assert report["metrics"]["answer_relevancy"]["combined"]["excluded"] == 1
    assert err == (
        "ragspine-eval: warning: 1 of 3 judgment(s) got no score (error 1); "
        "they are left out of every mean and rate\n"
    )


def test_the_markdown_report_escapes_what_data_and_the_endpoint_say(capsys, one_judge, tmp_path):
    hostile = "<script>alert(1)</script> | <img src=x onerror=alert(2)>\nnext"
    one_judge.reply_for = lambda request: FakeReply(
        500, body=json.dumps({"error": {"message": hostile}}).encode()
    )
    trace = small_traces(tmp_path, [{"qid": hostile, "question": "q" * 9000, "answer": hostile}])
    code, out, err = judge_traces(capsys, trace, "--format", "markdown")
    assert code == 1
    assert "<script" not in out and "<img" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| &lt;img src=x onerror=alert(2)&gt; next" in out
    assert "**Not passed:** no judgment succeeded: all 1 failed" in out
    [row] = [line for line in out.splitlines() if line.startswith("| &lt;script")]
    assert row.count(" | ") == 4  # the case id's pipe is escaped: the table keeps its five columns
    assert len(err.splitlines()) == 2  # the error (the endpoint's line break folded), the cut


def test_the_limits_default_to_the_settings_the_dagster_runs_read(capsys, one_judge, monkeypatch, tmp_path):
    trace = small_traces(tmp_path, [{"qid": "q0", "question": "why? " * 100, "answer": "Because."}])
    monkeypatch.setenv("RAGSPINE_JUDGE_MAX_INPUT_CHARS", "50")
    code, out, _ = judge_traces(capsys, trace)
    assert code == 0 and json.loads(out)["truncated"][0]["kept"] == 50
    code, out, _ = judge_traces(capsys, trace, "--max-input-chars", "60")  # an option wins
    assert code == 0 and json.loads(out)["truncated"][0]["kept"] == 60
    monkeypatch.setenv("RAGSPINE_JUDGE_MAX_TOKENS", "10")
    code, out, _ = judge_traces(capsys, trace, "--no-cache")  # cached, the first judgment would cost nothing
    assert code == 1 and json.loads(out)["stopped"].startswith("token budget reached before case q0")
    assert len(one_judge.requests) == 2
    monkeypatch.setenv("RAGSPINE_JUDGE_MAX_TOKENS", "lots")
    code, out, err = judge_traces(capsys, trace)
    assert (code, out) == (2, "")
    assert err == "ragspine-eval: error: environment: RAGSPINE_JUDGE_MAX_TOKENS must be an integer\n"

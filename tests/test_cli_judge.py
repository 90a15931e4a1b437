"""``ragspine-eval judge`` end to end against a loopback OpenAI-compatible judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from tests.judge.fake_judge import FakeJudge

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "layered"
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


def test_a_failing_or_unmeasured_gate_exits_1(capsys, judge_env):
    code, _, err = judge(capsys, "--metrics", "answer_relevancy", "--gates", "judge_answer_relevancy=5")
    assert code == 1 and "gate failed: judge_answer_relevancy" in err
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


def test_an_unusable_cache_is_one_line(capsys, judge_env, tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be")
    code, out, err = judge(capsys, "--metrics", "answer_relevancy", "--cache", str(blocked))
    assert code == 2 and out == "" and "cannot" in err and "judgment cache" in err
    assert len(err.strip().splitlines()) == 1

"""A replay that survives: answers kept as they arrive, a re-run asks only what is missing, failures
either fail the replay (naming the cases) or are scored missing below the configured share; the
``replay`` command, and a replay killed with SIGKILL half way then re-run (a system test)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.sources.answer_store import AnswerStore, Reuse, Stamp, reuse_warnings
from ragspine_pipeline.sources.replay import ReplayFailed, replay
from ragspine_pipeline.sources.sut import HttpSut
from tests.conftest import load_factor
from tests.fake_rag_service import NESTED_MAPPING, FakeRagService

ROOT = Path(__file__).resolve().parents[2]
GOLD = ROOT / "examples/wfgy/gold.jsonl"
TRACES = {
    json.loads(line)["qid"]: json.loads(line)
    for line in (ROOT / "examples/wfgy/traces.jsonl").read_text().splitlines()
}
QUESTIONS = [(qid, trace["q"], None) for qid, trace in TRACES.items()]


def ask(service: FakeRagService, tmp_path: Path, store: AnswerStore | None, **options):
    client = HttpSut(url=service.url, retries=0).client()
    return replay(
        QUESTIONS,
        client.answer,
        out=tmp_path / "traces.jsonl",
        quarantine=tmp_path / "quarantine.jsonl",
        concurrency=4,
        store=store,
        where=client.describe(),
        **options,
    )


def store(tmp_path: Path, sut="sut-1", index="ix-7", release="r1", **scope) -> AnswerStore:
    """The answer store of a new replay (a new stamp) of ``release`` of ``sut`` on ``index``."""
    return AnswerStore(tmp_path / "answers", sut, index, Stamp.new(release), **scope)


def test_a_failed_replay_keeps_its_answers_and_the_rerun_asks_only_the_rest(tmp_path):
    first = store(tmp_path)
    with FakeRagService(TRACES, fail={"HR-004", "IT-002"}) as service:
        with pytest.raises(ReplayFailed) as info:
            ask(service, tmp_path, first)
        assert "2 of 20 case(s) failed, more than the 0% allowed" in str(info.value)
        assert "HR-004: HTTP 503 Service Unavailable" in str(info.value)
        service.fail.clear()
        service.asked.clear()
        result = ask(service, tmp_path, store(tmp_path))
    assert sorted(service.asked) == ["HR-004", "IT-002"]  # the other 18 answers were kept
    assert (result.answered, result.reused, result.failed) == (20, 18, {})
    stamp = first.stamp
    assert result.reused_from == (Reuse(stamp.replay, stamp.started, "r1", 18),)
    assert reuse_warnings(result.reused_from) == [
        f"18 answers reused from replay {stamp.replay} of {stamp.started} (release r1)"
    ]
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert [json.loads(line)["qid"] for line in lines] == list(TRACES)  # in the golden set's order


def test_another_index_sut_or_release_is_asked_again(tmp_path):
    with FakeRagService(TRACES) as service:
        for changed in ({}, {"index": "ix-8"}, {"sut": "sut-2"}, {"release": "r2"}, {"release": None}, {}):
            ask(service, tmp_path, store(tmp_path, **changed))
    assert set(service.asked.values()) == {5}  # only the last replay reused (the first one's answers)


def test_another_replay_of_the_same_release_is_asked_again_unless_reuse_is_asked_for(tmp_path):
    """A Dagster run (``within``: its root run) resumes only itself; a new run asks again, or, told to
    reuse, takes the latest answers of the runs before it and names that run."""
    with FakeRagService(TRACES) as service:
        ask(service, tmp_path, store(tmp_path, within="run-1"))
        resumed = ask(service, tmp_path, store(tmp_path, within="run-1"))
        second = store(tmp_path, within="run-2")
        ask(service, tmp_path, second)
        reused = ask(service, tmp_path, store(tmp_path, within="run-3", reuse_earlier=True))
        other_release = ask(
            service, tmp_path, store(tmp_path, release="r2", within="run-4", reuse_earlier=True)
        )
    assert resumed.reused == 20 and set(service.asked.values()) == {3}
    assert [(r.replay, r.answers) for r in reused.reused_from] == [(second.stamp.replay, 20)]
    assert other_release.reused == 0  # never another release's answers


def test_failures_below_the_allowed_share_are_scored_missing_and_named(tmp_path):
    seen = []
    with FakeRagService(TRACES, fail={"FIN-003"}) as service:
        result = ask(service, tmp_path, None, max_failed_share=0.1, progress=seen.append)
    assert result.failed == {"FIN-003": "HTTP 503 Service Unavailable after 0 retries"}
    assert result.answered == 19
    assert "FIN-003" not in (tmp_path / "traces.jsonl").read_text()
    last = seen[-1]
    assert (last.total, last.answered, last.failed) == (20, 19, 1)
    assert last.line().startswith("replay 20/20: 19 answered (")


def test_a_torn_last_line_of_the_answer_store_is_asked_again(tmp_path, caplog):
    first = store(tmp_path, index=None)
    with FakeRagService(TRACES) as service:
        ask(service, tmp_path, first)
        text = first.path.read_text()
        first.path.write_text(text[: len(text) - 25])  # a crash in the middle of the last write
        service.asked.clear()
        result = ask(service, tmp_path, store(tmp_path, index=None))
    assert sum(service.asked.values()) == 1 and result.reused == 19
    assert "1 unreadable line(s) skipped" in caplog.text


def write_sut(tmp_path: Path, service: FakeRagService, **fields) -> Path:
    settings = {
        "kind": "http",
        "url": service.url,
        "headers": {"Authorization": "Bearer ${FAKE_TOKEN}"},
        "response": NESTED_MAPPING,
        **fields,
    }
    path = tmp_path / "sut.yaml"
    path.write_text(json.dumps(settings))  # JSON is YAML
    return path


def test_the_replay_command_writes_traces_that_score(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_TOKEN", "tok-123")
    with FakeRagService(TRACES, shape="nested", token="tok-123") as service:
        sut = write_sut(tmp_path, service)
        out = tmp_path / "out.jsonl"
        assert main(["replay", "--gold", str(GOLD), "--sut", str(sut), "--out", str(out)]) == 0
    assert "20 trace(s) written" in capsys.readouterr().out
    code = main(["score", "--gold", str(GOLD), "--trace", str(out), "--out", str(tmp_path / "d.json")])
    expected = main(
        [
            "score",
            "--gold",
            str(GOLD),
            "--trace",
            str(ROOT / "examples/wfgy/traces.jsonl"),
            "--out",
            str(tmp_path / "e.json"),
        ]
    )
    assert code == expected
    got, want = (json.loads((tmp_path / name).read_text()) for name in ("d.json", "e.json"))
    assert got["release"] == {**want["release"], "run_id": got["release"]["run_id"]}
    assert got["cases"] == want["cases"]


def test_the_replay_command_refuses_an_unusable_sut_file(tmp_path, capsys):
    sut = tmp_path / "sut.yaml"
    sut.write_text("kind: http\n")
    assert main(["replay", "--gold", str(GOLD), "--sut", str(sut), "--out", str(tmp_path / "o")]) == 2
    assert "url" in capsys.readouterr().err


@pytest.mark.system
def test_a_replay_killed_half_way_asks_only_the_unanswered_cases_when_run_again(tmp_path):
    """SIGKILL while answers arrive; the re-run of the same release asks the fake only what was not
    kept, and its traces score to the same decision as an uninterrupted replay's, but for the warning
    naming the replay whose answers were reused."""
    answers = tmp_path / "answers"
    env = {**os.environ, "FAKE_TOKEN": "tok-123"}
    with FakeRagService(TRACES, shape="nested", token="tok-123", delay_s=0.15) as service:
        sut = write_sut(tmp_path, service, concurrency=2)

        def command(out: str) -> list[str]:
            return [
                sys.executable,
                "-m",
                "ragspine_pipeline.cli",
                "replay",
                "--gold",
                str(GOLD),
                "--sut",
                str(sut),
                "--out",
                str(tmp_path / out),
                "--answers",
                str(answers),
                "--release",
                "r1",
            ]

        first = subprocess.Popen(command("first.jsonl"), env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60 * load_factor()
        store = lambda: next(answers.rglob("*.jsonl"), None)  # noqa: E731
        while not (store() and len(store().read_text().splitlines()) >= 6):
            assert first.poll() is None and time.monotonic() < deadline, "no answers kept in time"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        kept = {json.loads(line)["qid"] for line in store().read_text().splitlines() if line.endswith("}")}
        assert 6 <= len(kept) < 20 and not (tmp_path / "first.jsonl").exists()
        service.asked.clear()
        second = subprocess.run(command("second.jsonl"), env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr
        assert set(service.asked) == set(TRACES) - kept and set(service.asked.values()) == {1}

    def decision(traces: str) -> dict:
        out = tmp_path / f"{Path(traces).parent.name}-{Path(traces).name}.decision.json"
        main(["score", "--gold", str(GOLD), "--trace", str(traces), "--run-id", "r", "--out", str(out)])
        return {key: value for key, value in json.loads(out.read_text()).items() if key != "trace"}

    resumed, uninterrupted = (
        decision(str(tmp_path / "second.jsonl")),
        decision(str(ROOT / "examples/wfgy/traces.jsonl")),
    )
    [reuse] = set(resumed["warnings"]) - set(uninterrupted["warnings"])
    assert reuse.startswith(f"{len(kept)} answers reused from replay ") and reuse.endswith("(release r1)")
    assert {**resumed, "warnings": uninterrupted["warnings"]} == uninterrupted


def test_an_answer_json_cannot_keep_is_quarantined_not_a_crash(tmp_path, http_server):
    from tests.conftest import Reply

    http_server.script(Reply(200, '{"qid": "q1", "answer": "x", "latency_ms": NaN}'))
    kept = store(tmp_path, sut="sut-nan", index=None)
    client = HttpSut(url=http_server.url + "/answer", retries=0).client()
    result = replay(
        [("q1", "?", None)],
        client.answer,
        out=tmp_path / "t.jsonl",
        quarantine=tmp_path / "q.jsonl",
        store=kept,
    )
    assert (result.answered, result.quarantined) == (0, 1)
    assert not kept.path.exists()  # not kept: asked again next time


def test_a_store_line_the_live_path_would_not_have_kept_is_asked_again(tmp_path, caplog):
    """Store lines edited or written by another tool: a trace that is a string or a list, one holding
    NaN, one nested past the readers' cap, and one kept for case A but naming case B are never taken —
    those cases are asked again, with no traceback — while the sound lines are reused."""
    first = store(tmp_path, index=None)
    with FakeRagService(TRACES) as service:
        ask(service, tmp_path, first)
        lines = [json.loads(line) for line in first.path.read_text().splitlines()]
        qids = [line["qid"] for line in lines]
        lines[0]["trace"] = "an answer, as text"
        lines[1]["trace"] = [lines[1]["trace"]]
        texts = [json.dumps(line) for line in lines]
        texts[2] = texts[2].replace('"trace": {', '"trace": {"score": NaN, ', 1)
        texts[3] = texts[3].replace('"trace": {', '"trace": {"deep": ' + "[" * 70 + "]" * 70 + ", ", 1)
        lines[4]["trace"] = {**lines[4]["trace"], "qid": qids[5]}  # kept for one case, naming another
        texts[4] = json.dumps(lines[4])
        # Keyed for case 6, said to be case 7's (and its trace naming none): not taken for case 6.
        lines[6] = {
            **lines[6],
            "qid": qids[7],
            "trace": {k: v for k, v in lines[6]["trace"].items() if k != "qid"},
        }
        texts[6] = json.dumps(lines[6])
        first.path.write_text("\n".join(texts) + "\n")
        service.asked.clear()
        result = ask(service, tmp_path, store(tmp_path, index=None))
    assert sorted(service.asked) == sorted([*qids[:5], qids[6]]) and result.reused == len(qids) - 6
    assert "5 unreadable line(s) skipped, asked again" in caplog.text

"""``ragspine-eval replay`` keeps answers for one release of one service: the same release run again
asks nothing it has and names the replay it took them from, in the replay record and, through
``score``, in the decision; another release, another model header or no release at all asks again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.sources.replay_record import record_path
from tests.fake_rag_service import FakeRagService

ROOT = Path(__file__).resolve().parents[2]
GOLD = ROOT / "examples/wfgy/gold.jsonl"
TRACES = {
    json.loads(line)["qid"]: json.loads(line)
    for line in (ROOT / "examples/wfgy/traces.jsonl").read_text().splitlines()
}


def write_sut(tmp_path: Path, service: FakeRagService, **fields) -> Path:
    path = tmp_path / "sut.yaml"
    path.write_text(json.dumps({"kind": "http", "url": service.url, "retries": 0, **fields}))
    return path


def replay(tmp_path: Path, sut: Path, *options: str, out: str = "traces.jsonl") -> int:
    command = ["replay", "--gold", str(GOLD), "--sut", str(sut), "--out", str(tmp_path / out)]
    return main([*command, "--answers", str(tmp_path / "answers"), "--progress-every", "60", *options])


def replay_warnings(tmp_path: Path) -> list[str]:
    """What ``score``'s decision says of how its traces were replayed."""
    out = tmp_path / "decision.json"
    main(["score", "--gold", str(GOLD), "--trace", str(tmp_path / "traces.jsonl"), "--out", str(out)])
    return [warning for warning in json.loads(out.read_text())["warnings"] if "replay" in warning]


def test_a_new_release_is_asked_again_and_the_same_release_reuses_naming_its_replay(tmp_path, capsys):
    with FakeRagService(TRACES) as service:
        sut = write_sut(tmp_path, service)
        assert replay(tmp_path, sut, "--release", "r1") == 0
        first = json.loads(record_path(tmp_path / "traces.jsonl").read_text())
        assert replay(tmp_path, sut, "--release", "r2") == 0
        assert set(service.asked.values()) == {2}  # release r2 was asked every case
        assert replay_warnings(tmp_path) == []  # r2's own answers: nothing reused
        assert replay(tmp_path, sut, "--release", "r1") == 0
    assert set(service.asked.values()) == {2}  # r1 again: nothing asked
    named = f"20 answers reused from replay {first['replay']} of {first['started']} (release r1)"
    assert f"warning: {named}" in capsys.readouterr().err
    record = json.loads(record_path(tmp_path / "traces.jsonl").read_text())
    assert record["release"] == "r1" and record["reused"] == [
        {"replay": first["replay"], "started": first["started"], "release": "r1", "answers": 20}
    ]
    assert named in replay_warnings(tmp_path)


def test_without_a_release_or_an_index_each_replay_keeps_its_answers_to_itself(tmp_path, capsys):
    with FakeRagService(TRACES) as service:
        sut = write_sut(tmp_path, service)
        assert replay(tmp_path, sut) == 0
        assert capsys.readouterr().err.count("serve this replay only") == 1
        assert replay(tmp_path, sut) == 0
        assert set(service.asked.values()) == {2}
        assert replay(tmp_path, sut, "--reuse-answers") == 0  # said on purpose: reused, and named
    assert set(service.asked.values()) == {2}
    [named] = replay_warnings(tmp_path)
    assert named.startswith("20 answers reused from replay ") and "release" not in named
    assert main(["replay", "--gold", str(GOLD), "--sut", str(sut), "--out", "x", "--reuse-answers"]) == 2


def test_another_model_header_is_asked_again_a_rotated_token_is_not(tmp_path, monkeypatch):
    headers = {"Authorization": "Bearer ${FAKE_TOKEN}", "X-Model": "a"}
    with FakeRagService(TRACES, token="old") as service:
        monkeypatch.setenv("FAKE_TOKEN", "old")
        assert replay(tmp_path, write_sut(tmp_path, service, headers=headers), "--release", "r1") == 0
        service.token = "new"
        monkeypatch.setenv("FAKE_TOKEN", "new")
        assert replay(tmp_path, write_sut(tmp_path, service, headers=headers), "--release", "r1") == 0
        assert set(service.asked.values()) == {1}
        other = {**headers, "X-Model": "b"}
        assert replay(tmp_path, write_sut(tmp_path, service, headers=other), "--release", "r1") == 0
    assert set(service.asked.values()) == {2}


def test_the_release_may_come_from_the_environment_and_an_unset_one_is_one_line(
    tmp_path, monkeypatch, capsys
):
    with FakeRagService(TRACES) as service:
        sut = write_sut(tmp_path, service, release="${GIT_COMMIT}")
        monkeypatch.delenv("GIT_COMMIT", raising=False)
        assert replay(tmp_path, sut) == 2
        error = capsys.readouterr().err
        assert "release '${GIT_COMMIT}' needs the environment variable GIT_COMMIT" in error
        assert len(error.strip().splitlines()) == 1 and not service.asked
        monkeypatch.setenv("GIT_COMMIT", "3f9a1c2")
        assert replay(tmp_path, sut) == 0
        assert json.loads(record_path(tmp_path / "traces.jsonl").read_text())["release"] == "3f9a1c2"
        assert replay(tmp_path, sut, "--release", "") == 2  # an empty --release names nothing
        assert "--release: release '' is empty" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["traces", "record"])
def test_a_record_that_does_not_vouch_for_the_traces_says_so(tmp_path, damage):
    with FakeRagService(TRACES) as service:
        assert replay(tmp_path, write_sut(tmp_path, service), "--release", "r1") == 0
    traces = tmp_path / "traces.jsonl"
    if damage == "traces":
        traces.write_text("".join(traces.read_text().splitlines(keepends=True)[:-1]))
    else:
        record_path(traces).write_text("{not json")
    [warning] = replay_warnings(tmp_path)
    reason = "was written for other traces than" if damage == "traces" else "is not a readable replay record"
    assert reason in warning and warning.endswith(
        "whether its answers were reused from earlier replays is not known"
    )

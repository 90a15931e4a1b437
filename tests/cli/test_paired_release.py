"""``ragspine-eval score --release`` with the paired baseline test: a run of the release that founded the
reference pool joins it even when the paired test alone blocked it (recorded in ``pool_history``); a run
blocked by a gate as well, or a run of another release, leaves the baseline file untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ragspine_pipeline import cli

CASES = 200
LUCKY = 180  # the founding run passes 180 of 200
HONEST = 160  # a later run of the same release passes 160: blocked against a pool of that one lucky run


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rows = [
        {
            "qid": f"q{i:03d}",
            "question": f"What is fact {i}?",
            "answerable": True,
            "gold_claim_substr": [f"fact number {i:03d}"],
            "gold_citations": [f"doc{i}#1"],
        }
        for i in range(CASES)
    ]
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "paired.yaml").write_text("gates:\n  compliance: {min: 0.0}\nbaseline_test: paired\n")
    return tmp_path


def write_traces(folder: Path, passing: int) -> None:
    """Traces whose first ``passing`` cases are answered right."""
    rows = []
    for i in range(CASES):
        cited = f"doc{i}#1" if i < passing else "other#1"
        claim = f"It is fact number {i:03d}." if i < passing else "Something else."
        rows.append(
            {"qid": f"q{i:03d}", "answer": {"claim": claim, "citations": [cited]}, "retrieved_ids": [cited]}
        )
    (folder / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def score(folder: Path, passing: int, run: str, *extra: str, rewrite: bool = True) -> int:
    """Those traces (``rewrite``: written anew, else as they are) scored with promotion."""
    if rewrite:
        write_traces(folder, passing)
    args = ["score", "--gold", str(folder / "gold.jsonl"), "--trace", str(folder / "t.jsonl")]
    args += ["--config", str(folder / "paired.yaml"), "--baseline", str(folder / "b.json"), "--promote"]
    return cli.main([*args, "--run-id", run, "--out", str(folder / "r.json"), *extra])


def test_a_blocked_run_of_the_founding_release_joins_the_pool_on_the_record(folder, capsys):
    assert score(folder, LUCKY, "run-1", "--release", "r1") == 0
    entry = json.loads((folder / "b.json").read_text())["golden"]
    assert entry["pool_release"] == "r1" and entry["pooled_runs"] == 1
    capsys.readouterr()
    assert score(folder, HONEST, "run-2", "--release", "r1") == 1  # blocked: the decision stands
    assert "its case outcomes joined the pool (recorded in pool_history)" in capsys.readouterr().err
    after = json.loads((folder / "b.json").read_text())["golden"]
    assert after["pooled_runs"] == 2 and after["run"] == "run-1" and after["metrics"] == entry["metrics"]
    [join] = after["pool_history"]
    assert (join["run"], join["release"], join["from"], join["to"]) == ("run-2", "r1", 0.9, 0.85)
    report = json.loads((folder / "r.json").read_text())["release"]["paired"]
    assert report["blocks"] and report["reference_release"] == "r1" and report["reference_runs"] == 1


def test_runs_blocked_by_a_gate_too_or_of_another_release_leave_the_baseline_untouched(folder):
    assert score(folder, LUCKY, "run-1", "--release", "r1") == 0
    written = (folder / "b.json").read_bytes()
    assert score(folder, HONEST, "run-2", "--release", "r1", "--gates", "precision=0.99") == 1
    assert score(folder, HONEST, "run-3", "--release", "r2") == 1
    assert score(folder, HONEST, "run-4") == 1  # no release: not known to be of r1
    assert (folder / "b.json").read_bytes() == written


def test_the_release_a_replay_record_names_is_the_run_s_release(folder):
    def recorded(release: str) -> None:  # what `ragspine-eval replay --release` leaves beside its traces
        digest = hashlib.sha256((folder / "t.jsonl").read_bytes()).hexdigest()
        record = {"traces_sha256": digest, "release": release, "reused": [], "failed": {}}
        (folder / "t.replay.json").write_text(json.dumps(record))

    assert score(folder, LUCKY, "run-1", "--release", "r1") == 0
    write_traces(folder, HONEST)
    recorded("r1")
    assert score(folder, HONEST, "run-2", rewrite=False) == 1
    assert json.loads((folder / "b.json").read_text())["golden"]["pool_history"][0]["release"] == "r1"
    recorded("r2")  # another release: nothing known of it, nothing written
    written = (folder / "b.json").read_bytes()
    assert score(folder, HONEST, "run-3", rewrite=False) == 1 and (folder / "b.json").read_bytes() == written

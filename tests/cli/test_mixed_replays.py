"""The index check runs over every replay of a run (``--trace A --trace B``), not the first one only:
replays from two indexes block with ``mixed_index_versions`` and promote nothing, with or without
``--index-version``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragspine_pipeline import cli
from tests.cli.test_baseline_integrity import write_gold, write_traces


@pytest.fixture
def files(tmp_path):
    write_gold(tmp_path / "gold.jsonl")
    rng = np.random.default_rng(7)
    write_traces(tmp_path / "a.jsonl", rng, p=1.0, index="ix-1")
    write_traces(tmp_path / "b.jsonl", rng, p=1.0, index="ix-2")
    write_traces(tmp_path / "a2.jsonl", rng, p=1.0, index="ix-1")
    return tmp_path


def score(files, *args: str) -> list[str]:
    return ["score", "--gold", str(files / "gold.jsonl"), "--gates", "compliance=0.0", *args]


def traces(files, *names: str) -> list[str]:
    return [arg for name in names for arg in ("--trace", str(files / f"{name}.jsonl"))]


@pytest.mark.parametrize("expected", [[], ["--index-version", "ix-1"]], ids=["no-index-version", "ix-1"])
def test_replays_from_two_indexes_block_and_create_no_baseline(files, capsys, expected):
    baseline = files / "baseline.json"
    args = score(files, *traces(files, "a", "b"), *expected, "--baseline", str(baseline), "--promote")
    assert cli.main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["release"]["decision"] == "block"
    [problem] = report["release"]["integrity"]
    assert problem["reason"] == "mixed_index_versions"
    assert problem["index_versions"] == {"ix-1": 40, "ix-2": 40}
    assert "a.jsonl: ix-1" in problem["detail"] and "b.jsonl: ix-2" in problem["detail"]
    assert report["release"]["index_versions"] == ["ix-1", "ix-2"]
    assert not baseline.exists()  # a blocked run never writes a baseline


def test_the_block_reason_is_in_the_markdown_report(files, capsys):
    assert cli.main(score(files, *traces(files, "a", "b"), "--format", "markdown")) == 1
    assert "blocked: mixed_index_versions" in capsys.readouterr().out


def test_a_second_replay_from_another_index_than_requested_blocks(files, capsys):
    assert cli.main(score(files, *traces(files, "a", "a2"), "--index-version", "ix-2")) == 1
    [problem] = json.loads(capsys.readouterr().out)["release"]["integrity"]
    assert problem["reason"] == "mixed_index_versions" and problem["expected"] == "ix-2"


def test_replays_from_one_index_ship_and_promote(files, capsys):
    baseline = files / "baseline.json"
    args = score(files, *traces(files, "a", "a2"), "--index-version", "ix-1")
    assert cli.main([*args, "--baseline", str(baseline), "--promote"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["release"]["integrity"] == [] and report["flakiness"]["repeats"] == 2
    assert baseline.exists()

"""Release-gate integrity from the command line, with real OS processes: concurrent promotions never lower
a baseline or a threshold and every run is judged against the value current under the lock (local files
and S3), a replay from more than one index blocks, and the paired baseline test for a system that samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragspine_pipeline import cli
from ragspine_pipeline.decision.gates import LOWER_IS_BETTER
from ragspine_pipeline.demo.workbook import write_extraction_demo

RUNS = 20
CASES = 40


def write_gold(path: Path, cases: int = CASES) -> None:
    rows = [
        {
            "qid": f"q{i:03d}",
            "question": f"What is fact {i}?",
            "answerable": i % 8 != 0,  # some cases must be refused
            "gold_claim_substr": [f"fact number {i:03d}"] if i % 8 else [],
            "gold_citations": [f"doc{i}#1"] if i % 8 else [],
        }
        for i in range(cases)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_traces(path: Path, rng: np.random.Generator, p: float, cases: int = CASES, index="ix-1") -> None:
    """Traces where each case is answered right with probability ``p`` (a different run each call)."""
    rows = []
    for i in range(cases):
        right = rng.random() < p
        if i % 8 == 0:  # unanswerable: a right answer is a refusal
            answer = {"claim": "not in context"} if right else {"claim": "It is 42.", "citations": ["x#1"]}
            retrieved = ["x#1"]
        else:
            cited = f"doc{i}#1" if right else "other#1"
            claim = f"It is fact number {i:03d}." if right else "Something else."
            answer, retrieved = {"claim": claim, "citations": [cited]}, [cited]
        rows.append(
            {
                "qid": f"q{i:03d}",
                "answer": answer,
                "retrieved_ids": retrieved,
                "versions": {"index": index, "retriever": "bm25"},
            }
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def concurrently(commands: list[list[str]], env: dict[str, str] | None = None) -> list[int]:
    """Start every command at once (real processes), then wait for all; their exit codes."""
    processes = [
        subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or os.environ.copy()
        )
        for command in commands
    ]
    codes = []
    for process in processes:
        _out, err = process.communicate(timeout=300)
        assert process.returncode in (0, 1), err.decode()
        codes.append(process.returncode)
    return codes


def ragspine_eval(*args: str) -> list[str]:
    return [sys.executable, "-m", "ragspine_pipeline.cli", *args]


def best(values: list[float], metric: str) -> float:
    return min(values) if metric in LOWER_IS_BETTER else max(values)


def promote_runs(
    tmp_path: Path, baseline: str, env: dict[str, str] | None = None
) -> tuple[list[int], list[dict]]:
    write_gold(tmp_path / "gold.jsonl")
    rng = np.random.default_rng(15)
    commands = []
    for run in range(RUNS):
        write_traces(tmp_path / f"t{run}.jsonl", rng, p=0.75)
        commands.append(
            ragspine_eval(
                "score",
                "--gold",
                str(tmp_path / "gold.jsonl"),
                "--trace",
                str(tmp_path / f"t{run}.jsonl"),
                "--gates",
                "compliance=0.0",
                "--baseline",
                baseline,
                "--promote",
                "--run-id",
                f"run-{run}",
                "--out",
                str(tmp_path / f"r{run}.json"),
            )
        )
    codes = concurrently(commands, env)
    return codes, [json.loads((tmp_path / f"r{run}.json").read_text()) for run in range(RUNS)]


def check_final_baseline(final: dict, codes: list[int], reports: list[dict]) -> None:
    shipped = [report for code, report in zip(codes, reports, strict=True) if code == 0]
    assert shipped and len(shipped) < RUNS  # some runs ship, some are worse than what another promoted
    for report, code in zip(reports, codes, strict=True):
        assert (code == 0) == report["pass"] == (not report["release"]["regressions"])
    for metric, value in final["metrics"].items():
        # Every metric sits at the best value a shipping run reached: nothing was lowered by a later write.
        # (Reports round to 4 decimals; the file keeps the unrounded value.)
        assert round(value, 4) == best([r[metric] for r in shipped], metric), metric
    assert final["run"] in {r["release"]["run_id"] for r in shipped}


@pytest.mark.system  # twenty ragspine-eval processes at once
def test_twenty_concurrent_promotions_leave_every_metric_at_the_best_value_a_shipping_run_wrote(tmp_path):
    codes, reports = promote_runs(tmp_path, str(tmp_path / "baseline.json"))
    final = json.loads((tmp_path / "baseline.json").read_text())["golden"]
    check_final_baseline(final, codes, reports)


@pytest.mark.system  # twenty ragspine-eval processes at once
def test_the_same_across_hosts_through_s3_conditional_writes(tmp_path, bucket, s3_endpoint):
    name, client = bucket
    env = {**os.environ, "RAGSPINE_S3_ENDPOINT_URL": s3_endpoint}
    codes, reports = promote_runs(tmp_path, f"s3://{name}/release/baseline.json", env)
    final = json.loads(client.get_object(Bucket=name, Key="release/baseline.json")["Body"].read())["golden"]
    check_final_baseline(final, codes, reports)


@pytest.mark.system  # twenty ragspine-eval processes at once
def test_twenty_concurrent_extraction_promotions_never_lower_a_threshold(tmp_path):
    paths = write_extraction_demo(tmp_path / "demo")
    healthy = [json.loads(line) for line in paths["facts"].read_text().splitlines() if line.strip()]
    rng = np.random.default_rng(3)
    commands = []
    for run in range(RUNS):  # each run's parser gets a different few cells wrong
        facts = [dict(f) for f in healthy]
        for i in rng.choice(len(facts), size=int(rng.integers(0, 6)), replace=False):
            facts[i]["value"] = "WRONG"
        for i in rng.choice(len(facts), size=int(rng.integers(0, 4)), replace=False):
            facts[i]["tags"] = {"fill": "pink"}
        path = tmp_path / f"facts{run}.jsonl"
        path.write_text("".join(json.dumps(f) + "\n" for f in facts))
        commands.append(
            ragspine_eval(
                "extraction",
                "--facts",
                str(path),
                "--truth",
                str(paths["truth"]),
                "--baseline",
                str(tmp_path / "thresholds.json"),
                "--promote",
                "--out",
                str(tmp_path / f"e{run}.json"),
            )
        )
    codes = concurrently(commands)
    reports = [json.loads((tmp_path / f"e{run}.json").read_text()) for run in range(RUNS)]
    final = json.loads((tmp_path / "thresholds.json").read_text())
    shipped = [r for code, r in zip(codes, reports, strict=True) if code == 0]
    assert shipped
    for channel, threshold in final.items():
        reached = [r["channels"][channel]["accuracy"] for r in shipped if r["channels"][channel]["total"]]
        assert round(threshold, 4) == max(reached)  # reports round to 4 decimals, the file keeps all
    for code, report in zip(codes, reports, strict=True):
        assert (code == 0) == report["pass"]


def test_a_replay_from_two_indexes_blocks_with_its_reason_and_promotes_nothing(tmp_path, capsys):
    write_gold(tmp_path / "gold.jsonl")
    rng = np.random.default_rng(1)
    write_traces(tmp_path / "a.jsonl", rng, p=1.0, index="ix-A")
    write_traces(tmp_path / "b.jsonl", rng, p=1.0, index="ix-B")
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    other = (tmp_path / "b.jsonl").read_text().splitlines()
    (tmp_path / "mixed.jsonl").write_text("\n".join(lines[::2] + other[1::2]) + "\n")
    common = ["score", "--gold", str(tmp_path / "gold.jsonl"), "--gates", "compliance=0.0"]
    baseline = tmp_path / "baseline.json"
    assert (
        cli.main(
            [*common, "--trace", str(tmp_path / "mixed.jsonl"), "--baseline", str(baseline), "--promote"]
        )
        == 1
    )
    report = json.loads(capsys.readouterr().out)
    [problem] = report["release"]["integrity"]
    assert problem["reason"] == "mixed_index_versions" and problem["index_versions"] == {
        "ix-A": 20,
        "ix-B": 20,
    }
    assert not baseline.exists()  # a blocked run never writes a baseline

    # One index, but not the one the run was asked to evaluate.
    assert cli.main([*common, "--trace", str(tmp_path / "a.jsonl"), "--index-version", "ix-B"]) == 1
    [problem] = json.loads(capsys.readouterr().out)["release"]["integrity"]
    assert problem["expected"] == "ix-B" and "traces name ix-A" in problem["detail"]
    assert cli.main([*common, "--trace", str(tmp_path / "a.jsonl"), "--index-version", "ix-A"]) == 0
    capsys.readouterr()
    assert cli.main([*common, "--trace", str(tmp_path / "mixed.jsonl"), "--format", "markdown"]) == 1
    assert "- **blocked: mixed_index_versions**: traces name ix-A (20 traces), ix-B (20 traces)" in (
        capsys.readouterr().out
    )


# -- the paired baseline test ------------------------------------------------------------------------


@pytest.fixture
def paired_setup(tmp_path):
    write_gold(tmp_path / "gold.jsonl", cases=200)
    (tmp_path / "paired.yaml").write_text(
        "gates:\n  compliance: {min: 0.0}\nbaseline_test: paired\npaired: {alpha: 0.05, margin: 0.02}\n"
    )
    return tmp_path


def paired_run(folder: Path, p: float, seed: int) -> tuple[int, dict]:
    write_traces(folder / "t.jsonl", np.random.default_rng(seed), p=p, cases=200)
    out = folder / "r.json"
    code = cli.main(
        [
            "score",
            "--gold",
            str(folder / "gold.jsonl"),
            "--trace",
            str(folder / "t.jsonl"),
            "--config",
            str(folder / "paired.yaml"),
            "--baseline",
            str(folder / "b.json"),
            "--promote",
            "--run-id",
            f"run-{seed}",
            "--out",
            str(out),
        ]
    )
    return code, json.loads(out.read_text())


def test_paired_mode_does_not_block_sampling_noise_and_moves_only_on_a_significant_gain(paired_setup):
    code, first = paired_run(paired_setup, 0.8, seed=1)
    assert code == 0 and first["release"]["paired"] is None  # nothing recorded yet: this run is the reference
    recorded = json.loads((paired_setup / "b.json").read_text())["golden"]
    assert len(recorded["cases"]) == 200 and recorded["run"] == "run-1" and recorded["pooled_runs"] == 1
    shipped = ["run-1"]
    for seed in range(2, 12):  # the same system, resampled: the first shipping runs fill the pool of 5
        code, report = paired_run(paired_setup, 0.8, seed)
        if code == 0:
            shipped.append(f"run-{seed}")
        assert report["release"]["paired"]["reference_runs"] == min(len(shipped) - (code == 0), 5)
    assert len(shipped) >= 10
    recorded = json.loads((paired_setup / "b.json").read_text())["golden"]
    assert recorded["pooled_runs"] == 5 and recorded["run"] == shipped[4]  # then frozen: never moved on noise
    assert all(runs == 5 for _, runs in recorded["pool"].values())
    code, better = paired_run(paired_setup, 0.97, seed=20)
    assert code == 0 and better["release"]["paired"]["improves"]
    recorded = json.loads((paired_setup / "b.json").read_text())["golden"]
    assert recorded["run"] == "run-20" and recorded["pooled_runs"] == 1  # restarted from that run alone


def test_an_old_paired_baseline_with_only_cases_is_compared_and_then_pooled(paired_setup):
    paired_run(paired_setup, 0.8, seed=1)
    path = paired_setup / "b.json"
    entry = json.loads(path.read_text())["golden"]
    del entry["pool"], entry["pooled_runs"]  # as written before pools
    path.write_text(json.dumps({"golden": entry}))
    code, report = paired_run(paired_setup, 0.8, seed=2)
    assert code == 0 and report["release"]["paired"]["reference_runs"] == 1
    assert json.loads(path.read_text())["golden"]["pooled_runs"] == 2


def test_paired_mode_blocks_a_real_drop_with_the_flipped_cases(paired_setup):
    paired_run(paired_setup, 0.9, seed=1)
    code, report = paired_run(paired_setup, 0.75, seed=2)
    assert code == 1
    [regression] = report["release"]["regressions"]
    assert regression["metric"] == "case_pass_rate (paired)" and regression["delta"] < -0.05
    paired = report["release"]["paired"]
    assert (
        paired["blocks"] and len(paired["regressed"]) > len(paired["improved"]) and paired["p_worse"] < 0.05
    )


def test_replays_of_a_sampling_system_report_per_case_flakiness(tmp_path, capsys):
    write_gold(tmp_path / "gold.jsonl")
    rng = np.random.default_rng(4)
    traces = []
    for replay in range(3):
        write_traces(tmp_path / f"r{replay}.jsonl", rng, p=0.8)
        traces += ["--trace", str(tmp_path / f"r{replay}.jsonl")]
    assert (
        cli.main(["score", "--gold", str(tmp_path / "gold.jsonl"), *traces, "--gates", "compliance=0.0"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    flaky = report["flakiness"]
    assert flaky["repeats"] == 3 and flaky["cases"] == CASES and 0 < flaky["flaky"] < CASES
    assert all(0 < case["passed"] < 3 for case in flaky["flaky_cases"])
    assert report["trace"] == str(tmp_path / "r0.jsonl")  # the first replay is the run's

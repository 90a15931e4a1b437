"""Every figure and the release decision are functions of the case set, not of line order.

The embedded demo replayed on a degraded index (many fractional metrics, a blocked release) is scored
with its golden lines and its trace lines shuffled; everything but the per-case rows and the run id
must come out bit for bit the same.
"""

from __future__ import annotations

import json
import random
import shutil
from datetime import date
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision import golden
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, evaluate
from ragspine_pipeline.decision.release import decide
from ragspine_pipeline.demo.build import init_demo, rebuild_index, replay_golden
from tests.conftest import PROFILE

# 200 orders in the deep suite (make test-deep), the first 50 of the same orders in make test, 10 in a
# quick run.
PERMUTATIONS = {"quick": 10, "ci": 50}.get(PROFILE, 200)
EVALUATE_EVERY = 4  # unrounded figures for a quarter of them: the CLI run dominates the cost
SEED = 20261122


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("order") / "demo"
    init_demo(root, today=date(2026, 11, 22), traces_per_day=40)
    rebuild_index(root, degraded=True)
    gold_lines = [line for line in (root / "golden" / "gold.jsonl").read_text().splitlines() if line.strip()]
    trace_lines = [json.dumps(trace) for trace in replay_golden(root, ts=0)]
    return root, gold_lines, trace_lines


def shuffled_inputs(demo, folder: Path, rng: random.Random | None) -> tuple[Path, Path]:
    """The golden set (with its lock) and the traces, lines shuffled by ``rng`` (None: as built)."""
    root, gold_lines, trace_lines = demo
    gold_lines, trace_lines = list(gold_lines), list(trace_lines)
    if rng is not None:
        rng.shuffle(gold_lines)
        rng.shuffle(trace_lines)
    folder.mkdir(parents=True, exist_ok=True)
    gold, traces = folder / "gold.jsonl", folder / "traces.jsonl"
    gold.write_text("\n".join(gold_lines) + "\n")
    traces.write_text("\n".join(trace_lines) + "\n")
    shutil.copyfile(golden.lock_path(root / "golden" / "gold.jsonl"), golden.lock_path(gold))
    return gold, traces


def figures(report: dict) -> str:
    """Everything the JSON report decides, per-case lists in qid order (they follow the golden file)."""
    out = {key: value for key, value in report.items() if key not in ("cases", "release")}
    out["release"] = {key: value for key, value in report["release"].items() if key != "run_id"}
    for gate in out.get("qa_gates", {}).values():
        gate["failures"] = sorted(gate["failures"], key=lambda failure: failure["id"])
    if "fabrication" in out:
        out["fabrication"]["cases"] = sorted(out["fabrication"]["cases"], key=lambda case: case["id"])
    out["cases"] = sorted(report["cases"], key=lambda case: case["qid"])
    return json.dumps(out, sort_keys=True)


def unrounded(evaluation) -> str:
    """The evaluation's figures at full precision (``json.dumps`` writes a float's shortest exact form)."""
    release = {key: value for key, value in evaluation.release.as_dict().items() if key != "run_id"}
    return json.dumps(
        {
            "metrics": evaluation.metrics,
            "layered": evaluation.layered.metrics,
            "denominators": evaluation.layered.denominators,
            "slices": [(s.dimension, s.value, s.as_dict()) for s in evaluation.slices],
            "qa": {name: (gate.total, gate.passed) for name, gate in evaluation.qa.gates.items()},
            "gates": [(r.gate.metric, r.value, r.passed) for r in evaluation.gates],
            "release": release,
        },
        sort_keys=True,
    )


@pytest.mark.system  # the CLI's score of every shuffled order
def test_shuffled_golden_and_trace_lines_give_the_same_report_and_decision(demo, tmp_path):
    """200 shuffles through the CLI (JSON report, rounded to 4 decimals); every fourth also through
    :func:`evaluate`, whose unrounded figures must be equal as floats, not merely close."""
    root = demo[0]
    config = load_config(root / "gates.yaml", KNOWN_METRICS)
    evidence = load_evidence(root / "evidence.jsonl").table
    rng = random.Random(SEED)
    reports, exact = {}, {}
    for i in range(PERMUTATIONS + 1):
        gold, traces = shuffled_inputs(demo, tmp_path / "in", None if i == 0 else rng)
        out = tmp_path / "report.json"
        code = main(["score", "--gold", str(gold), "--trace", str(traces),
                     "--evidence", str(root / "evidence.jsonl"), "--config", str(root / "gates.yaml"),
                     "--format", "json", "--out", str(out)])  # fmt: skip
        assert code == 1  # blocked, every time
        report = json.loads(out.read_text())
        reports.setdefault(figures(report), []).append(i)
        if i % EVALUATE_EVERY == 0:
            lock, warning = golden.verified_lock(gold)  # the lock hashes content, not line order
            assert warning is None and lock.version == report["release"]["golden_version"]
            evaluation = evaluate(
                load_gold(gold).table,
                load_traces(traces).table,
                gates=config.gate_list(KNOWN_METRICS),
                config=config,
                run_id=f"run-{i}",
                evidence=evidence,
                lock=lock,
            )
            exact.setdefault(unrounded(evaluation), []).append(i)
    assert len(reports) == 1, f"{len(reports)} different reports: {list(reports.values())}"
    assert len(exact) == 1, f"{len(exact)} different unrounded results: {list(exact.values())}"
    # The run is worth checking: fractional means, and a release that blocks.
    (result,) = exact
    layered = json.loads(result)["layered"]
    assert 0 < layered["context_precision"] < 1 and 0 < layered["candidate_recall"] < 1
    assert json.loads(result)["release"]["decision"] == "block"


def test_the_index_version_of_a_tied_run_does_not_depend_on_trace_order():
    def index_version(counts: dict[str, int]) -> str | None:
        return decide(
            [], [], None, histogram=None, index_versions=counts, golden_version=None, golden_sha256=None,
            run_id="r",
        ).index_version  # fmt: skip

    assert index_version({"ix-2": 3, "ix-1": 3}) == index_version({"ix-1": 3, "ix-2": 3}) == "ix-1"
    assert index_version({"ix-1": 2, "ix-2": 5}) == "ix-2"  # the most traces first
    assert index_version({}) is None

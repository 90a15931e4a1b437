"""`golden_traces` with a SUT declared in a file (`RAGSPINE_SUT_CONFIG`): a Python function that fails on
some cases. Above the allowed share the step fails naming them, and its retry in the same run asks only
what is missing, naming the reuse in the metadata, the decision and the report; below it the cases are
scored as missing and the decision's warnings name them."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.demo.build import init_demo
from ragspine_pipeline.demo.reference_engine import ReferenceEngine
from tests.defs.declared import demo_definitions, demo_env

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

ASKED: Counter[str] = Counter()
FAILING: set[str] = set()
FAILING_ONCE: set[str] = set()  # fail on their first call only: an upstream blip
ENGINE: dict[str, ReferenceEngine] = {}
LOCK = threading.Lock()


def answer(case: dict) -> dict:
    """The demo's engine behind a flaky wrapper: what a user's `kind: python` function looks like."""
    with LOCK:
        ASKED[case["qid"]] += 1
        blip = case["qid"] in FAILING_ONCE and ASKED[case["qid"]] == 1
    if case["qid"] in FAILING or blip:
        raise ConnectionError("upstream vector store timed out")
    return ENGINE["demo"].answer(case["qid"], case["question"], reference_date=case["reference_date"])


@pytest.fixture
def demo(tmp_path):
    root = tmp_path / "demo"
    init_demo(root, today=date(2026, 11, 22), traces_per_day=20)
    ENGINE["demo"] = ReferenceEngine.from_manifest(root / "index" / "manifest.json")
    ASKED.clear()
    FAILING.clear()
    FAILING_ONCE.clear()
    return root


def run(demo: Path, out: Path, share: str):
    sut = out / "sut.yaml"
    sut.parent.mkdir(parents=True, exist_ok=True)
    sut.write_text(json.dumps({"kind": "python", "function": f"{__name__}:answer"}))
    env = {"RAGSPINE_SUT_CONFIG": str(sut), "RAGSPINE_REPLAY_MAX_FAILED_SHARE": share}
    defs = demo_definitions(demo_env(demo, out, **env))
    job = defs.resolve_job_def("reeval_on_index_rebuild")
    with dg.instance_for_test() as instance:
        return job.execute_in_process(instance=instance, raise_on_error=False)


def test_failures_above_the_share_fail_the_step_and_its_retry_asks_only_the_missing(demo, tmp_path):
    FAILING_ONCE.update({"FRZ-01", "FRZ-02"})
    result = run(demo, tmp_path / "out", "0")
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY")
    error = failure.event_specific_data.error
    message = error.message + (error.cause.message if error.cause else "")  # the retried Failure's
    assert failure.step_key == "golden_traces" and "2 of" in message and "FRZ-01: ConnectionError" in message
    assert result.success  # the step's retry, in the same run, asked the two again and no other
    assert {ASKED["FRZ-01"], ASKED["FRZ-02"]} == {2} and set(ASKED.values()) == {1, 2}
    reused = len(ASKED) - 2
    [metadata] = [m.metadata for m in result.asset_materializations_for_node("golden_traces")]
    named = f"{reused} answers reused from replay {result.run_id} of "
    assert metadata["answers_reused"].value == reused and metadata["reused_from"].value.startswith(named)
    decision = result.output_for_node("golden_evaluation", "release_decision")
    assert [w for w in decision.warnings if "reused" in w] == [metadata["reused_from"].value]
    reports = tmp_path / "out" / "reports" / "runs" / result.run_id
    assert metadata["reused_from"].value in json.loads((reports / "evaluation.json").read_text())["warnings"]
    assert named in (reports / "slice_report.html").read_text()


def test_failures_below_the_share_are_scored_missing_and_named_in_the_decision(demo, tmp_path):
    FAILING.add("FRZ-03")
    result = run(demo, tmp_path / "out", "0.05")
    decision = result.output_for_node("golden_evaluation", "release_decision")
    [warning] = [w for w in decision.warnings if "could not be asked" in w]
    assert warning.startswith("1 case(s) could not be asked of the SUT and are scored as missing: FRZ-03 (")
    traces = result.output_for_node("golden_traces")
    assert "FRZ-03" not in set(traces["qid"]) and traces.attrs["failed"] == {
        "FRZ-03": "qid=FRZ-03: ConnectionError: upstream vector store timed out"
    }

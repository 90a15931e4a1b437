"""`golden_traces` asks the service as it answers now: a new run for the same index version (a relaunch,
a re-evaluation after the service changed) asks every case again, a re-execution of a run from its
failure resumes that run's replay, and reuse across runs happens only when the service's settings say
so, named in the metadata. The two golden assets only, materialised on a temporary SQLite instance."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.golden import INDEX_VERSION_TAG, golden_assets
from ragspine_pipeline.defs.io import IO_MANAGER_KEY, ObjectStoreIOManager
from ragspine_pipeline.defs.resources import (
    AlertsResource,
    EvalFiles,
    IndexManifestResource,
    SutResource,
    TraceStoreResource,
    packaged_gates,
)
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.sources.sut import PythonSut

ROOT = Path(__file__).resolve().parents[2]
GOLD = ROOT / "examples/wfgy/gold.jsonl"
ASKED: Counter[str] = Counter()
STATE = {"answer": "before", "down": set()}  # what the service answers now, and the cases it cannot
LOCK = threading.Lock()
WORK = "RAGSPINE_TEST_GOLDEN_ANSWERS"  # the work folder of the reconstructable job below

STORE = {IO_MANAGER_KEY: ObjectStoreIOManager()}  # where a service's steps hand on their values


def ask(case: dict) -> dict:
    """The service under test: answers with what it answers now, counting every question."""
    with LOCK:
        ASKED[case["qid"]] += 1
    if case["qid"] in STATE["down"]:
        raise ConnectionError("upstream timed out")
    return {"answer": f"{STATE['answer']}: {case['question']}", "retrieved_ids": ["c1"]}


def service_at(work: Path, reuse_answers: bool = False) -> Service:
    settings = PythonSut(function=f"{__name__}:ask", concurrency=4)
    return Service(
        files=EvalFiles(
            golden_path=str(GOLD),
            baseline_path=str(work / "baseline.json"),
            reports_dir=str(work / "reports"),
            work_dir=str(work / "work"),
        ),
        sut=SutResource(
            kind="declared",
            settings_json=settings.model_dump_json(),
            answers_dir=str(work / "answers"),
            reuse_answers=reuse_answers,
        ),
        alerts=AlertsResource(outbox_path=str(work / "outbox.jsonl")),
        trace_store=TraceStoreResource(uri=str(work / "traces")),
        index_manifest=IndexManifestResource(uri=None),
        gates_config=packaged_gates(),
    )


@pytest.fixture(autouse=True)
def service_state():
    ASKED.clear()
    STATE.update(answer="before", down=set())


def materialize(service: Service, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        golden_assets(service),
        resources=STORE,
        instance=instance,
        tags={INDEX_VERSION_TAG: "ix-7"},
    )


def answers(result) -> set[str]:
    return {answer.split(":")[0] for answer in result.output_for_node("golden_traces")["claim"]}


def metadata(result) -> dict:
    [materialization] = result.asset_materializations_for_node("golden_traces")
    return {key: value.value for key, value in materialization.metadata.items()}


@pytest.mark.system  # a whole code-location runs
def test_a_new_run_for_the_same_index_asks_the_changed_service_again_unless_told_to_reuse(tmp_path):
    with dg.instance_for_test() as instance:
        first = materialize(service_at(tmp_path), instance)
        STATE["answer"] = "after"  # the service changed; the index version did not
        again = materialize(service_at(tmp_path), instance)
        assert set(ASKED.values()) == {2} and len(ASKED) == 20
        reused = materialize(service_at(tmp_path, reuse_answers=True), instance)
    assert set(ASKED.values()) == {2}  # reuse said in the settings: nothing asked, and named
    assert answers(first) == {"before"} and answers(again) == answers(reused) == {"after"}
    assert metadata(again)["answers_reused"] == 0 and metadata(again)["reused_from"] == "none"
    assert metadata(reused)["answers_reused"] == 20
    assert metadata(reused)["reused_from"].startswith(f"20 answers reused from replay {again.run_id} of ")
    assert reused.output_for_node("golden_traces").attrs["reused"][0]["replay"] == again.run_id


def golden_job() -> dg.JobDefinition:
    """The two golden assets as a job Dagster can reconstruct (what a re-execution needs)."""
    assets = golden_assets(service_at(Path(os.environ[WORK])))
    job = dg.define_asset_job("golden", executor_def=dg.in_process_executor)
    return dg.Definitions(assets=assets, jobs=[job], resources=STORE).resolve_job_def("golden")


@pytest.mark.system  # a whole code-location runs
def test_a_re_execution_from_failure_resumes_its_run_and_a_new_run_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv(WORK, str(tmp_path))
    monkeypatch.setenv("RAGSPINE_STEP_RETRIES", "0")  # the failure fails the run
    job = dg.reconstructable(golden_job)
    tags = {INDEX_VERSION_TAG: "ix-7"}
    with dg.instance_for_test() as instance:
        STATE["down"] = {"HR-001", "IT-002"}
        with dg.execute_job(job, instance, tags=tags) as failed:
            assert not failed.success
        STATE["down"] = set()
        ASKED.clear()
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        # The UI's "re-execute from failure" carries the run's tags; execute_job is told to.
        with dg.execute_job(job, instance, tags=tags, reexecution_options=options) as resumed:
            assert resumed.success and sorted(ASKED) == ["HR-001", "IT-002"]
            [event] = resumed.get_asset_materialization_events()
            named = event.step_materialization_data.materialization.metadata["reused_from"].value
        assert named.startswith(f"18 answers reused from replay {failed.run_id} of ")
        ASKED.clear()
        with dg.execute_job(job, instance, tags=tags) as relaunched:
            assert relaunched.success and len(ASKED) == 20


# -- the paired baseline in the code location --------------------------------------------------------

PAIRED_CASES = 200


def grade(case: dict) -> dict:
    """A service that answers the first STATE["passing"] cases of the paired golden set right."""
    i = int(case["qid"][1:])
    cited = f"doc{i}#1" if i < STATE["passing"] else "other#1"
    claim = f"It is fact number {i:03d}." if i < STATE["passing"] else "Something else."
    return {"answer": {"claim": claim, "citations": [cited]}, "retrieved_ids": [cited]}


@pytest.mark.system  # two runs of the golden path, evaluation and ratchet (~15 s)
def test_a_run_of_the_founding_release_that_the_paired_test_alone_blocks_joins_the_pool(tmp_path):
    """The code location passes the SUT settings' release to the ratchet, as `score --release` does: a
    blocked honest re-run of the release that founded the reference pool joins it, on the record."""
    from ragspine_pipeline.defs.evaluation import evaluation_asset
    from ragspine_pipeline.defs.release import release_assets

    rows = [
        {"qid": f"q{i:03d}", "question": f"What is fact {i}?", "answerable": True,
         "gold_claim_substr": [f"fact number {i:03d}"], "gold_citations": [f"doc{i}#1"]}
        for i in range(PAIRED_CASES)
    ]  # fmt: skip
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "paired.yaml"
    config.write_text("gates:\n  compliance: {min: 0.0}\nbaseline_test: paired\n")
    settings = PythonSut(function=f"{__name__}:grade", concurrency=4, release="r1")
    service = Service(
        files=EvalFiles(
            golden_path=str(gold),
            baseline_path=str(tmp_path / "baseline.json"),
            reports_dir=str(tmp_path / "reports"),
            work_dir=str(tmp_path / "work"),
        ),
        sut=SutResource(kind="declared", settings_json=settings.model_dump_json()),
        alerts=AlertsResource(outbox_path=str(tmp_path / "outbox.jsonl")),
        trace_store=TraceStoreResource(uri=str(tmp_path / "traces")),
        index_manifest=IndexManifestResource(uri=None),
        gates_config=config,
    )
    checks, baseline = release_assets(service)
    assets = [*golden_assets(service), evaluation_asset(service), baseline, checks]
    with dg.instance_for_test() as instance:
        for passing, run in ((180, "lucky"), (160, "honest")):  # the same release, a lucky run first
            STATE["passing"] = passing
            result = dg.materialize(
                assets,
                resources=STORE,
                instance=instance,
                tags={INDEX_VERSION_TAG: "ix-7"},
                raise_on_error=False,
            )
            assert result.success, run
    entry = json.loads((tmp_path / "baseline.json").read_text())["golden"]
    assert entry["pool_release"] == "r1" and entry["pooled_runs"] == 2
    [join] = entry["pool_history"]  # the blocked honest run joined, recorded
    assert (join["release"], join["from"], join["to"]) == ("r1", 0.9, 0.85)

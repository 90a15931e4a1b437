"""The LLM judge inside the golden run: judged rows join metric_table, judged gates gate, faults only warn."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from ragspine_pipeline.component import definitions_of
from ragspine_pipeline.definitions import location
from ragspine_pipeline.defs.release import check_name
from ragspine_pipeline.demo.build import init_demo
from tests.defs.declared import demo_definitions, demo_env, demo_service
from tests.defs.test_code_location import TODAY
from tests.judge.fake_judge import FakeJudge

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

PACKAGED_GATES = Path(__file__).resolve().parents[2] / "ragspine_pipeline" / "demo" / "gates.yaml"


def relevancy(request: dict) -> str:
    return json.dumps({"score": 4, "reason": "on topic"})


@pytest.fixture
def demo(tmp_path, monkeypatch):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=20)
    gates = tmp_path / "gates.yaml"
    text = PACKAGED_GATES.read_text().replace("gates:\n", "gates:\n  judge_answer_relevancy: {min: 3.5}\n", 1)
    gates.write_text(text)
    monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a")
    monkeypatch.setenv("RAGSPINE_JUDGE_MAX_RETRIES", "0")
    return tmp_path


def reeval(root: Path, **env: str):
    defs = demo_definitions(demo_env(root / "demo", root, RAGSPINE_JUDGE_CACHE=str(root / "cache"), **env))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("reeval_on_index_rebuild").execute_in_process(
            instance=instance, raise_on_error=False
        )
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    decision = json.loads((root / "reports" / "runs" / result.run_id / "release_decision.json").read_text())
    return result, checks, decision


def test_judged_scores_join_the_metric_table_and_their_gate_passes(demo, monkeypatch):
    with FakeJudge(reply_for=relevancy) as fake:
        monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", fake.url)
        result, checks, decision = reeval(demo, RAGSPINE_GATES_CONFIG=str(demo / "gates.yaml"))
        assert fake.requests, "the judge was asked"
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert checks["judge_completed"].passed and checks[check_name("judge_answer_relevancy")].passed
    assert decision["decision"] == "ship" and decision["unmeasured_gates"] == []
    table = pq.read_table(demo / "reports" / "latest" / "metric_table.parquet").to_pylist()
    judged = [row for row in table if row["metric"] == "judge_answer_relevancy"]
    assert {row["model"] for row in judged} == {"judge-a", "combined"}
    assert all(row["value"] == 4.0 for row in judged if row["applicable"])
    assert all(row["model"] is None for row in table if not row["metric"].startswith("judge_"))
    report = json.loads((demo / "reports" / "latest" / "judge_report.json").read_text())
    assert report["metrics"]["answer_relevancy"]["combined"]["mean"] == 4.0
    # the slice report shows the judged metrics with their intervals, overall and per slice
    markdown = (demo / "reports" / "latest" / "slice_report.md").read_text()
    assert "## LLM judge (judge-a; ragspine-judge-v1)" in markdown
    assert "| answer_relevancy | all |" in markdown and "| answer_relevancy | workflow=" in markdown
    assert 'data-section="judge"' in (demo / "reports" / "latest" / "slice_report.html").read_text()


def test_the_nightly_run_judges_a_seeded_sub_sample(demo, monkeypatch):
    day = (TODAY - timedelta(days=1)).isoformat()
    gates = str(demo / "gates.yaml")
    service = demo_service(
        demo_env(demo / "demo", demo, RAGSPINE_JUDGE_PRODUCTION_SAMPLE="7", RAGSPINE_GATES_CONFIG=gates)
    )
    defs = location(definitions_of(service))
    with FakeJudge(reply_for=relevancy) as fake, dg.instance_for_test() as instance:
        monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", fake.url)
        result = dg.materialize(
            [defs.get_assets_def("production_traces"), defs.get_assets_def("production_metrics")],
            resources=defs.resources,
            instance=instance,
            partition_key=day,
        )
        asked = {request["messages"][1]["content"] for request in fake.requests}
    assert result.success
    summary = json.loads((demo / "reports" / "production" / f"{day}.json").read_text())
    judged = summary["judge"]["metrics"]["answer_relevancy"]
    assert judged["combined"]["n"] == 7 and judged["combined"]["mean"] == 4.0
    assert summary["judge"]["metrics"]["context_recall"]["not_applicable"] == 7  # no reference in production
    assert 7 <= len(asked) <= 14  # relevancy for each, faithfulness where the registry has the chunks
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["judge_completed"].passed


def test_a_judge_that_is_down_warns_and_its_gate_blocks_as_unmeasured(demo, monkeypatch, closed_port):
    monkeypatch.setenv("RAGSPINE_JUDGE_BASE_URL", f"http://127.0.0.1:{closed_port}/v1")
    result, checks, decision = reeval(demo, RAGSPINE_GATES_CONFIG=str(demo / "gates.yaml"))
    judge = checks["judge_completed"]
    assert not judge.passed and judge.severity == dg.AssetCheckSeverity.WARN
    assert "connection refused" in judge.description
    # the deterministic metrics were produced and decided on; the judged gate failed for want of a number
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {"metric_table", "release_decision"} <= materialized
    assert decision["decision"] == "block" and decision["failed_gates"] == []
    assert [g["metric"] for g in decision["unmeasured_gates"]] == ["judge_answer_relevancy"]
    assert not checks[check_name("judge_answer_relevancy")].passed


def test_without_a_judge_nothing_is_judged(tmp_path):
    init_demo(tmp_path / "demo", today=TODAY, traces_per_day=20)
    result, checks, _decision = reeval(tmp_path)
    assert result.success and checks["judge_completed"].passed
    assert checks["judge_completed"].metadata["status"].value == "off"
    table = pq.read_table(tmp_path / "reports" / "latest" / "metric_table.parquet")
    assert not any(m.startswith("judge_") for m in table.column("metric").to_pylist())
    assert not (tmp_path / "reports" / "latest" / "judge_report.json").exists()

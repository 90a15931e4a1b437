"""The demo story as a new user runs it, through the Makefile on a fresh instance: `make run` (ships),
then `make demo-regression` (blocks); what the Dagster instance, the reports folder and the baseline
say afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.release import DECISION_TAG, check_name

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.system,  # two make targets, each a whole-graph run on a fresh SQLite instance
    pytest.mark.skipif(
        shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "ragspine-eval").exists(),
        reason="needs make and the project's .venv (make test creates it)",
    ),
]


class DemoStory:
    """The folders of one `make run` + `make demo-regression`, and the instance they ran on."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "dagster"
        self.demo = root / "demo"
        self.reports = root / "reports"
        self.env = {
            **os.environ,
            "RAGSPINE_HOME": str(self.demo),
            "RAGSPINE_REPORTS": str(self.reports),
            "RAGSPINE_WORK": str(root / "work"),
            "RAGSPINE_ALERTS_OUTBOX": str(root / "alerts" / "outbox.jsonl"),
        }
        for name in ("VIRTUAL_ENV", "SLACK_BOT_TOKEN", "SLACK_CHANNEL", "DAGSTER_HOME"):
            self.env.pop(name, None)

    def make(self, target: str) -> subprocess.CompletedProcess:
        argv = ["make", "-s", target, f"DAGSTER_HOME={self.home}", f"DEMO={self.demo}"]
        return subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=900)

    def decision(self, run_id: str) -> dict:
        return json.loads((self.reports / "runs" / run_id / "release_decision.json").read_text())


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> tuple[DemoStory, dg.DagsterRun, dg.DagsterRun, str, str]:
    """(story, the shipping run, the blocked run, the baseline after `make run`, after the regression)."""
    story = DemoStory(tmp_path_factory.mktemp("story"))
    shipped = story.make("run")
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    baseline_after_ship = (story.demo / "baseline.json").read_text()
    blocked = story.make("demo-regression")
    assert blocked.returncode == 0, blocked.stdout + blocked.stderr  # `--expect block` held
    assert "release decision: BLOCK" in blocked.stdout
    baseline_after_block = (story.demo / "baseline.json").read_text()
    with dg.DagsterInstance.from_config(str(story.home)) as instance:
        [ship_run] = instance.get_runs(dg.RunsFilter(job_name="full_eval"))
        [block_run] = instance.get_runs(dg.RunsFilter(job_name="reeval_on_index_rebuild"))
        story.check_evaluations = {
            run.run_id: [
                record.get_dagster_event().event_specific_data
                for record in instance.all_logs(
                    run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
                )
            ]
            for run in (ship_run, block_run)
        }
        story.materialized = {
            run.run_id: {
                record.get_dagster_event().asset_key.to_user_string()
                for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
            }
            for run in (ship_run, block_run)
        }
    return story, ship_run, block_run, baseline_after_ship, baseline_after_block


def test_make_demo_regression_is_a_successful_run_that_blocks_and_promotes_nothing(story):
    story, ship_run, block_run, baseline_after_ship, baseline_after_block = story
    assert ship_run.status == dg.DagsterRunStatus.SUCCESS and ship_run.tags[DECISION_TAG] == "ship"
    # The release is bad, the pipeline is fine: a successful run whose verdict is its tag ...
    assert block_run.status == dg.DagsterRunStatus.SUCCESS
    assert block_run.tags[DECISION_TAG] == "block"
    decision = story.decision(block_run.run_id)
    assert decision["decision"] == "block"
    # ... whose failed gate checks are exactly the failed gates, hard ones at ERROR severity ...
    evaluations = story.check_evaluations[block_run.run_id]
    failed_checks = {e.check_name for e in evaluations if not e.passed}
    failed_gate_checks = {name for name in failed_checks if name.startswith("gate_")}
    failed_gates = [g for g in decision["gates"] if g["pass"] is False]
    assert failed_gates and failed_gate_checks == {check_name(g["metric"]) for g in failed_gates}
    severity = {e.check_name: e.severity for e in evaluations}
    for gate in failed_gates:
        expected = dg.AssetCheckSeverity.ERROR if gate["severity"] == "hard" else dg.AssetCheckSeverity.WARN
        assert severity[check_name(gate["metric"])] == expected
    verdict = {e.check_name: e.passed for e in evaluations}["release_ships"]
    assert verdict is False and severity["release_ships"] == dg.AssetCheckSeverity.ERROR
    assert {e.check_name: e.passed for e in story.check_evaluations[ship_run.run_id]}["release_ships"]
    # ... and no baseline was written: no materialisation, the file byte for byte as the ship left it.
    assert "baseline" in story.materialized[ship_run.run_id]
    assert "baseline" not in story.materialized[block_run.run_id]
    assert "release_decision" in story.materialized[block_run.run_id]
    assert baseline_after_block == baseline_after_ship
    assert json.loads(baseline_after_ship)["golden"]["run"] == ship_run.run_id

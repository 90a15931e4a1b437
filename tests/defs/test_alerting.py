"""Slack alerts end to end: the demo regression, its de-duplication and recovery, and a crashed run,
against a fake Slack Web API on loopback (a real HTTP server) through slack-sdk."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline import cli
from ragspine_pipeline.defs import local
from ragspine_pipeline.demo.build import init_demo
from tests.defs.declared import demo_definitions

TOKEN = "xoxb-demo-secret-token-123"


def demo_environment(tmp_path, monkeypatch, fake_slack, traces_per_day: int) -> dict[str, str]:
    """The environment `make demo-regression` would see on a fresh demo, with Slack at the fake server."""
    init_demo(tmp_path / "demo", today=date(2026, 11, 22), traces_per_day=traces_per_day)
    env = {
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "RAGSPINE_HOME": str(tmp_path / "demo"),
        "RAGSPINE_REPORTS": str(tmp_path / "reports"),
        "RAGSPINE_WORK": str(tmp_path / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(tmp_path / "alerts" / "outbox.jsonl"),
        "RAGSPINE_WEBSERVER_URL": "http://dagster.example:3000",
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_CHANNEL": "#rag-releases",
        "SLACK_API_BASE_URL": fake_slack.url,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def demo_env(tmp_path, monkeypatch, fake_slack) -> dict[str, str]:
    return demo_environment(tmp_path, monkeypatch, fake_slack, traces_per_day=40)


def rebuild(env: dict[str, str], *flags: str) -> None:
    assert cli.main(["demo", "rebuild-index", "--root", env["RAGSPINE_HOME"], *flags]) == 0


@pytest.mark.system  # the four make targets' runs in a row, on the demo's full week of traffic
def test_the_make_targets_post_one_message_per_real_change_and_nothing_on_a_quiet_week(
    tmp_path, monkeypatch, fake_slack
):
    """`make run` on a fresh demo (its full week of production traffic), `make demo-regression`, the next
    `make run`, then `make demo-extraction-regression`, as the Makefile runs them, with Slack connected."""
    env = demo_environment(tmp_path, monkeypatch, fake_slack, traces_per_day=300)  # the demo's default
    assert local.main(["run", "--partition", "2026-11-21"]) == 0  # make run: ships, nothing to say
    assert fake_slack.posts == []
    summary = json.loads((tmp_path / "reports" / "production" / "2026-11-21.json").read_text())
    assert summary["drop_tests"]["tested"] > 0 and summary["drop_tests"]["alerts"] == []

    rebuild(env, "--degraded")  # make demo-regression
    assert local.main(["reeval", "--expect", "block"]) == 0
    rebuild(env)
    [blocked] = fake_slack.posts
    text = blocked["text"]
    assert text.startswith("Release blocked: index demo-ix-0002-degraded Why: 36 of 84 cases fail first at")
    assert (
        "admissibility (27 stale, 9 restricted)" in text and "Runbook: Fix the earliest failed stage" in text
    )
    decision = json.loads((tmp_path / "reports" / "latest" / "release_decision.json").read_text())
    assert decision["causes"]["inadmissible_rules"] == {"stale": 27, "restricted": 9}
    for report in ("slice_report.md", "slice_report.html"):
        assert "27 stale, 9 restricted" in (tmp_path / "reports" / "latest" / report).read_text()

    assert local.main(["run", "--partition", "2026-11-21"]) == 0  # the next make run
    [recovered] = fake_slack.posts[1:]  # a reply in the thread of the block
    assert recovered["text"].startswith("Recovered: release ships on index demo-ix-0003 (run ")
    assert recovered["thread_ts"] and recovered["reply_broadcast"] is False

    rebuild(env, "--degraded-parser")  # make demo-extraction-regression
    assert local.main(["reeval", "--expect", "ship"]) == 0
    rebuild(env)
    [extraction] = fake_slack.posts[2:]
    assert extraction["text"].startswith("Extraction channels: below baseline")


@pytest.mark.system  # a whole code-location runs
def test_the_demo_regression_posts_once_then_nothing_then_recovered(demo_env, fake_slack, tmp_path):
    rebuild(demo_env, "--degraded")
    assert local.main(["reeval", "--expect", "block"]) == 0
    [blocked] = fake_slack.posts
    assert blocked["channel"] == "#rag-releases"
    assert blocked["text"].startswith("Release blocked: index demo-ix-0002-degraded")
    message = str(blocked["blocks"])
    for gate in ("admissible_rate", "under_refusal", "candidate_recall", "context_recall", "releasable_rate"):
        assert gate in message
    assert "workflow=incident-response" in message and "http://dagster.example:3000/runs/" in message

    # The same re-evaluation again (same index, same failures): nothing new to say.
    defs = demo_definitions()
    with dg.DagsterInstance.get() as instance:
        again = defs.resolve_job_def("reeval_on_index_rebuild").execute_in_process(
            instance=instance, raise_on_error=False
        )
    assert again.success and len(fake_slack.posts) == 1

    rebuild(demo_env)
    assert local.main(["reeval", "--expect", "ship"]) == 0
    [recovered] = fake_slack.posts[1:]  # a reply in the thread of the block, saying what recovered
    assert recovered["text"].startswith("Recovered: release ships on index demo-ix-0003 (run ")
    assert "releasable_rate" in recovered["text"] and recovered["thread_ts"]
    for path in Path(tmp_path).rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".html"):
            assert TOKEN not in path.read_text(errors="replace"), path


def run_failure_context(instance: dg.DagsterInstance, run: dg.DagsterRun, defs: dg.Definitions):
    [record] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return dg.build_run_status_sensor_context(
        sensor_name="evaluation_run_failure_sensor",
        dagster_event=record.get_dagster_event(),
        dagster_instance=instance,
        dagster_run=run,
        resources={"alerts": defs.resources["alerts"]},
    ).for_run_failure()


@pytest.mark.system  # two whole code-location runs (~16 s)
def test_a_crashed_run_posts_the_run_failure_message_and_a_blocked_one_the_regression(
    demo_env, fake_slack, closed_port, monkeypatch
):
    monkeypatch.setenv("RAGSPINE_SUT", "http")
    monkeypatch.setenv("RAGSPINE_SUT_URL", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("RAGSPINE_STEP_RETRIES", "0")  # the crash's message, not the retries before it
    defs = demo_definitions()
    job = defs.resolve_job_def("reeval_on_index_rebuild")
    with dg.instance_for_test() as instance:
        crashed = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not crashed.success
        defs.resolve_sensor_def("evaluation_run_failure_sensor")(
            run_failure_context(instance, crashed.dagster_run, defs)
        )
        [post] = fake_slack.posts
        assert post["text"].startswith("Evaluation run failed: reeval_on_index_rebuild at step golden_traces")
        assert f"127.0.0.1:{closed_port}" in post["text"] and TOKEN not in post["text"]
        assert crashed.run_id in str(post["blocks"])

        # A blocked release is a successful run: the regression alert's news, not a crash.
        monkeypatch.setenv("RAGSPINE_SUT", "reference")
        rebuild(demo_env, "--degraded")
        defs = demo_definitions()
        blocked = defs.resolve_job_def("reeval_on_index_rebuild").execute_in_process(
            instance=instance, raise_on_error=False
        )
        assert blocked.success
        defs.resolve_sensor_def("evaluation_run_success_sensor")(
            run_status_context(instance, blocked.dagster_run, defs, dg.DagsterEventType.RUN_SUCCESS)
        )
    assert [p["text"].split(":")[0] for p in fake_slack.posts] == ["Evaluation run failed", "Release blocked"]


def run_status_context(instance: dg.DagsterInstance, run: dg.DagsterRun, defs: dg.Definitions, event_type):
    [record] = instance.all_logs(run.run_id, of_type=event_type)
    return dg.build_run_status_sensor_context(
        sensor_name="sensor",
        dagster_event=record.get_dagster_event(),
        dagster_instance=instance,
        dagster_run=run,
        resources={"alerts": defs.resources["alerts"]},
    )


@pytest.mark.system  # a whole code-location runs
def test_a_runs_alerts_wait_for_its_end_and_go_out_as_one_message(demo_env, fake_slack):
    rebuild(demo_env, "--degraded", "--degraded-parser")  # the release blocks and two channels fall
    defs = demo_definitions()
    job = defs.resolve_job_def("reeval_on_index_rebuild")
    with dg.instance_for_test() as instance:
        blocked = job.execute_in_process(instance=instance, raise_on_error=False)
        assert blocked.success and fake_slack.posts == []  # queued during the run, not posted
        context = run_status_context(instance, blocked.dagster_run, defs, dg.DagsterEventType.RUN_SUCCESS)
        defs.resolve_sensor_def("evaluation_run_success_sensor")(context)
        [post] = fake_slack.posts
        assert post["text"].startswith("Release blocked: index demo-ix-0002-degraded-parser")
        assert post["text"].endswith("Also: Extraction channels: below baseline.")
        assert "color_mapping" in str(post["blocks"]) and "27 stale, 9 restricted" in post["text"]

        rebuild(demo_env)
        healthy = job.execute_in_process(instance=instance, raise_on_error=False)
        assert healthy.success and len(fake_slack.posts) == 1
        defs.resolve_sensor_def("evaluation_run_success_sensor")(
            run_status_context(instance, healthy.dagster_run, defs, dg.DagsterEventType.RUN_SUCCESS)
        )
    [recovered] = fake_slack.posts[1:]  # both recoveries close regressions of one message: one reply
    assert recovered["text"].startswith("Recovered: release ships on index demo-ix-0003 (run ")
    assert "Also: Recovered: Extraction channels." in recovered["text"] and recovered["thread_ts"]


@pytest.mark.system  # a whole code-location runs
@pytest.mark.usefixtures("quick_slack_retries")
def test_slack_down_leaves_the_run_outcome_unchanged_and_the_alert_pending(
    demo_env, fake_slack, closed_port, monkeypatch
):
    monkeypatch.setenv("SLACK_API_BASE_URL", f"http://127.0.0.1:{closed_port}")
    rebuild(demo_env, "--degraded")
    assert local.main(["reeval", "--expect", "block"]) == 0  # the decision is recorded and printed
    rebuild(demo_env)
    with dg.instance_for_test() as instance:
        healthy = (
            demo_definitions()
            .resolve_job_def("reeval_on_index_rebuild")
            .execute_in_process(instance=instance, raise_on_error=False)
        )
    assert healthy.success  # a shipping run still succeeds with Slack unreachable ...
    checks = {c.check_name: c for c in healthy.get_asset_check_evaluations()}
    flushed = checks["alert_outbox_flushed"]
    assert not flushed.passed and flushed.severity == dg.AssetCheckSeverity.WARN  # ... and says so
    assert f"127.0.0.1:{closed_port}" in flushed.description
    assert flushed.metadata["pending"].value == 2  # the regression and the recovery, both kept
    assert fake_slack.posts == []

    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    assert cli.main(["alerts", "flush"]) == 0
    assert [p["text"].split(":")[0] for p in fake_slack.posts] == ["Release blocked", "Recovered"]

"""extraction_scores in the code location: an ERROR check per channel, the thresholds ratchet (never on
a failing run), exactly one Slack alert for a channel regression (then none again, then a recovery),
the report written whatever the channels say; facts from S3."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.extraction import channel_check
from ragspine_pipeline.defs.local import finish
from ragspine_pipeline.demo.workbook import write_extraction_demo
from tests.defs.declared import demo_definitions

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

SCORES, BASELINE = dg.AssetKey("extraction_scores"), dg.AssetKey("extraction_baseline")
SELECTION = [SCORES, BASELINE]


@pytest.fixture
def slack_env(monkeypatch, fake_slack):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-extraction-test")
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-extraction")
    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    return fake_slack


def defs_for(root: Path, out: Path, **env: str) -> dg.Definitions:
    return demo_definitions(
        {
            "RAGSPINE_HOME": str(root),
            "RAGSPINE_REPORTS": str(out / "reports"),
            "RAGSPINE_WORK": str(out / "work"),
            "RAGSPINE_ALERTS_OUTBOX": str(out / "alerts" / "outbox.jsonl"),
            **env,
        }
    )


def run(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """One run of the extraction assets, its alerts delivered when it ends (as the run-status sensors do)."""
    job = defs.resolve_job_def("full_eval")
    result = job.execute_in_process(instance=instance, asset_selection=SELECTION, raise_on_error=False)
    finish(defs, instance, result)
    return result


def failed_checks(result: dg.ExecuteInProcessResult) -> set[str]:
    return {c.check_name for c in result.get_asset_check_evaluations() if not c.passed}


def test_a_channel_regression_blocks_promotion_and_alerts_exactly_once(tmp_path, slack_env):
    root = tmp_path / "demo"
    paths = write_extraction_demo(root)
    before = paths["baseline"].read_text()
    defs = defs_for(root, tmp_path)
    with dg.instance_for_test() as instance:
        healthy = run(defs, instance)
        assert healthy.success and failed_checks(healthy) == set()
        assert slack_env.posts == []  # nothing was wrong: nothing to say
        assert json.loads(paths["baseline"].read_text()) == json.loads(before)  # equal is not higher

        write_extraction_demo(root, degraded=True)
        degraded = run(defs, instance)
        failed = {c.check_name: c.severity for c in degraded.get_asset_check_evaluations() if not c.passed}
        assert failed == {
            channel_check("color_mapping"): dg.AssetCheckSeverity.ERROR,
            channel_check("header_attribution"): dg.AssetCheckSeverity.ERROR,
        }
        assert degraded.success  # a channel is not a release gate: the run itself ends well ...
        [kept] = [e for e in degraded.get_asset_materialization_events() if e.asset_key == BASELINE]
        assert kept.materialization.metadata["promoted"].value is False
        assert kept.materialization.metadata["reason"].value.startswith("below threshold: color_mapping 0.")
        assert paths["baseline"].read_text() == before  # ... and nothing is promoted
        [post] = slack_env.posts
        assert post["text"].startswith("Extraction channels: below baseline")
        assert "color_mapping" in post["text"] and "header_attribution" in str(post["blocks"])

        assert failed_checks(run(defs, instance))  # the same regression again ...
        assert len(slack_env.posts) == 1  # ... is not announced again

        write_extraction_demo(root)
        assert run(defs, instance).success
    [recovered] = slack_env.posts[1:]  # a reply in the thread of the regression, naming the channels
    assert recovered["text"].startswith("Recovered: Extraction channels (run ") and recovered["thread_ts"]
    assert "color_mapping" in recovered["text"] and "header_attribution" in recovered["text"]
    report = json.loads((tmp_path / "reports" / "latest" / "extraction.json").read_text())
    assert report["pass"] and report["invalid_facts"]["count"] == 2  # malformed lines counted, not fatal


def test_without_extraction_files_the_asset_says_so_and_nothing_fails(tmp_path):
    defs = defs_for(tmp_path / "nothing-here", tmp_path)
    with dg.instance_for_test() as instance:
        result = run(defs, instance)
    assert result.success and failed_checks(result) == set()
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == SCORES]
    assert event.materialization.metadata["configured"].value is False


def test_facts_from_s3_score_exactly_like_the_local_file(tmp_path, bucket, s3_endpoint):
    name, client = bucket
    paths = write_extraction_demo(tmp_path / "demo")
    client.upload_file(str(paths["facts"]), name, "extraction/facts.jsonl")
    local = defs_for(tmp_path / "demo", tmp_path / "local")
    remote = defs_for(
        tmp_path / "demo",
        tmp_path / "s3",
        RAGSPINE_EXTRACTION_FACTS=f"s3://{name}/extraction/facts.jsonl",
        RAGSPINE_S3_ENDPOINT_URL=s3_endpoint,
    )
    with dg.instance_for_test() as instance:
        assert run(local, instance).success and run(remote, instance).success
    by_local = json.loads((tmp_path / "local" / "reports" / "latest" / "extraction.json").read_text())
    by_s3 = json.loads((tmp_path / "s3" / "reports" / "latest" / "extraction.json").read_text())
    assert by_s3["channels"] == by_local["channels"]
    invalid = [e.split(": ", 1)[1] for e in by_s3["invalid_facts"]["errors"]]
    assert invalid == [e.split(": ", 1)[1] for e in by_local["invalid_facts"]["errors"]]  # same line numbers

"""An index version replaced before the index-rebuild sensor could request its evaluation is said in
Slack, once: in the message of the run that evaluated the version that replaced it, whether that run
ships, blocks or fails. The sensor records it on that run (``ragspine/superseded_versions``); the run's
alerts carry it; the outbox's stream of the evaluated version keeps it from being said twice."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs import local
from ragspine_pipeline.defs.alerts import finish_failed_run, queue_superseded
from ragspine_pipeline.defs.automation import SUPERSEDED_TAG
from ragspine_pipeline.defs.golden import INDEX_VERSION_TAG
from ragspine_pipeline.defs.resources import AlertsResource
from ragspine_pipeline.demo.build import rebuild_index
from tests.defs.test_alerting import TOKEN, demo_env  # noqa: F401 - the fixture, used by name

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

JOB = "reeval_on_index_rebuild"


def _version(demo: Path) -> str:
    return json.loads((demo / "index" / "manifest.json").read_text())["index_version"]


def test_a_superseded_version_is_named_once_in_the_next_message_about_the_service(
    demo_env,  # noqa: F811 - the fixture
    fake_slack,
):
    demo = Path(demo_env["RAGSPINE_HOME"])
    assert local.main(["reeval", "--expect", "ship"]) == 0  # the first version: ships, nothing to say
    assert fake_slack.posts == []
    missed = rebuild_index(demo)["index_version"]
    live = rebuild_index(demo)["index_version"]  # replaced before the sensor's next tick
    assert local.main(["reeval", "--expect", "ship"]) == 0

    [post] = fake_slack.posts  # the run ships with nothing else to say: the notice is its message
    sentence = f"Index {missed} was superseded by {live} before it was evaluated"
    assert post["text"] == sentence
    assert sentence in json.dumps(post["blocks"])

    with local.local_instance() as instance:
        [run] = instance.get_runs(dg.RunsFilter(job_name=JOB, tags={INDEX_VERSION_TAG: live}))
        assert run.tags[SUPERSEDED_TAG] == missed
        alerts = AlertsResource(outbox_path=demo_env["RAGSPINE_ALERTS_OUTBOX"])
        assert queue_superseded(alerts, run) is None  # said once: a retry of the run says nothing more
    assert len(fake_slack.posts) == 1


def test_a_failed_run_says_the_superseded_version_with_its_crash_in_one_message(
    tmp_path, monkeypatch, fake_slack
):
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-releases")
    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    alerts = AlertsResource(outbox_path=str(tmp_path / "outbox.jsonl"), webserver_base_url=None)

    @dg.op
    def replay():
        pass

    @dg.job(name=JOB)
    def reeval():
        replay()

    with dg.instance_for_test() as instance:
        tags = {INDEX_VERSION_TAG: "ix-0009", SUPERSEDED_TAG: "ix-0007,ix-0008"}
        run = instance.create_run_for_job(reeval, tags=tags)
        instance.report_run_failed(run, "the run's process died")
        run = instance.get_run_by_id(run.run_id)
        finish_failed_run(alerts, run, [], instance)
        finish_failed_run(alerts, run, [], instance)  # the failure sensor again: nothing new to say

    [post] = fake_slack.posts
    assert post["text"].startswith(f"Evaluation run failed: {JOB}: the run failed before any step")
    assert post["text"].endswith(
        "Also: Index ix-0007, ix-0008 were superseded by ix-0009 before they were evaluated."
    )

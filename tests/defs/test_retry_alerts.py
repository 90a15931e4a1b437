"""A failed run re-executed from its failure, whose retry succeeds: Slack's thread of that failure ends
with the retry's success, whichever of the run-status sensors ticks first (on a busy daemon the retry can
end before the failure sensor's tick). Real runs on a real instance, a real re-execution from failure,
the Slack stand-in on loopback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.alerts import finish_failed_run, finish_succeeded_run
from ragspine_pipeline.defs.resources import AlertsResource

DOWN = "RAGSPINE_TEST_SUT_DOWN"  # a file that exists while the stand-in SUT is down


@dg.op
def ask_the_sut() -> None:
    if Path(os.environ[DOWN]).exists():
        raise RuntimeError("ConnectionError: the SUT refused the connection")


@dg.job(tags={"dagster/retry_strategy": "FROM_FAILURE"})
def reeval_on_index_rebuild() -> None:
    ask_the_sut()


@pytest.mark.system  # real runs in processes of their own (the job's multiprocess executor), ~10 s
def test_the_retry_that_succeeds_is_the_last_word_in_the_failures_thread(tmp_path, monkeypatch, fake_slack):
    down = tmp_path / "down"
    down.touch()
    monkeypatch.setenv(DOWN, str(down))
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-alerts")
    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    alerts = AlertsResource(outbox_path=str(tmp_path / "outbox.jsonl"))
    job = dg.reconstructable(reeval_on_index_rebuild)
    with dg.instance_for_test() as instance:
        with dg.execute_job(job, instance, raise_on_error=False) as failed:
            assert not failed.success
        down.unlink()  # the SUT is back
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        with dg.execute_job(job, instance, reexecution_options=options) as retry:
            assert retry.success
        retried = instance.get_run_by_id(retry.run_id)
        assert retried.root_run_id == failed.run_id

        finish_succeeded_run(alerts, retried, instance)  # the success sensor ticks first
        steps = instance.all_logs(failed.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
        late = finish_failed_run(  # then the failure sensor, late
            alerts, instance.get_run_by_id(failed.run_id), [r.dagster_event for r in steps], instance
        )
    failure, reply = fake_slack.posts
    assert failure["text"].startswith("Evaluation run failed: reeval_on_index_rebuild")
    assert "ConnectionError: the SUT refused the connection" in json.dumps(failure)
    assert "thread_ts" not in failure and reply["thread_ts"]
    assert reply["text"].startswith("Evaluation run succeeded on retry: reeval_on_index_rebuild")
    assert retry.run_id in reply["text"]
    assert late[0] is None  # the late failure sensor found its failure said already: nothing more

"""PostgreSQL goes away for 30 s while an evaluation runs, on a deployed instance: a real
``dagster-daemon`` and ``dagster-webserver`` reach the loopback PostgreSQL through a relay the test
cuts (every connection closed, new ones refused, as a restarting server does) and restores.

- The run, waiting for its scoring pool's slot when the database goes, fails; its Slack alert says the
  instance's database could not be reached (not "marked as failed from outside the execution context").
- The webserver's first request after the outage works (its pooled connection is tested before use).
- Its retry is not lost when Dagster's own attempt to launch it fails: the retry guard asks for it
  again and the daemon launches it; it succeeds, and says so in the failure's thread.

Dagster's own attempt is made to fail deterministically, not raced: the run is launched with no
retry (``dagster/max_retries: 0``), so that the daemon does not retry it when it fails; the test then
gives it its retry back and writes what the daemon records when its attempt raises (the engine event
"Failed to retry run" with the database's error, ``dagster/will_retry: false``): the state a second
outage at that moment leaves, after which Dagster never retries the run by itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._core.storage.tags import MAX_RETRIES_TAG, WILL_RETRY_TAG

from ragspine_pipeline.defs.retry_guard import FAILED_RETRY, REARMED
from ragspine_pipeline.defs.run_errors import INSTANCE_DATABASE
from tests.conftest import PG, stop_group, wait_until
from tests.defs.test_host_loss import (
    HOLDER,
    deployed,
    finished_retries,
    hold_the_scoring_slot,
    queued_run_failures,
    retry_replies,
    start_daemon,
    succeeded_steps,
    waiting_for_the_slot,
)
from tests.relay import TcpRelay

JOB = "full_eval"
OUTAGE_S = 30
NO_POSTGRES = "dagster-postgres is not installed (pip install -e '.[deploy]')"
WEBSERVER = [sys.executable, "-m", "dagster_webserver", "-w", "workspace.yaml", "-h", "127.0.0.1"]
LAUNCH = [sys.executable, "-m", "dagster", "job", "launch", "-j", JOB, "-w", "workspace.yaml"]
RUNS = "{ runsOrError { __typename ... on Runs { results { runId status } } } }"


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # the webserver's own failure: its body says why
        raise AssertionError(f"{error}: {error.read().decode(errors='replace')[:3000]}") from None


def run_states(instance: dg.DagsterInstance) -> list[tuple[str, str, str | None]]:
    """``(run id, status, parent run id)`` of every run, for a failure's message."""
    return [(r.run_id, r.status.value, r.tags.get("dagster/parent_run_id")) for r in instance.get_runs()]


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.system  # dagster-daemon, dagster-webserver and a run, with the database cut under them
def test_a_database_outage_fails_the_run_says_so_and_its_lost_retry_is_launched_anyway(
    tmp_path, database, fake_slack, closed_port, monkeypatch
):
    pytest.importorskip("dagster_postgres", reason=NO_POSTGRES)
    # The test reads and writes the instance directly; the daemon, the webserver, the code server and
    # the run reach it through the relay.
    env = deployed(tmp_path, database, fake_slack, monkeypatch)
    relay = TcpRelay((PG["host"], PG["port"]))
    relay.restore()
    env["DAGSTER_PG_PORT"] = str(relay.port)
    outbox = Path(env["RAGSPINE_ALERTS_OUTBOX"])
    processes: list[subprocess.Popen] = []
    with dg.DagsterInstance.get() as instance:
        pool, storage = hold_the_scoring_slot(instance), instance.event_log_storage  # the run waits, mid-run
        try:
            daemon = start_daemon(env, tmp_path, tmp_path / "daemon.log")
            processes.append(daemon)
            with open(tmp_path / "webserver.log", "w") as out:
                web = subprocess.Popen(
                    [*WEBSERVER, "-p", str(closed_port)],
                    env=env,
                    cwd=tmp_path,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            processes.append(web)
            launch = subprocess.run(
                [*LAUNCH, "--tags", json.dumps({MAX_RETRIES_TAG: "0"})],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert launch.returncode == 0, launch.stdout + launch.stderr
            [run] = instance.get_runs(dg.RunsFilter(job_name=JOB))

            waiting = partial(waiting_for_the_slot, instance, run.run_id, pool)
            wait_until(waiting, f"the run waiting for a slot of {pool}", 180, daemon)
            wait_until(lambda: answers(closed_port), "the webserver", 120, web)
            assert graphql(closed_port, RUNS)["data"]["runsOrError"]["__typename"] == "Runs"  # pooled now

            done_before = succeeded_steps(instance, run.run_id)
            # The database goes away; the slot is given back meanwhile.
            relay.cut()
            storage.free_concurrency_slots_for_run(HOLDER)
            time.sleep(OUTAGE_S)  # the outage itself: its length is the scenario, not a wait for something
            relay.restore()

            # The webserver's first request after the outage works.
            after = graphql(closed_port, RUNS)
            assert "errors" not in after and after["data"]["runsOrError"]["__typename"] == "Runs", after

            failed = wait_until(
                lambda: instance.get_run_by_id(run.run_id).is_finished and instance.get_run_by_id(run.run_id),
                "the run ended",
                180,
                daemon,
            )
            assert failed.status == dg.DagsterRunStatus.FAILURE
            alerted = wait_until(
                lambda: [p for p in fake_slack.posts if run.run_id in json.dumps(p)], "the alert", 120, daemon
            )
            # Launched with no retry: Dagster decides none (the tag is set when the failure is stored, or
            # by the daemon when it reads the failure, if the database was away at the first moment).
            wait_until(
                lambda: instance.get_run_by_id(run.run_id).tags.get(WILL_RETRY_TAG) == "false",
                "Dagster deciding no retry",
                120,
                daemon,
            )

            # Its retry given back, and Dagster's attempt to launch it failed as the database went again.
            [end] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
            error = end.dagster_event.job_failure_data.error if end.dagster_event.job_failure_data else None
            instance.add_run_tags(run.run_id, {MAX_RETRIES_TAG: "1"})
            instance.report_engine_event(FAILED_RETRY, failed, engine_event_data=EngineEventData(error=error))
            instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: "false"})

            finished = partial(finished_retries, instance, run.run_id)
            # 70 s on an idle machine: the guard's minute, the slot the failed run held freed a minute
            # after it ended, a run process started and the remaining steps run each in a process.
            what = "the retry, asked for again by the guard, finished"
            try:
                [retry] = wait_until(finished, what, 600, daemon)
            except AssertionError as late:
                raise AssertionError(f"{late}; runs now: {run_states(instance)}") from None
            replied = wait_until(partial(retry_replies, fake_slack), "the retry's reply", 120, daemon)
        finally:
            for process in processes:
                stop_group(process)
            relay.cut()
    logs = (tmp_path / "daemon.log").read_text()
    said = json.dumps(alerted[0])
    assert INSTANCE_DATABASE in said, said
    assert "outside the execution context" not in said
    failures = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert [f.message.startswith(REARMED) for f in failures] == [False, True]
    assert retry.status == dg.DagsterRunStatus.SUCCESS, logs[-3000:]
    # From failure: the steps that had succeeded before the outage are not run again.
    assert done_before and not done_before & set(retry.step_keys_to_execute or ())
    assert [a["run_id"] for a in queued_run_failures(outbox)] == [run.run_id]  # one failure alert
    assert alerted == [p for p in fake_slack.posts if "run failed" in p.get("text", "")]  # posted once
    [reply] = replied
    assert reply["thread_ts"] and retry.run_id in json.dumps(reply)

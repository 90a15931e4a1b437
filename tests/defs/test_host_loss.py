"""A run that dies with its host: a real ``dagster-daemon`` on PostgreSQL launches a re-evaluation, and
mid-run the daemon, its code server and the run's process are killed with SIGKILL, as a host crash
would leave them. Once the daemon is back, its run monitor finds the run's process gone
(``ProcessCheckingRunLauncher``) and fails the run within its poll interval; exactly one Slack alert
says the run was lost with its host; run retries re-execute it from failure, and the retry decides what
an uninterrupted run decides. The launcher's answers and the alert's text are also checked on their
own, without processes to kill.

Mid-run is made certain, not raced: the one slot of the scoring step's pool is held by another
(made-up) run when the run starts, so the run executes what comes before the pool's steps, then waits
for the slot; it is killed while it waits. The slot is given back before the daemon restarts. It goes
to the dead run's waiting step first: the instance frees a failed run's slots
(``free_slots_after_run_end_seconds``), or every later run of the pool would wait for ever.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.events import EngineEventData  # what Dagster's run process records its pid with
from dagster._core.launcher import WorkerStatus  # not re-exported by dagster
from dagster._core.storage.tags import GRPC_INFO_TAG

from ragspine_pipeline.definitions import defs as code_location
from ragspine_pipeline.defs.alerts import step_failure_alert
from ragspine_pipeline.defs.run_launcher import (
    LOST_RUN,
    STARTED_PROCESS,
    ProcessCheckingRunLauncher,
    _run_process,
    process_started_by,
)
from tests.conftest import load_factor, pg_instance_env, stop_group, wait_until
from tests.defs.test_local_crash import environment

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
JOB = "reeval_on_index_rebuild"
POLL_S = 2  # the run monitor's poll interval in this test (the shipped files say 30)
WORKSPACE = """load_from:
  - python_module:
      module_name: ragspine_pipeline.definitions
      location_name: ragspine_pipeline
"""
# What the test's instance changes in the shipped file: a short poll, the launcher that can tell a dead
# run process, and slots of a dead run's steps given back once it has failed.
INSTANCE = {
    "run_launcher": {"module": "ragspine_pipeline.defs.run_launcher", "class": "ProcessCheckingRunLauncher"},
    "run_monitoring": {"poll_interval_seconds": POLL_S, "free_slots_after_run_end_seconds": 1},
}


def instance_config() -> dict:
    config = yaml.safe_load(SHIPPED.read_text())
    config["run_launcher"] = INSTANCE["run_launcher"]
    config["run_monitoring"] = {**config["run_monitoring"], **INSTANCE["run_monitoring"]}
    return config


def deployed(tmp_path: Path, database: str, fake_slack, monkeypatch, **settings: str) -> dict[str, str]:
    """The demo deployed on ``database``: its environment (the test's instance file, the workspace, the
    loopback PostgreSQL and Slack, and ``settings``), the test's own process pointed at the same
    instance."""
    env = environment(tmp_path / "deployed")
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance_config()))
    (tmp_path / "workspace.yaml").write_text(WORKSPACE)
    env.update(
        **pg_instance_env(database),
        **settings,
        SLACK_BOT_TOKEN="xoxb-test-token",
        SLACK_CHANNEL="#rag-alerts",
        SLACK_API_BASE_URL=fake_slack.url,
    )
    for name in ("DAGSTER_HOME", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
    return env


HOLDER = "another-run"  # a made-up run that holds the scoring pool's one slot


def hold_the_scoring_slot(instance: dg.DagsterInstance) -> str:
    """Give the scoring step's pool one slot and let :data:`HOLDER` hold it: a run then executes what
    comes before the pool's steps and waits. The pool's name."""
    pool, storage = scoring_pool(), instance.event_log_storage
    if pool not in storage.get_concurrency_keys():
        storage.set_concurrency_slots(pool, 1)
    assert storage.claim_concurrency_slot(pool, HOLDER, "its_step").is_claimed
    return pool


def waiting_for_the_slot(instance: dg.DagsterInstance, run_id: str, pool: str) -> bool:
    """Whether the run has started, done some steps, and waits for a slot of ``pool`` (it must not
    have ended)."""
    run = instance.get_run_by_id(run_id)
    assert not run.is_finished, run.status
    return (
        run.status == dg.DagsterRunStatus.STARTED
        and bool(succeeded_steps(instance, run_id))
        and run_id in instance.event_log_storage.get_concurrency_info(pool).pending_run_ids
    )


def finished_retries(instance: dg.DagsterInstance, run_id: str) -> list[dg.DagsterRun]:
    """The finished runs that retry (or re-execute) ``run_id``."""
    children = instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": run_id}))
    return [run for run in children if run.is_finished]


def retry_replies(fake_slack) -> list[dict]:
    """What Slack was posted saying a failed run succeeded on retry."""
    return [post for post in fake_slack.posts if "succeeded on retry" in post.get("text", "")]


def scoring_pool() -> str:
    """The pool of the step that scores the replay and decides (the one that writes metric_table)."""
    assets = code_location.resolve_asset_graph().assets_defs
    [scoring] = [a for a in assets if dg.AssetKey("metric_table") in a.keys]
    assert scoring.node_def.pool, "the scoring step has no pool"
    return scoring.node_def.pool


def decision(reports: Path) -> dict:
    record = json.loads((reports / "latest" / "release_decision.json").read_text("utf-8"))
    keys = ("decision", "failed_gates", "failed_slices", "index_version", "metrics")
    return {key: record[key] for key in keys}


def start_daemon(env: dict, cwd: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "dagster._daemon", "run", "-w", str(cwd / "workspace.yaml")],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (its code servers, and theirs: the run's process)."""
    children: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, set()).add(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def succeeded_steps(instance: dg.DagsterInstance, run_id: str) -> set[str]:
    records = instance.event_log_storage.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.STEP_SUCCESS
    ).records
    return {record.event_log_entry.step_key for record in records}


def failure_sensor_ticked(instance: dg.DagsterInstance) -> bool:
    states = [s for s in instance.all_instigator_state() if s.name == "evaluation_run_failure_sensor"]
    return bool(states) and bool(instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id))


def queued_run_failures(outbox: Path) -> list[dict]:
    if not outbox.exists():
        return []
    events = [json.loads(line) for line in outbox.read_text().splitlines() if line.strip()]
    return [
        e["alert"]
        for e in events
        if e.get("event") == "queued" and e.get("alert", {}).get("kind") == "run_failure"
    ]


# -- the launcher's answer and the alert, on their own ------------------------------------------


def exited_process() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_process_is_alive_only_if_it_exists_is_no_zombie_and_is_not_a_later_one_with_its_id():
    assert process_started_by(os.getpid(), time.time())
    assert not process_started_by(os.getpid(), time.time() - 3600)  # the id, given to a newer process
    assert not process_started_by(exited_process(), time.time())
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_until(lambda: not process_started_by(zombie.pid, time.time()), "a zombie counted dead", 30)
    finally:
        zombie.wait()


def a_started_run(instance: dg.DagsterInstance, host: str, pid: int) -> dg.DagsterRun:
    """A STARTED run whose process (``pid``) its code server on ``host`` started, as Dagster records it."""
    run = instance.create_run_for_job(
        dg.GraphDefinition("noop").to_job(), tags={GRPC_INFO_TAG: json.dumps({"host": host, "port": 4266})}
    )
    instance.report_engine_event(f"{STARTED_PROCESS}{pid}).", run, EngineEventData.in_process(pid))
    instance.handle_run_event(
        run.run_id,
        dg.DagsterEvent(event_type_value=dg.DagsterEventType.RUN_START.value, job_name=run.job_name),
    )
    return instance.get_run_by_id(run.run_id)


def test_the_launcher_says_a_run_on_this_host_is_lost_once_its_process_is_gone():
    with dg.instance_for_test(overrides={"run_launcher": INSTANCE["run_launcher"]}) as instance:
        launcher = instance.run_launcher  # as a dagster.yaml names it
        assert isinstance(launcher, ProcessCheckingRunLauncher) and launcher.supports_check_run_worker_health
        alive = launcher.check_run_worker_health(a_started_run(instance, "localhost", os.getpid()))
        assert alive.status == WorkerStatus.RUNNING
        gone = launcher.check_run_worker_health(a_started_run(instance, "localhost", exited_process()))
        assert gone.status == WorkerStatus.FAILED and gone.msg.startswith(f"{LOST_RUN}: its process (pid ")
        # A pid on another host means nothing here: not checked (the maximum runtime remains the bound).
        elsewhere = launcher.check_run_worker_health(
            a_started_run(instance, "code.example", exited_process())
        )
        assert elsewhere.status == WorkerStatus.RUNNING


def test_the_alert_of_a_lost_run_says_it_was_lost_not_dagsters_wrapper():
    with dg.instance_for_test() as instance:
        run = a_started_run(instance, "localhost", exited_process())
        launcher = ProcessCheckingRunLauncher()
        launcher.register_instance(instance)
        health = launcher.check_run_worker_health(run)
        # What the run monitor writes (dagster/_daemon/monitoring/run_monitoring.py).
        instance.report_run_failed(
            run, f"Detected run worker status {health}. Marking run {run.run_id} as failed."
        )
        [failure] = instance.event_log_storage.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE
        ).records
        alert = step_failure_alert(run, [], None, None, failure.event_log_entry.dagster_event)
    assert alert.error == health.msg
    assert alert.error.startswith(f"{LOST_RUN}: its process (pid ") and "Marking run" not in alert.error


# -- the host goes down --------------------------------------------------------------------------


@pytest.mark.system  # dagster-daemon, its code server and a run killed with SIGKILL
def test_a_run_lost_with_its_host_is_failed_alerted_once_and_retried_to_the_same_decision(
    tmp_path, database, fake_slack, monkeypatch
):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc: the daemon's processes are found, and the launcher checks them, there")
    # The uninterrupted run to compare with, meanwhile: the same demo, evaluated by the local runner.
    reference_env = environment(tmp_path / "uninterrupted")
    reference = subprocess.Popen(
        [sys.executable, "-m", "ragspine_pipeline.defs.local", "reeval"],
        env=reference_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    env = deployed(tmp_path, database, fake_slack, monkeypatch, RAGSPINE_REBUILD_SENSOR_INTERVAL_S="2")
    outbox = Path(env["RAGSPINE_ALERTS_OUTBOX"])

    daemon = None
    with dg.DagsterInstance.get() as instance:
        pool, storage = hold_the_scoring_slot(instance), instance.event_log_storage
        try:
            # The sensor is turned on while the daemon starts: its next tick launches the run.
            daemon = start_daemon(env, tmp_path, tmp_path / "daemon.log")
            sensor_on = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dagster",
                    "sensor",
                    "start",
                    "index_rebuild_sensor",
                    "-w",
                    "workspace.yaml",
                ],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert sensor_on.returncode == 0, sensor_on.stdout + sensor_on.stderr
            [lost] = wait_until(
                lambda: instance.get_runs(dg.RunsFilter(job_name=JOB)), "a launched run", 120, daemon
            )

            waiting = partial(waiting_for_the_slot, instance, lost.run_id, pool)
            wait_until(waiting, f"the run waiting for a slot of {pool}", 120, daemon)
            done_before = succeeded_steps(instance, lost.run_id)
            wait_until(lambda: failure_sensor_ticked(instance), "the run-failure sensor ticked", 60, daemon)

            # The host goes down: the daemon, its code server and the run's process, all at once.
            pid, _ = _run_process(instance, lost.run_id)
            doomed = {daemon.pid} | descendants(daemon.pid)
            assert pid in doomed
            for victim in doomed:
                os.kill(victim, signal.SIGKILL)
            daemon.wait()
            wait_until(lambda: not any(process_started_by(p, time.time()) for p in doomed), "all killed", 30)
            assert instance.get_run_by_id(lost.run_id).status == dg.DagsterRunStatus.STARTED  # as left

            storage.free_concurrency_slots_for_run(HOLDER)
            restarted = time.monotonic()
            daemon = start_daemon(env, tmp_path, tmp_path / "daemon-restarted.log")
            wait_until(
                lambda: instance.get_run_by_id(lost.run_id).status == dg.DagsterRunStatus.FAILURE,
                "the lost run marked failed",
                60,
                daemon,
            )
            failed_after = time.monotonic() - restarted
            retried = wait_until(
                partial(finished_retries, instance, lost.run_id), "the retry finished", 600, daemon
            )
            alerted = wait_until(
                lambda: [p for p in fake_slack.posts if lost.run_id in json.dumps(p)],
                "the alert",
                120,
                daemon,
            )
            # The retry that succeeded says so in the failure's thread: Slack's last word is not "failed".
            replied = wait_until(partial(retry_replies, fake_slack), "the retry's reply", 120, daemon)
            [failure] = instance.event_log_storage.get_records_for_run(
                lost.run_id, of_type=dg.DagsterEventType.RUN_FAILURE
            ).records
        finally:
            if daemon is not None:
                stop_group(daemon)
    out, _ = reference.communicate(timeout=300)
    assert reference.returncode == 0, out
    logs = (tmp_path / "daemon-restarted.log").read_text()

    # Failed by the run monitor's first look after the restart, for the process, not the maximum runtime.
    assert LOST_RUN in failure.event_log_entry.message, logs[-3000:]
    assert failed_after < 45 * load_factor(), failed_after
    # One alert, saying what happened.
    [crash] = queued_run_failures(outbox)
    assert crash["run_id"] == lost.run_id and crash["error"].startswith(
        f"{LOST_RUN}: its process (pid {pid} "
    )
    [said] = [post for post in fake_slack.posts if LOST_RUN in json.dumps(post)]
    assert said == alerted[0]
    # Retried once, from failure: the replay that had finished is not redone, and it decides the same.
    [retry] = retried
    assert retry.status == dg.DagsterRunStatus.SUCCESS, logs[-3000:]
    assert retry.tags.get("dagster/retry_strategy") == "FROM_FAILURE"
    assert not done_before & set(retry.step_keys_to_execute or ())
    assert decision(Path(env["RAGSPINE_REPORTS"])) == decision(Path(reference_env["RAGSPINE_REPORTS"]))
    assert [a["run_id"] for a in queued_run_failures(outbox)] == [lost.run_id]  # still one
    [reply] = replied
    assert reply["thread_ts"] and retry.run_id in json.dumps(reply)
    assert fake_slack.posts.index(said) < fake_slack.posts.index(reply)

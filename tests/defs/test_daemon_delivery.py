"""A real ``dagster-daemon`` delivers what Slack refused once Slack is back, without a run.

An alert waits in the outbox while the loopback Slack answers HTTP 500 to everything; the daemon, on
the shipped PostgreSQL instance, ticks the code location's ``alert_delivery_sensor`` at its shipped
interval (60 s): the tick that finds Slack down leaves the alert pending, and the first tick after Slack
answers again delivers it — within 70 s of the recovery — and no run is ever started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.scheduler.instigation import TickStatus  # instance.get_ticks takes it

from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.defs.alerts import DELIVERY_INTERVAL_S
from ragspine_pipeline.defs.resources import AlertsResource
from tests.alerts.slack_server import TOKEN, SlackServer
from tests.conftest import load_factor, pg_instance_env, stop_group, wait_until

pytestmark = pytest.mark.system  # dagster-daemon on PostgreSQL

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
SENSOR = "alert_delivery_sensor"
WORKSPACE = """load_from:
  - python_module:
      module_name: ragspine_pipeline.definitions
      location_name: ragspine_pipeline
"""
RECOVERY_S = 70  # the bound: one sensor interval after Slack is back, and some slack


@pytest.fixture
def slack():
    server = SlackServer().start()
    yield server
    server.stop()


def _ticks(instance: dg.DagsterInstance) -> list:
    """The delivery sensor's finished ticks, oldest first."""
    states = [s for s in instance.all_instigator_state() if s.name == SENSOR]
    if not states:
        return []
    [state] = states
    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id)
    return sorted((t for t in ticks if t.status != TickStatus.STARTED), key=lambda t: t.timestamp)


def test_the_daemon_delivers_a_pending_alert_within_a_minute_of_slacks_recovery_without_a_run(
    tmp_path, database, slack, monkeypatch
):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    (tmp_path / "workspace.yaml").write_text(WORKSPACE)
    outbox = tmp_path / "alerts" / "outbox.jsonl"
    instance_env = {
        "DAGSTER_HOME": str(home),
        **pg_instance_env(database),
    }
    env = {
        **os.environ,
        **instance_env,
        "RAGSPINE_HOME": str(tmp_path / "nowhere"),  # no run: the sensors need no inputs
        "RAGSPINE_REPORTS": str(tmp_path / "reports"),
        "RAGSPINE_WORK": str(tmp_path / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(outbox),
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_CHANNEL": "#rag-alerts",
        "SLACK_API_BASE_URL": slack.url,
    }
    for name, value in instance_env.items():
        monkeypatch.setenv(name, value)

    slack.down = True
    alerts = AlertsResource(outbox_path=str(outbox))
    queued = alerts.queue(run_failure_alert("nightly_eval", "run-ended", "sample_day_shard", "S3 down"))
    assert queued is not None

    log = open(tmp_path / "daemon.log", "w")  # noqa: SIM115 - written by the daemon until it stops
    daemon = subprocess.Popen(
        [sys.executable, "-m", "dagster._daemon", "run", "-w", str(tmp_path / "workspace.yaml")],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        with dg.DagsterInstance.get() as instance:
            # The daemon loads the code location and ticks the sensor (running by default): Slack is down.
            [down] = wait_until(
                lambda: _ticks(instance),
                f"a tick of {SENSOR} (daemon log: {tmp_path / 'daemon.log'})",
                120,
                daemon,
            )
            assert down.status == TickStatus.SKIPPED, down.error
            assert "0 alert(s) delivered" in down.skip_reason and "1 pending" in down.skip_reason
            assert "HTTP 500" in down.skip_reason and TOKEN not in down.skip_reason
            assert slack.messages == []

            slack.down = False
            recovered, bound = time.monotonic(), RECOVERY_S * load_factor()
            wait_until(
                lambda: slack.posted_ids(),
                f"the alert delivered after Slack's recovery (daemon log: {tmp_path / 'daemon.log'})",
                RECOVERY_S,
                daemon,
            )
            waited = time.monotonic() - recovered
            ticks = wait_until(lambda: _ticks(instance)[1:], "the delivering tick recorded", 30, daemon)
            runs = instance.get_runs()
    finally:
        stop_group(daemon)
        log.close()
    print(f"delivered {waited:.1f} s after Slack's recovery")
    assert waited <= bound
    assert slack.posted_ids() == [queued.id]  # once: the history showed the 500 had posted nothing
    assert ticks[0].skip_reason.startswith("1 alert(s) delivered in 1 message(s)")
    assert runs == []  # the sensor never starts a run
    assert DELIVERY_INTERVAL_S == 60  # the shipped interval, not one shortened for the test

"""The systemd units of deploy/systemd parse, start every process after the pools are set, and check each
process's health with its own check: `dagster api grpc-health-check`, `dagster-daemon liveness-check`,
the webserver's /server_info and `celery inspect ping`. Parsed here, not run (no systemd in a test)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ragspine_pipeline.defs.judge import DEPLOYED_POOLS as POOLS
from tests.conftest import PG, load_factor
from tests.relay import TcpRelay

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
BIN = "/opt/ragspine/.venv/bin"
PROCESSES = {
    "code-server": f"{BIN}/dagster api grpc-health-check -p 3030",
    "daemon": f"{BIN}/dagster-daemon liveness-check",
    "webserver": "http://127.0.0.1:3000/server_info",
    "celery-worker": f"{BIN}/celery -A ragspine_pipeline.defs.celery_app inspect ping",
}
SECTION = re.compile(r"^\[(\w+)\]$")


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values in order]}}`` of a unit file (a key may repeat, as ExecStart does);
    anything that is not a comment, a section header or ``Key=value`` fails."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for number, line in enumerate((SYSTEMD / name).read_text("utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if header := SECTION.match(line):
            current = sections.setdefault(header.group(1), {})
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep and re.fullmatch(r"[A-Za-z]+", key), f"{name}:{number}: {line}"
        current.setdefault(key, []).append(value)
    return sections


def test_every_unit_file_parses():
    names = sorted(path.name for path in SYSTEMD.glob("ragspine-*"))
    assert len(names) == 3 * len(PROCESSES) + 1
    for name in names:
        sections = unit(name)
        kind = name.rsplit(".", 1)[1]
        assert set(sections) <= {"Unit", "Service", "Timer", "Install"}
        assert kind.title() in sections, name


@pytest.mark.parametrize("process", PROCESSES)
def test_each_process_starts_after_the_pools_and_restarts_on_failure(process):
    sections = unit(f"ragspine-{process}.service")
    assert "ragspine-pools.service" in sections["Unit"]["Requires"][0].split()
    assert "ragspine-pools.service" in sections["Unit"]["After"][0].split()
    assert sections["Service"]["Restart"] == ["on-failure"]
    assert sections["Service"]["EnvironmentFile"] == [
        "/etc/ragspine/ragspine.env",
        "-/etc/ragspine/secrets.env",
    ]


@pytest.mark.parametrize(("process", "check"), PROCESSES.items())
def test_each_process_has_a_timer_that_runs_its_health_check(process, check):
    health = unit(f"ragspine-{process}-health.service")
    [command] = health["Service"]["ExecStart"]
    assert check in command
    [restart] = health["Service"]["ExecStopPost"]
    assert restart.startswith("+") and f"systemctl restart ragspine-{process}.service" in restart
    timer = unit(f"ragspine-{process}-health.timer")
    assert timer["Timer"]["Unit"] == [f"ragspine-{process}-health.service"]
    assert timer["Timer"]["OnUnitActiveSec"] == ["1min"]


def test_the_celery_health_check_pings_this_hosts_worker():
    [start] = unit("ragspine-celery-worker.service")["Service"]["ExecStart"]
    [ping] = unit("ragspine-celery-worker-health.service")["Service"]["ExecStart"]
    name = re.search(r"--hostname=(\S+)", start).group(1)
    assert f"--destination={name}" in ping


def test_the_pools_unit_sets_every_pool_the_steps_claim():
    service = unit("ragspine-pools.service")["Service"]
    assert service["Type"] == ["oneshot"] and service["RemainAfterExit"] == ["yes"]
    assert service["ExecStart"] == [f"{BIN}/dagster instance concurrency set {pool} 1" for pool in POOLS]


def test_the_daemon_and_webserver_load_the_code_server_of_the_code_server_unit():
    workspace = yaml.safe_load((SYSTEMD / "workspace.yaml").read_text("utf-8"))
    [location] = workspace["load_from"]
    [start] = unit("ragspine-code-server.service")["Service"]["ExecStart"]
    assert f"-p {location['grpc_server']['port']}" in start
    for process in ("daemon", "webserver"):
        [command] = unit(f"ragspine-{process}.service")["Service"]["ExecStart"]
        assert command.endswith("-w deploy/systemd/workspace.yaml")


def test_the_settings_example_holds_no_secret():
    names = [line.partition("=")[0] for line in (SYSTEMD / "ragspine.env.example").read_text().splitlines()]
    secrets = {"DAGSTER_PG_PASSWORD", "PGPASSWORD", "SLACK_BOT_TOKEN", "AWS_SECRET_ACCESS_KEY"}
    assert not secrets & set(names)


def test_the_pools_unit_waits_for_the_instance_rather_than_failing():
    service = unit("ragspine-pools.service")["Service"]
    assert service["TimeoutStartSec"] == ["infinity"]
    [wait] = service["ExecStartPre"]
    assert wait.startswith("/bin/sh -c 'until ") and "sleep 10; done'" in wait


@pytest.mark.system  # real processes: the unit's wait command, PostgreSQL arriving after it started
def test_the_pools_wait_ends_once_postgresql_is_reachable_whatever_the_boot_order(
    tmp_path, database, closed_port
):
    """The pools unit's ExecStartPre, run as written (the venv's path aside) against an instance whose
    PostgreSQL is not there yet: it keeps waiting, saying so; once PostgreSQL answers on that address
    (a forwarder to the loopback server, started late, as a database host booting after this one), it
    ends with 0 and the pools can be set."""
    reason = "dagster-postgres is not installed (pip install -e '.[deploy]')"
    pytest.importorskip("dagster_postgres", reason=reason)
    [wait] = unit("ragspine-pools.service")["Service"]["ExecStartPre"]
    command = shlex.split(wait.replace(f"{BIN}/", f"{Path(sys.executable).parent}/"))
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copyfile(SYSTEMD.parent / "postgres" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(closed_port),
        "DAGSTER_PG_DB": database,
        "DAGSTER_PG_USER": PG["user"],
        "DAGSTER_PG_PASSWORD": "",
    }
    waiting = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    relay = TcpRelay((PG["host"], PG["port"]), port=closed_port)  # PostgreSQL there, started late
    try:
        said = []
        deadline = time.monotonic() + 120 * load_factor()
        while len(said) < 2 and time.monotonic() < deadline:  # two rounds: it waits, and goes on waiting
            said.append(waiting.stdout.readline())
        assert said == ["waiting for the instance (PostgreSQL)\n"] * 2 and waiting.poll() is None

        relay.restore()
        assert waiting.wait(timeout=120 * load_factor()) == 0
    finally:
        relay.cut()
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()

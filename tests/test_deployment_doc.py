"""docs/deployment.md, followed literally: the "One host" section's shell blocks, run as written.

From an empty PostgreSQL database and a bucket that does not exist yet (on a moto S3 server), the
section's ``bash`` blocks run in order as one script, in a folder holding what they read from the
checkout (``deploy/``, ``workspace.yaml``). The only change made to them is the value of some ``export``
lines — this test's database, S3 endpoint, bucket, UI port and loopback Slack — each of which must be
in the doc (so the doc and the test cannot drift). The script must exit 0 (its own ``wait_for_run``
fails it unless each run succeeded); then the instance must hold both runs, queued and started by the
daemon, and successful, the nightly one with drop tests run against the
backfilled nights; and the processes the doc started and stopped must be gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.scheduler.instigation import InstigatorStatus  # not re-exported by dagster

from tests.alerts.slack_server import TOKEN, SlackServer
from tests.conftest import PG, give_database, load_factor

pytestmark = pytest.mark.system  # PostgreSQL, moto, the daemon and the webserver, run by the doc

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "deployment.md"
SECTION = "## One host"
FENCE = re.compile(r"^```(?:bash|sh)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
SCRIPT_TIMEOUT_S = 600  # the whole walk-through on a quiet machine: about 3 minutes


def section(text: str, heading: str) -> str:
    """The text of the ``## `` section whose heading starts with ``heading``, up to the next one."""
    start = text.index(f"\n{heading}") + 1
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def shell_blocks(markdown: str) -> list[str]:
    return FENCE.findall(markdown)


def with_values(script: str, values: dict[str, str]) -> str:
    """``script`` with the value of ``NAME=…`` on its ``export`` lines replaced, for each name of
    ``values``; every name must be exported exactly once."""
    for name, value in values.items():
        pattern = re.compile(rf'(^export\b[^\n]*?\b{name}=)("[^"\n]*"|[^\s"]*)', re.MULTILINE)
        script, count = pattern.subn(lambda m, value=value: m.group(1) + shlex.quote(value), script)
        assert count == 1, f"{name} is exported {count} times in {DOC.name}'s {SECTION!r} section"
    return script


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_the_section_has_the_steps_of_a_deployment():
    """What the issue found missing: seeding S3, the backfill, the health checks, a daemon-launched
    whole-graph run and a tick of the schedule."""
    script = "\n".join(shell_blocks(section(DOC.read_text(), SECTION)))
    for step in (
        "ragspine-eval deploy bootstrap --from",
        "ragspine-eval deploy check",
        "ragspine-eval production backfill --days 14",
        "dagster instance concurrency set",
        "dagster-daemon run",
        "dagster-daemon liveness-check",
        "/server_info",
        "dagster job launch -w workspace.yaml -j full_eval",
        "dagster job launch -w workspace.yaml -j nightly_eval",
        "dagster schedule start nightly_eval_schedule",
        "dagster sensor start index_rebuild_sensor",
    ):
        assert step in script, step
    assert with_values('export A=1 B="x y"\nexport C=3', {"B": "z", "C": "a b"}) == (
        "export A=1 B=z\nexport C='a b'"
    )


def test_the_one_host_section_run_as_written_ends_in_daemon_launched_runs_that_succeed(
    tmp_path, database, pg_role, s3_endpoint, monkeypatch
):
    pytest.importorskip(
        "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
    )
    for tool in ("curl", "pg_isready", "timeout"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH: the doc's commands use it")
    give_database(database, pg_role)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    port = _free_port()
    slack = SlackServer().start()
    values = {
        "DAGSTER_PG_HOST": PG["host"],
        "DAGSTER_PG_PORT": str(PG["port"]),
        "DAGSTER_PG_DB": database,
        # Not a superuser: the database's owner, as the doc's `createdb --owner dagster dagster` makes it.
        "DAGSTER_PG_USER": pg_role,
        "DAGSTER_WEBSERVER_PORT": str(port),
        "RAGSPINE_S3_ENDPOINT_URL": s3_endpoint,
        "RAGSPINE_BUCKET": bucket,
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_CHANNEL": "C0ALERTS",
    }
    script = "\n".join(shell_blocks(section(DOC.read_text(), SECTION)))
    script = "set -euo pipefail\n" + with_values(script, values)
    (tmp_path / "walkthrough.sh").write_text(script)
    # What the commands read from the checkout, where they run.
    (tmp_path / "deploy").symlink_to(REPO / "deploy")
    shutil.copyfile(REPO / "workspace.yaml", tmp_path / "workspace.yaml")
    # Only what the doc exports configures the deployment: none of the suite's own settings.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("RAGSPINE_", "DAGSTER_", "AWS_", "SLACK_"))
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        # Nothing of this machine's AWS set-up (aws_env's isolation), and where the loopback Slack is.
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        SLACK_API_BASE_URL=slack.url,
    )
    output = tmp_path / "walkthrough.log"
    started = time.monotonic()
    with output.open("w") as log:
        walkthrough = subprocess.Popen(
            ["bash", str(tmp_path / "walkthrough.sh")],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            code = walkthrough.wait(timeout=SCRIPT_TIMEOUT_S * load_factor())
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
        logs = tmp_path / "var" / "one-host" / "logs"
        said = "\n".join(
            f"--- {path.name}\n{path.read_text()[-3000:]}" for path in [output, *sorted(logs.glob("*.log"))]
        )
        assert code == 0, f"the walk-through {'timed out' if code is None else f'exited {code}'}\n{said}"
        print(f"walk-through: {took:.0f} s")

        var = tmp_path / "var" / "one-host"
        pids = [int((var / f"{name}.pid").read_text()) for name in ("daemon", "webserver")]
        deadline = time.monotonic() + 60 * load_factor()
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert all(_gone(pid) for pid in pids), "the doc's kill left the daemon or the webserver running"

        monkeypatch.setenv("DAGSTER_HOME", str(var / "dagster"))
        for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER"):
            monkeypatch.setenv(name, values[name])
        monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
        with dg.DagsterInstance.get() as instance:
            runs = {
                run.job_name: run for run in instance.get_runs() if run.job_name != "reeval_on_index_rebuild"
            }
            assert set(runs) == {"full_eval", "nightly_eval"}
            for run in runs.values():
                assert run.status == dg.DagsterRunStatus.SUCCESS, run.job_name
                # Through the run queue: only the daemon starts a queued run.
                assert instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED), run.job_name
            nightly = (
                instance.fetch_materializations(dg.AssetKey("production_metrics"), limit=1)
                .records[0]
                .asset_materialization
            )
            assert nightly.partition == runs["nightly_eval"].tags["dagster/partition"]
            assert nightly.metadata["drop_tests"].value > 0  # the backfilled nights are its history
            running = {
                state.name
                for state in instance.all_instigator_state()
                if state.status == InstigatorStatus.RUNNING
            }
            assert {"nightly_eval_schedule", "index_rebuild_sensor"} <= running
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever the doc started and left running
            os.killpg(walkthrough.pid, signal.SIGKILL)
        slack.stop()

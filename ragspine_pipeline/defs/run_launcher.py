"""The run launcher of the deployed instances: Dagster's default one, plus an answer to the run
monitor's question "is this run's process still alive?" when the run's process is on the daemon's host.

Dagster's ``DefaultRunLauncher`` (a run's process is started by its code server) cannot answer that
question (``supports_check_run_worker_health`` is False): a run whose process died with its host — the
daemon, the code server and the run's process killed together, the machine rebooted — stays STARTED
until the run monitor's maximum runtime ends it, hours later. This launcher answers it from the
process id the run recorded when it started (Dagster's engine event "Started process for run (pid:
N)."): a process that no longer exists, is a zombie, or was started after that event (the id was
reused) is gone, and the daemon's run monitor marks the run failed within its poll interval, with
:data:`LOST_RUN` in the failure's message (the failure alert says it: ``defs/alerts.py``), and run
retries re-execute it from failure.

It only answers for runs whose code server ran on this host (the ``localhost`` code server a
``python_module`` workspace makes the daemon start, or this host's name): a process id means nothing
on another host, or in another container's process namespace. For any other run it answers "running",
and the maximum runtime remains the bound, as with the default launcher.

Use it in ``dagster.yaml``::

    run_launcher:
      module: ragspine_pipeline.defs.run_launcher
      class: ProcessCheckingRunLauncher
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus  # not re-exported by dagster
from dagster._core.storage.tags import GRPC_INFO_TAG

LOST_RUN = "the run was lost with its host"
STARTED_PROCESS = "Started process for run (pid: "  # Dagster's engine event, with the pid in its metadata
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
# /proc gives a process's start in clock ticks after boot; boot time is in whole seconds: a process
# that started within this margin after the run's event is taken to be the run's own.
START_MARGIN_S = 2.0


class ProcessCheckingRunLauncher(dg.DefaultRunLauncher):
    """``DefaultRunLauncher`` whose run monitor notices a dead run process on this host."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        host = _code_server_host(run)
        if host is None or not _is_this_host(host):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"not checked: its code server is on {host}")
        worker = _run_process(self._instance, run.run_id)
        if worker is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "not checked: no process recorded yet")
        pid, started_at = worker
        if process_started_by(pid, started_at):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"pid {pid} is running")
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            # No quote marks: Dagster quotes this text inside the run failure's message.
            f"{LOST_RUN}: its process (pid {pid} on {socket.gethostname()}) is gone, ended before the "
            "run did (the host went down, or the process was killed)",
        )


def _code_server_host(run: dg.DagsterRun) -> str | None:
    """The host of the code server that started the run's process (the tag the launcher wrote)."""
    try:
        return json.loads(run.tags[GRPC_INFO_TAG]).get("host")
    except (KeyError, ValueError, AttributeError):
        return None


def _is_this_host(host: str) -> bool:
    return host in LOCAL_HOSTS or host in {socket.gethostname(), socket.getfqdn()}


def _run_process(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid of the run's process and when it said it started (the latest such event of the run)."""
    records = instance.event_log_storage.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, ascending=False
    ).records
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        if event is None or not (event.message or "").startswith(STARTED_PROCESS):
            continue
        pid = (event.engine_event_data.metadata or {}).get("pid")
        if pid is not None and str(pid.value).isdigit():
            return int(pid.value), entry.timestamp
    return None


def process_started_by(pid: int, moment: float) -> bool:
    """Whether process ``pid`` is alive (not a zombie) and started no later than ``moment`` (epoch
    seconds): the same process, not a later one that was given the id again. Without ``/proc``, a pid
    that exists is taken at its word."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self/stat").exists():
            return False  # /proc is there and the process is not
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # The command name (in parentheses) may hold spaces: the fields that follow start after the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie or dead: it ran, its parent has not reaped it
        return False
    started = _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started <= moment + START_MARGIN_S


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("/proc/stat has no btime")

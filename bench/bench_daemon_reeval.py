"""How long a re-evaluation of the demo takes when a real ``dagster-daemon`` launches it, against the
same run executed in-process.

Both sides run ``reeval_on_index_rebuild`` for a freshly published demo index version:

* in-process: ``execute_in_process`` in a process that has already loaded the code location (what
  ``make demo-regression`` does), timed around the call;
* daemon: ``index_rebuild_sensor`` (interval 1 s) requests the run and the daemon launches it in a run
  worker process of its own (a new process that imports the code location), on the same instance.
  Timed from the run's creation to its end (launch, process start, imports and execution), and from
  the run worker's RUN_START to its end (execution alone).

    python bench/bench_daemon_reeval.py [--repeat 3] [--postgres DBNAME]

Without ``--postgres`` the instance is the embedded SQLite one; with it, ``deploy/postgres/dagster.yaml``
on that (existing, empty) database of the loopback PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = "reeval_on_index_rebuild"
WORKSPACE = """load_from:
  - python_module:
      module_name: ragspine_pipeline.definitions
      location_name: ragspine_pipeline
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", help="an empty database on 127.0.0.1:5432 (user postgres, trust)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="ragspine-bench-daemon-"))
    try:
        env = _environment(scratch, args.postgres)
        os.environ.update(env)
        in_process = _in_process(scratch, args.repeat)
        daemon = _daemon(scratch, env, args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _report(in_process, daemon, args)
    return 0


def _environment(scratch: Path, postgres: str | None) -> dict[str, str]:
    from ragspine_pipeline.demo.build import init_demo

    init_demo(scratch / "demo", today=date.today(), traces_per_day=40)
    home = scratch / "dagster"
    home.mkdir()
    source = REPO / ("deploy/postgres/dagster.yaml" if postgres else "dagster.yaml")
    shutil.copyfile(source, home / "dagster.yaml")
    (scratch / "workspace.yaml").write_text(WORKSPACE)
    env = {
        "DAGSTER_HOME": str(home),
        "RAGSPINE_HOME": str(scratch / "demo"),
        "RAGSPINE_REPORTS": str(scratch / "reports"),
        "RAGSPINE_WORK": str(scratch / "work"),
        "RAGSPINE_ALERTS_OUTBOX": str(scratch / "alerts" / "outbox.jsonl"),
        "RAGSPINE_REBUILD_SENSOR_INTERVAL_S": "1",
    }
    if postgres:
        env.update(
            DAGSTER_PG_HOST="127.0.0.1",
            DAGSTER_PG_PORT="5432",
            DAGSTER_PG_USER="postgres",
            DAGSTER_PG_PASSWORD="",
            DAGSTER_PG_DB=postgres,
        )
    return env


def _in_process(scratch: Path, repeat: int) -> list[float]:
    """Wall seconds of ``execute_in_process`` for ``repeat`` fresh index versions."""
    from ragspine_pipeline.definitions import defs
    from ragspine_pipeline.defs.local import QUIET, local_instance
    from ragspine_pipeline.demo.build import rebuild_index

    instance = local_instance()
    job = defs.resolve_job_def(JOB)
    times = []
    for _ in range(repeat):
        version = rebuild_index(scratch / "demo")["index_version"]
        began = time.perf_counter()
        result = job.execute_in_process(
            instance=instance,
            run_config=QUIET,
            raise_on_error=False,
            tags={"ragspine/index_version": version},
        )
        times.append(time.perf_counter() - began)
        assert result.success, "the in-process re-evaluation failed"
    instance.dispose()
    return times


def _daemon(scratch: Path, env: dict[str, str], repeat: int) -> list[tuple[float, float]]:
    """(creation → end, start → end) seconds of ``repeat`` daemon-launched re-evaluations."""
    import dagster as dg

    from ragspine_pipeline.demo.build import rebuild_index

    workspace = ["-w", str(scratch / "workspace.yaml")]
    full = {**os.environ, **env}
    subprocess.run(
        [sys.executable, "-m", "dagster", "sensor", "start", "index_rebuild_sensor", *workspace],
        env=full,
        cwd=scratch,
        check=True,
        capture_output=True,
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "dagster._daemon", "run", *workspace],
        env=full,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    times = []
    try:
        with dg.DagsterInstance.get() as instance:
            _wait(instance, lambda runs: len(runs) >= 1)  # the current version, evaluated first: warm-up
            for number in range(repeat):
                rebuild_index(scratch / "demo")
                _wait(instance, lambda runs, n=number: len(runs) >= n + 2)
            runs = _finished(instance)[:repeat]  # newest first: the timed ones
            for run in runs:
                stats = instance.get_run_stats(run.run_id)
                record = instance.get_run_record_by_id(run.run_id)
                created = record.create_timestamp.timestamp()
                times.append((stats.end_time - created, stats.end_time - stats.start_time))
                assert run.status == dg.DagsterRunStatus.SUCCESS, f"run {run.run_id} failed"
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)
    return times


def _finished(instance):
    import dagster as dg

    return [r for r in instance.get_runs(dg.RunsFilter(job_name=JOB)) if r.is_finished]


def _wait(instance, done, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done(_finished(instance)):
            return
        time.sleep(0.5)
    raise SystemExit(f"no daemon-launched run finished within {timeout} s")


def _report(in_process: list[float], daemon: list[tuple[float, float]], args) -> None:
    created = [t[0] for t in daemon]
    started = [t[1] for t in daemon]
    base = statistics.median(in_process)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"instance: {'PostgreSQL' if args.postgres else 'SQLite'}; {args.repeat} re-evaluations each")
    print(f"in-process execute_in_process   median {base:6.2f} s  ({_range(in_process)})")
    print(
        f"daemon: run created -> end     median {statistics.median(created):6.2f} s  ({_range(created)})"
        f"  = {statistics.median(created) / base:.2f}x"
    )
    print(
        f"daemon: run started -> end     median {statistics.median(started):6.2f} s  ({_range(started)})"
        f"  = {statistics.median(started) / base:.2f}x"
    )


def _range(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f} s"


if __name__ == "__main__":
    sys.exit(main())

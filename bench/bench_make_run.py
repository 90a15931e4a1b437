"""Benchmark: the materialisation `make run` performs, on a fresh demo and a fresh SQLite instance.

    python bench/bench_make_run.py [--repeat 3] [--traces-per-day 300] [--backfill-days 6]

Each repetition writes the demo into a new temporary folder (not timed), then times
`python -m ragspine_pipeline.defs.local run` as a separate process — the production backfill of the
earlier demo days (one small run per day; `--backfill-days 0` leaves it out), then one Dagster run
materialising the whole graph: golden replay through the reference engine, scoring, decision with its
checks, baseline, the day's production sample and metrics, the slice report — and reads its peak RSS
from the kernel (`ru_maxrss` of the waited-for child). Target (issue 4): ≤ 60 s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(traces_per_day: int, backfill_days: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="ragspine-bench-") as tmp:
        tmp = Path(tmp)
        env = {
            **os.environ,
            "DAGSTER_HOME": str(tmp / "dagster"),
            "RAGSPINE_HOME": str(tmp / "demo"),
            "RAGSPINE_REPORTS": str(tmp / "reports"),
            "RAGSPINE_WORK": str(tmp / "work"),
            "RAGSPINE_ALERTS_OUTBOX": str(tmp / "alerts" / "outbox.jsonl"),
        }
        init = [
            sys.executable,
            "-m",
            "ragspine_pipeline.cli",
            "demo",
            "init",
            "--root",
            str(tmp / "demo"),
            "--traces-per-day",
            str(traces_per_day),
        ]
        subprocess.run(init, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        start = time.perf_counter()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ragspine_pipeline.defs.local",
                "run",
                "--backfill-days",
                str(backfill_days),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _pid, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the run failed (exit {os.waitstatus_to_exitcode(status)})")
        return wall, usage.ru_maxrss / 1024  # KiB → MiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces-per-day", type=int, default=300)
    parser.add_argument("--backfill-days", type=int, default=6)
    args = parser.parse_args()
    walls, peaks = [], []
    for i in range(args.repeat):
        wall, peak = one_run(args.traces_per_day, args.backfill_days)
        walls.append(wall)
        peaks.append(peak)
        print(f"run {i + 1}: {wall:.1f} s, peak RSS {peak:.0f} MiB", flush=True)
    print(
        f"median {statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}); "
        f"peak RSS max {max(peaks):.0f} MiB; cpus {os.cpu_count()}"
    )


if __name__ == "__main__":
    main()

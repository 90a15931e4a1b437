"""Benchmark: how long `ragspine-eval` takes to start, to score a 20-case golden set, and the code
location to load.

    python bench/bench_cli_startup.py [--repeat 15]

Each row is a fresh process timed from spawn to exit (wall time, median and range of --repeat runs):
a bare interpreter (the floor), `import ragspine_pipeline.cli`, `--version`, `--help`, and `score` on
the 20-case grounded-QA pair of examples/wfgy, copied to a temporary folder so that nothing is written
beside the examples; and `import ragspine_pipeline.definitions`, the code location every Dagster
process of a deployment loads (the code server, each run, each Celery worker) with its services built.
The command is the installed console script when it sits beside this interpreter, else
`python -m ragspine_pipeline.cli`. Results go to stdout as a Markdown table for
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "wfgy"


def command() -> list[str]:
    script = Path(sys.executable).with_name("ragspine-eval")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ragspine_pipeline.cli"]


def wall(cmd: list[str], accept: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in accept:
        raise SystemExit(f"exit {done.returncode}: {' '.join(cmd)}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    cli = command()
    with tempfile.TemporaryDirectory() as tmp:
        gold, traces = (shutil.copy(EXAMPLE / name, tmp) for name in ("gold.jsonl", "traces.jsonl"))
        report = str(Path(tmp) / "report.json")
        rows = {
            "python -c pass (the floor)": ([sys.executable, "-c", "pass"], (0,)),
            "import ragspine_pipeline.cli": ([sys.executable, "-c", "import ragspine_pipeline.cli"], (0,)),
            "ragspine-eval --version": ([*cli, "--version"], (0,)),
            "ragspine-eval --help": ([*cli, "--help"], (0,)),
            "ragspine-eval score (20 cases)": (
                [*cli, "score", "--gold", gold, "--trace", traces, "--out", report],
                (0, 1),  # a verdict either way; 2 or 3 would mean the benchmark measured an error
            ),
            "the code location loads": ([sys.executable, "-c", "import ragspine_pipeline.definitions"], (0,)),
        }
        wall(rows["ragspine-eval --version"][0])  # warm the file cache once
        cores = f"{os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))})"
        python = f"Python {platform.python_version()}"
        print(f"machine: {platform.machine()}, {cores}, {python}, {platform.platform()}")
        print(f"command: {' '.join(cli)}\n")
        print(f"| what | wall (median of {args.repeat}) | wall (min–max) |")
        print("|---|---|---|")
        for name, (cmd, accept) in rows.items():
            walls = sorted(wall(cmd, accept) for _ in range(args.repeat))
            print(f"| {name} | {walls[len(walls) // 2]:.3f} s | {walls[0]:.3f}–{walls[-1]:.3f} s |")


if __name__ == "__main__":
    main()

"""Benchmark: this tree against a git revision on the same data, runs interleaved (A B A B ...).

    python bench/bench_ab.py --rev 0c1af84 [--repeat 7] [--n 1000000] [--traces 1000000]

What a change costs when the machine's own drift (±15–50 % from minute to minute here) is larger than
the change: both versions run alternately in fresh processes on the data of ``bench_score.py`` (1M
shuffled traces, ``score --format json``) and ``bench_sampling.py`` (a 1M-trace gzipped day,
``sample --stratify channel``), so that drift hits both alike. The revision is checked out to a
temporary git worktree and imported from there (``PYTHONPATH``) with this tree's virtualenv. The
median of the per-pair ratios (B / A) is the figure to read; it is printed with its range.
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
sys.path.insert(0, str(ROOT / "bench"))

import bench_sampling  # noqa: E402
import bench_score  # noqa: E402


def timed(cmd: list[str], tree: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    process = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {process.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def compare(name: str, cmd: list[str], before: Path, repeat: int) -> None:
    pairs = [(timed(cmd, before), timed(cmd, ROOT)) for _ in range(repeat)]
    walls_a = [a[0] for a, _ in pairs]
    walls_b = [b[0] for _, b in pairs]
    ratios = sorted(b / a for a, b in zip(walls_a, walls_b, strict=True))
    print(
        f"| {name} | {statistics.median(walls_a):.2f} s ({min(walls_a):.2f}–{max(walls_a):.2f}) "
        f"| {statistics.median(walls_b):.2f} s ({min(walls_b):.2f}–{max(walls_b):.2f}) "
        f"| {statistics.median(ratios):.3f} ({ratios[0]:.3f}–{ratios[-1]:.3f}) "
        f"| {max(a[1] for a, _ in pairs):.0f} / {max(b[1] for _, b in pairs):.0f} MiB |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the git revision to compare with (A)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--n", type=int, default=1_000_000, help="cases for the score benchmark")
    parser.add_argument("--traces", type=int, default=1_000_000, help="traces in the sampled day")
    args = parser.parse_args()
    gold, traces = bench_score.generate(args.n, 7, shuffled=True)
    day = bench_sampling.generate(ROOT / "bench" / "data" / f"sampling-{args.traces}", args.traces, 8)
    score = [
        sys.executable,
        "-m",
        "ragspine_pipeline.cli",
        "score",
        "--gold",
        str(gold),
        "--trace",
        str(traces),
    ]
    score += ["--format", "json", "--out", str(bench_score.DATA / "report.json")]
    sample = [
        sys.executable, "-m", "ragspine_pipeline.cli", "sample", "--source", str(day),
        "--date", bench_sampling.DAY, "--n", "1000", "--seed", "7", "--stratify", "channel",
        "--out", str(day / "sample.jsonl"),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ragspine-ab-") as scratch:
        before = Path(scratch) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.rev], cwd=ROOT, check=True)
        try:
            print(f"A = {args.rev}, B = this tree; {args.repeat} interleaved pairs; cpus {os.cpu_count()}")
            print("\n| command | A wall (median, range) | B wall (median, range) | B / A per pair ", end="")
            print("| peak RSS A / B |")
            print("|---|---|---|---|---|")
            compare(f"score, {args.n:,} shuffled, json", score, before, args.repeat)
            compare(f"sample, {args.traces:,}-trace day", sample, before, args.repeat)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()

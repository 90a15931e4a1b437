"""Benchmark: sampling one day in shards on several worker processes, then merging (sources/shards.py).

    python bench/bench_scale_out.py [--traces 4000000] [--files 32] [--n 1000] [--shards 1 2 4]
                                    [--workers 1 2] [--modes plain stratified] [--repeat 1]

The day is ``bench_sampling.py``'s generated day (gzipped JSONL under bench/data/, cached). For each
mode (``plain``: unstratified; ``stratified``: ``--stratify channel``), with redaction of the sample
and of the quarantine as the production asset does:

* ``single``: one process runs ``sample_day`` over the whole day (the reference);
* for each shard count and worker count (workers <= shards): ``plan_shards`` splits the day, the
  shards are dealt round-robin to the workers — each a separate OS process running its shards one
  after another and pickling each shard result to a file, as an IO manager would — and all workers
  start at once; then one more process loads the pickles one at a time and runs ``merge_shards``.

Recorded: wall time of the worker phase (first start to last exit), CPU time and peak RSS of each
worker (``ru_utime + ru_stime`` and ``ru_maxrss`` from ``wait4``), the merge's own time (loading the
pickles and merging, measured inside the merge process) and its peak RSS, the pickled size of the
shard results, and whether the merged sample equals the single-process one (records, counts,
allocation and the quarantine file's bytes). ``--repeat R`` runs R rounds over every configuration
(so that the machine's drift falls on all alike) and gives medians and ranges.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import bench_sampling  # noqa: E402

SEED = 7


def options(mode: str, n: int) -> dict:
    return {"n": n, "seed": SEED, "stratify": "channel" if mode == "stratified" else None}


def outcome(sample, quarantine: Path) -> dict:
    return {
        "records": sample.records,
        "counts": sample.counts,
        "allocation": sample.allocation,
        "quarantine": quarantine.read_bytes() if quarantine.exists() else None,
    }


def dump(value, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


# -- what each child process runs ------------------------------------------------------------------------


def run_single(args: argparse.Namespace) -> None:
    from ragspine_pipeline.redaction import redact_line, redact_trace
    from ragspine_pipeline.sources.sampling import sample_day
    from ragspine_pipeline.sources.trace_store import LocalTraceStore

    quarantine = Path(args.out).with_suffix(".quarantine.jsonl")
    sample = sample_day(
        LocalTraceStore(Path(args.source)),
        bench_sampling.DAY,
        **options(args.mode, args.n),
        quarantine=quarantine,
        redact=redact_trace,
        redact_text=redact_line,
    )
    dump(outcome(sample, quarantine), Path(args.out))


def run_worker(args: argparse.Namespace) -> None:
    from ragspine_pipeline.redaction import redact_line
    from ragspine_pipeline.sources.shards import sample_shard
    from ragspine_pipeline.sources.trace_store import LocalTraceStore

    store = LocalTraceStore(Path(args.source))
    plan = json.loads(Path(args.plan).read_text())
    for index in args.indices:
        result = sample_shard(
            store, bench_sampling.DAY, plan[index], **options(args.mode, args.n), redact_text=redact_line
        )
        dump(result, Path(args.dir) / f"shard-{index:03d}.pkl")
        del result  # the next shard starts from an empty hand, as the next step of a worker would


def run_plan(args: argparse.Namespace) -> None:
    from ragspine_pipeline.sources.shards import plan_shards
    from ragspine_pipeline.sources.trace_store import LocalTraceStore

    plan = plan_shards(LocalTraceStore(Path(args.source)), bench_sampling.DAY, args.shards)
    Path(args.out).write_text(json.dumps(plan))


def run_merge(args: argparse.Namespace) -> None:
    from ragspine_pipeline.redaction import redact_trace
    from ragspine_pipeline.sources.shards import merge_shards

    def results():  # one at a time, as an IO manager loading step outputs in turn would
        for path in sorted(Path(args.dir).glob("shard-*.pkl")):
            with open(path, "rb") as fh:
                yield pickle.load(fh)

    quarantine = Path(args.out).with_suffix(".quarantine.jsonl")
    start = time.perf_counter()
    sample = merge_shards(
        bench_sampling.DAY,
        results(),
        **options(args.mode, args.n),
        redact=redact_trace,
        quarantine=quarantine,
    )
    seconds = time.perf_counter() - start
    dump({**outcome(sample, quarantine), "merge_seconds": seconds}, Path(args.out))


# -- the driver ------------------------------------------------------------------------------------------


def child(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_all(processes: list[subprocess.Popen]) -> list[tuple[float, float]]:
    """Wait for every process: ``(peak RSS in MiB, CPU seconds user + system)`` of each. Raises when one
    failed.

    A child's ``ru_maxrss`` can start from the size of the process it was forked from, so the driver
    imports nothing heavy: planning, sampling and merging all run in children."""
    usages = []
    for process in processes:
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"{process.args} failed: {process.stderr.read().decode()[-3000:]}")
        usages.append((usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime))
    return usages


@dataclass
class Run:
    wall: float  # the worker phase (the single process's wall for the reference)
    workers: list[tuple[float, float]]  # (peak RSS MiB, CPU s) per worker
    merge_seconds: float = 0.0
    merge_wall: float = 0.0
    merge_peak: float = 0.0
    sizes: list[float] = field(default_factory=list)  # MiB per pickled shard result
    equal: bool | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=4_000_000)
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--modes", nargs="+", default=["plain", "stratified"])
    parser.add_argument("--repeat", type=int, default=1, help="rounds over every configuration")
    args = parser.parse_args()
    folder = bench_sampling.generate(
        ROOT / "bench" / "data" / f"sampling-{args.traces}", args.traces, args.files
    )
    size = sum(p.stat().st_size for p in folder.rglob("*.jsonl.gz")) / 1e6
    work = ROOT / "bench" / "data" / "scale-out"
    work.mkdir(parents=True, exist_ok=True)
    # Versions from the metadata, not by importing: the parent stays small (see wait_all).
    print(
        f"{args.traces:,} traces in {args.files} gzipped files, {size:.0f} MB; {platform.machine()}, "
        f"nproc {os.cpu_count()}, Python {platform.python_version()}, pyarrow {version('pyarrow')}, "
        f"numpy {version('numpy')}; {time.strftime('%Y-%m-%d')}; {args.repeat} round(s)",
        flush=True,
    )
    common = ["--source", str(folder), "--n", str(args.n)]
    plans = {}
    for shards in args.shards:
        plan_path = work / f"plan-{shards}.json"
        wait_all([child("plan", "--shards", str(shards), "--out", str(plan_path), *common)])
        plans[shards] = (plan_path, json.loads(plan_path.read_text()))
    runs: dict[tuple, list[Run]] = {}
    # Rounds over every configuration, so that the machine's drift falls on all of them alike.
    for _ in range(args.repeat):
        for mode in args.modes:
            reference = work / f"single-{mode}.pkl"
            start = time.perf_counter()
            usage = wait_all([child("single", "--mode", mode, "--out", str(reference), *common)])
            runs.setdefault((mode, 0, 1), []).append(Run(time.perf_counter() - start, usage))
            expected = pickle.loads(reference.read_bytes())
            for plan_path, plan in plans.values():
                for workers in (w for w in args.workers if w <= len(plan)):
                    run = scale_out(mode, plan, plan_path, workers, work, common, expected)
                    runs.setdefault((mode, len(plan), workers), []).append(run)
            print(f"round done: {mode}", file=sys.stderr, flush=True)
    print(f"\n| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
    for (mode, shards, workers), done in runs.items():
        row(mode, shards or "single `sample_day`", workers, *summary(done))


COLUMNS = [
    "mode",
    "shards",
    "workers",
    "worker phase wall (median, range)",
    "CPU per worker (user+sys)",
    "peak RSS per worker",
    "merge: in process / process wall",
    "merge RSS",
    "total wall (median)",
    "pickled shard results",
    "equal to `sample_day`",
]


def row(*cells: object) -> None:
    print(f"| {' | '.join(map(str, cells))} |", flush=True)


def summary(done: list[Run]) -> list[str]:
    walls = [run.wall for run in done]
    workers = len(done[0].workers)
    cpu = [statistics.median(run.workers[w][1] for run in done) for w in range(workers)]
    peaks = [max(run.workers[w][0] for run in done) for w in range(workers)]
    wall = f"{statistics.median(walls):.1f} s ({min(walls):.1f}–{max(walls):.1f})"
    cells = [wall, " / ".join(f"{c:.0f}" for c in cpu) + " s", " / ".join(f"{p:.0f}" for p in peaks) + " MiB"]
    if done[0].equal is None:  # the reference
        return [*cells, "—", "—", f"{statistics.median(walls):.1f} s", "—", "reference"]
    merge = statistics.median(run.merge_seconds for run in done)
    merge_wall = statistics.median(run.merge_wall for run in done)
    total = statistics.median(run.wall + run.merge_wall for run in done)
    sizes = done[0].sizes
    return [
        *cells,
        f"{merge:.2f} s / {merge_wall:.1f} s",
        f"{max(run.merge_peak for run in done):.0f} MiB",
        f"{total:.1f} s",
        f"{sum(sizes):.1f} MiB ({' + '.join(f'{size:.1f}' for size in sizes)})",
        "yes" if all(run.equal for run in done) else "**NO**",
    ]


def scale_out(
    mode: str, plan: list, plan_path: Path, workers: int, work: Path, common: list[str], expected: dict
) -> Run:
    """One configuration: the workers at once, then the merge."""
    out = work / f"{mode}-{len(plan)}x{workers}"
    out.mkdir(exist_ok=True)
    for old in out.glob("shard-*.pkl"):
        old.unlink()
    start = time.perf_counter()
    processes = []
    for worker in range(workers):
        indices = [str(index) for index in range(worker, len(plan), workers)]  # dealt round-robin
        argv = ["--mode", mode, "--plan", str(plan_path), "--dir", str(out), "--indices", *indices]
        processes.append(child("worker", *argv, *common))
    usage = wait_all(processes)
    run = Run(time.perf_counter() - start, usage)
    merged_path = out / "merged.pkl"
    start = time.perf_counter()
    ((run.merge_peak, _),) = wait_all(
        [child("merge", "--mode", mode, "--dir", str(out), "--out", str(merged_path), *common)]
    )
    run.merge_wall = time.perf_counter() - start
    merged = pickle.loads(merged_path.read_bytes())
    run.merge_seconds = merged.pop("merge_seconds")
    run.sizes = [path.stat().st_size / 2**20 for path in sorted(out.glob("shard-*.pkl"))]
    run.equal = merged == expected
    return run


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("plan", "single", "worker", "merge"):
        role = argparse.ArgumentParser()
        role.add_argument("role")
        role.add_argument("--mode", default="plain")
        role.add_argument("--source", required=True)
        role.add_argument("--n", type=int, required=True)
        role.add_argument("--out")
        role.add_argument("--plan")
        role.add_argument("--dir")
        role.add_argument("--indices", type=int, nargs="*", default=[])
        role.add_argument("--shards", type=int)
        parsed = role.parse_args()
        {"plan": run_plan, "single": run_single, "worker": run_worker, "merge": run_merge}[parsed.role](
            parsed
        )
    else:
        main()

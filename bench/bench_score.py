"""Benchmark: `ragspine-eval score` end to end (parse + score + report) on N seeded cases.

    python bench/bench_score.py [--n 1000000] [--seed 7] [--repeat 3] [--reference]

Generates (once, cached under bench/data/) a gold set and a trace file of N cases each, with a realistic
mix: 80% answerable, ~85% of answers correct and cited, some wrong citations, refusals, over-refusals
and hallucinations, 5 retrieved ids per trace. The traces come twice: replayed in gold order, and as a
production export has them (shuffled, 8 % of the cases without a trace, 5 % written twice, half naming
their case by the ``q_id`` alias), which needs the hash join. Then runs the command as a separate
process and reports wall time and the child's peak RSS in JSON and Markdown, beside the parse-only
yardstick on the same files, and with ``--reference`` the seed-000 per-line scorer
(``bench/seed000_scorer.py``) and the library-path yardstick (``bench/library_path.py``: the grounded
flags in one DuckDB statement, none of the input rules kept). Results go to stdout as a Markdown table
for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TOPICS = ["leave", "travel", "security", "expenses", "hardware", "privacy", "safety", "payroll"]


def _paths(n: int, seed: int, shuffled: bool) -> tuple[Path, Path]:
    traces = f"traces-{n}-{seed}{'-production' if shuffled else ''}.jsonl"
    return DATA / f"gold-{n}-{seed}.jsonl", DATA / traces


def generate(n: int, seed: int, shuffled: bool) -> tuple[Path, Path]:
    DATA.mkdir(exist_ok=True)
    gold, traces = _paths(n, seed, shuffled)
    if gold.exists() and traces.exists():
        return gold, traces
    rnd = random.Random(seed)
    gold_lines, trace_lines = [], []
    for i in range(n):
        qid = f"q{i:07d}"
        topic = rnd.choice(TOPICS)
        answerable = rnd.random() < 0.8
        doc = f"{topic}-{rnd.randrange(5000)}#{rnd.randrange(12)}"
        fact = f"{topic} rule {i} allows {rnd.randrange(2, 60)} days"
        question = f"What does the {topic} policy say about case {i}?"
        if answerable:
            gold_lines.append(
                f'{{"qid": "{qid}", "question": "{question}", "answerable": true, '
                f'"gold_claim_substr": ["{fact}"], "gold_claim": "The {fact}.", "gold_citations": ["{doc}"]}}'
            )
        else:
            gold_lines.append(
                f'{{"qid": "{qid}", "question": "{question}", "answerable": false, '
                f'"gold_claim_substr": [], "gold_citations": []}}'
            )
        retrieved = [f"{rnd.choice(TOPICS)}-{rnd.randrange(5000)}#{rnd.randrange(12)}" for _ in range(4)]
        retrieved.insert(rnd.randrange(5), doc if answerable and rnd.random() < 0.92 else retrieved[0])
        roll = rnd.random()
        if (not answerable and roll < 0.9) or (answerable and roll < 0.04):
            claim, cites = "not in context", []
        elif answerable and roll < 0.09:
            claim, cites = f"The {fact}.", [rnd.choice(retrieved)]
        else:
            claim, cites = f"According to the policy, the {fact}.", [doc if answerable else retrieved[1]]
        ids = ", ".join(f'"{r}"' for r in retrieved)
        cited = ", ".join(f'"{c}"' for c in cites)
        trace_lines.append(
            f'{{"qid": "{qid}", "q": "{question}", "retrieved_ids": [{ids}], '
            f'"answer_json": {{"claim": "{claim}", "citations": [{cited}]}}, '
            f'"latency_ms": {rnd.randrange(80, 900)}}}'
        )
    if shuffled:
        trace_lines = _production_export(trace_lines, random.Random(seed + 1))
    gold.write_text("\n".join(gold_lines) + "\n")
    traces.write_text("\n".join(trace_lines) + "\n")
    return gold, traces


def _production_export(lines: list[str], rnd: random.Random) -> list[str]:
    """The traces as a production export has them: 8 % of the cases without a trace, 5 % of the traces
    written twice (the earlier copy a refusal, so which one wins matters: the last in the file), half
    naming their case by the ``q_id`` alias, all in random order."""
    kept = [line for line in lines if rnd.random() >= 0.08]
    kept = [line.replace('{"qid":', '{"q_id":', 1) if rnd.random() < 0.5 else line for line in kept]
    rnd.shuffle(kept)
    out = []
    for line in kept:
        if rnd.random() < 0.05:
            out.append(re.sub(r'"claim": "[^"]*"', '"claim": "not in context"', line, count=1))
        out.append(line)
    return out


PARSE_ONLY = "import sys, pyarrow.json as pj; [pj.read_json(p) for p in sys.argv[1:]]"


def run_once(gold: Path, traces: Path, fmt: str) -> tuple[float, float, int]:
    if fmt == "parse-only":  # the floor: pyarrow.json.read_json of both files, nothing else
        cmd = [sys.executable, "-c", PARSE_ONLY, str(gold), str(traces)]
    elif fmt == "library-path":  # one DuckDB statement, no input rules: the floor under a scorer with them
        cmd = [sys.executable, str(Path(__file__).with_name("library_path.py")), str(gold), str(traces)]
        cmd += [str(DATA / "report.library-path.json")]
    elif fmt == "seed-000":  # the per-line reference users migrate from
        cmd = [sys.executable, str(Path(__file__).with_name("seed000_scorer.py")), "--gold", str(gold)]
        cmd += ["--trace", str(traces)]
    else:
        score = ["score", "--gold", str(gold), "--trace", str(traces), "--format", fmt]
        cmd = [sys.executable, "-m", "ragspine_pipeline.cli", *score, "--out", str(DATA / f"report.{fmt}")]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"scorer failed with exit {code}: {' '.join(cmd)}")
    return wall, usage.ru_maxrss / 1024, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference", action="store_true", help="also time the seed-000 per-line scorer")
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate_only:
        for shuffled in (False, True):
            generate(args.n, args.seed, shuffled)
        return
    # Generate in a child process: a child forked from a parent holding the generated lines would
    # inherit its resident pages, and ru_maxrss would report the parent's size, not the scorer's.
    generator = [sys.executable, __file__, "--generate-only", "--n", str(args.n), "--seed", str(args.seed)]
    subprocess.run(generator, check=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.platform()}")  # fmt: skip
    print(f"\n| N | traces | format | wall (median of {args.repeat}) | wall (min–max) | peak RSS |")
    print("|---|---|---|---|---|---|")
    medians: dict[tuple[str, str], tuple[float, float]] = {}
    for shuffled in (False, True):
        gold, traces = _paths(args.n, args.seed, shuffled)
        order = "production" if shuffled else "gold order"
        reference = ["library-path", "seed-000"] if shuffled and args.reference else []
        formats = ["parse-only", "json", "markdown", *reference]
        # Interleaved: each repetition runs every format once, so that a noisy minute hits all alike.
        runs: dict[str, list[tuple[float, float, int]]] = {fmt: [] for fmt in formats}
        for _ in range(args.repeat):
            for fmt in formats:
                runs[fmt].append(run_once(gold, traces, fmt))
        for fmt in formats:
            walls = sorted(r[0] for r in runs[fmt])
            rss = max(r[1] for r in runs[fmt])
            medians[order, fmt] = walls[len(walls) // 2], rss
            print(
                f"| {args.n:,} | {order} | {fmt} | {walls[len(walls) // 2]:.2f} s | "
                f"{walls[0]:.2f}–{walls[-1]:.2f} s | {rss:.0f} MB |"
            )
    print()
    for order in ("gold order", "production"):
        floor = medians[order, "parse-only"][0]
        for fmt in ("json", "markdown"):
            print(f"{order}, {fmt}: {medians[order, fmt][0] / floor:.2f} × parse-only")
    if args.reference:
        wall, rss = medians["production", "seed-000"]
        ours, our_rss = medians["production", "json"]
        print(f"seed-000 reference: {wall / ours:.1f} × the time, {rss / our_rss:.1f} × the memory of json")
        floor, floor_rss = medians["production", "library-path"]
        print(f"library path: {wall / floor:.1f} × faster than seed-000, {floor_rss / rss:.2f} of its memory")
    gold, traces = _paths(args.n, args.seed, True)
    sizes = {p.name: p.stat().st_size / 1e6 for p in (gold, traces)}
    print("\nfiles: " + ", ".join(f"{name} {size:.0f} MB" for name, size in sizes.items()))


if __name__ == "__main__":
    main()

"""Benchmark: `ragspine-eval score --evidence` (layered evaluation) on N seeded layered cases.

    python bench/bench_layered.py [--n 100000] [--chunks 20000] [--repeat 3]

Each case requires one chunk of a registry of `--chunks` chunks (1 % restricted, 1 % stale), retrieves
ten candidates, selects three and answers with a two-claim ledger (one claim with a support phrase, one
judged by token overlap). Prints wall time and the scorer's own peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
WORDS = [
    "release",
    "freeze",
    "manager",
    "approves",
    "exception",
    "access",
    "ticket",
    "owner",
    "incident",
    "postmortem",
    "expense",
]


def generate(n: int, n_chunks: int, seed: int) -> tuple[Path, Path, Path]:
    DATA.mkdir(exist_ok=True)
    stem = DATA / f"layered-{n}-{n_chunks}-{seed}"
    gold, traces, evidence = (
        stem.with_name(f"{stem.name}-{part}.jsonl") for part in ("gold", "traces", "evidence")
    )
    if gold.exists() and traces.exists() and evidence.exists():
        return gold, traces, evidence
    rnd = random.Random(seed)
    chunks = [f"doc{i // 4}#{i % 4}" for i in range(n_chunks)]
    with evidence.open("w") as out:
        for chunk in chunks:
            text = " ".join(rnd.choice(WORDS) for _ in range(30))
            row = {"chunk_id": chunk, "version": "v1", "permitted": rnd.random() > 0.01,
                   "current": rnd.random() > 0.01, "text": text}  # fmt: skip
            out.write(json.dumps(row) + "\n")
    with gold.open("w") as g, traces.open("w") as t:
        for i in range(n):
            required = rnd.sample(chunks, 1)
            case = {"case_id": f"c{i:07d}", "question": "q?", "required_source_ids": required,
                    "required_points": ["p"], "tags": {"workflow": rnd.choice("abcd")}}  # fmt: skip
            g.write(json.dumps(case) + "\n")
            first = list(dict.fromkeys(required + rnd.sample(chunks, 9)))
            selected = first[:3]
            text = " ".join(rnd.choice(WORDS) for _ in range(12))
            claims = [
                {"text": text, "citation_id": selected[0], "answer_point": "p"},
                {"text": text, "citation_id": selected[1], "support_phrases": [rnd.choice(WORDS)]},
            ]
            trace = {"case_id": case["case_id"], "first_stage_ids": first, "rerank_input_ids": first,
                     "reranked_ids": first, "selected_context_ids": selected, "selected_versions": ["v1"] * 3,
                     "versions": {"index": "ix", "retriever": "r"}, "answer": {"claims": claims}}  # fmt: skip
            t.write(json.dumps(trace) + "\n")
    return gold, traces, evidence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    gold, traces, evidence = generate(args.n, args.chunks, args.seed)
    inputs = ["--gold", str(gold), "--trace", str(traces), "--evidence", str(evidence)]
    cmd = [
        sys.executable,
        "-m",
        "ragspine_pipeline.cli",
        "score",
        *inputs,
        "--out",
        str(DATA / "layered.json"),
    ]
    runs = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"scorer failed: {' '.join(cmd)}")
        runs.append((time.perf_counter() - start, usage.ru_maxrss / 1024))
    walls = sorted(wall for wall, _ in runs)
    print(f"| {args.n:,} cases, {args.chunks:,} chunks | {walls[len(walls) // 2]:.2f} s | "
          f"{walls[0]:.2f}–{walls[-1]:.2f} s | {max(rss for _, rss in runs):.0f} MB |")  # fmt: skip


if __name__ == "__main__":
    main()

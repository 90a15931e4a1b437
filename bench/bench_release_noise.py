"""Benchmark: does the release gate block honest runs of a stochastic system, and does it catch a real drop?
(issue 15)

    python bench/bench_release_noise.py [--sequences 100] [--runs 30] [--drops 500] [--cases 200]

A simulated system under test answers a 200-case golden set; each case passes with its own fixed
probability (most cases nearly always, some flaky: 60 % of cases at 0.97, 25 % at 0.85, 15 % at 0.55).
Nothing about the system changes from run to run — only its sampling. Each run writes the traces and
calls ``ragspine-eval score --gold G --trace T --config C --baseline B --promote`` in-process (the real
CLI path: loading, scoring, the decision under the baseline's lock, the promotion), with gates that always
pass, so only the baseline can block:

* ``strict`` (today's default): a listed metric strictly below its baseline blocks; a shipping run
  promotes every metric to the better of old and current;
* ``paired`` (``baseline_test: paired``): the exact McNemar test on the cases that flipped, with a margin
  of 2 points at alpha 0.05; the baseline moves only on a clearly significant improvement (p < 0.001).

Reported: blocked runs per 30 consecutive re-evaluations with promotion (no real change), over
``--sequences`` sequences; and, for ``--drops`` replicates, how often a run with a real 10-point drop of
the pass rate (the flaky and a share of the solid cases made worse) is blocked right after a baseline was
promoted from an honest run. Targets: paired blocks ≤ 1 of 30 with no change, and ≥ 80 % of real drops.
Results: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragspine_pipeline import cli  # noqa: E402

GATES = "gates:\n  compliance: {min: 0.0}\n"  # always passes: only the baseline decides
PAIRED = "baseline_test: paired\npaired: {alpha: 0.05, margin: 0.02}\n"


def probabilities(cases: int, rng: np.random.Generator) -> np.ndarray:
    kind = rng.choice(3, size=cases, p=[0.60, 0.25, 0.15])
    return np.array([0.97, 0.85, 0.55])[kind]


def dropped(p: np.ndarray, points: float, rng: np.random.Generator) -> np.ndarray:
    """The same system ``points`` worse on average: cases chosen at random lose 0.5 of pass probability."""
    worse = p.copy()
    order = rng.permutation(len(p))
    budget = points * len(p)
    for i in order:
        if budget <= 0:
            break
        loss = min(0.5, worse[i], budget)
        worse[i] -= loss
        budget -= loss
    return worse


def write_gold(path: Path, cases: int) -> None:
    rows = [
        {
            "qid": f"q{i:03d}",
            "question": f"What is fact {i}?",
            "answerable": True,
            "gold_claim_substr": [f"fact number {i:03d}"],
            "gold_citations": [f"doc{i}#1"],
        }
        for i in range(cases)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_traces(path: Path, p: np.ndarray, rng: np.random.Generator) -> None:
    passed = rng.random(len(p)) < p
    rows = []
    for i, ok in enumerate(passed):
        cited = f"doc{i}#1" if ok else "other#1"
        claim = f"It is fact number {i:03d}." if ok else "It is something else entirely."
        rows.append(
            {"qid": f"q{i:03d}", "answer": {"claim": claim, "citations": [cited]}, "retrieved_ids": [cited]}
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def score(folder: Path, mode: str, run: int) -> int:
    """One re-evaluation with promotion; its exit code (0 ship, 1 block)."""
    args = ["score", "--gold", str(folder / "gold.jsonl"), "--trace", str(folder / "traces.jsonl")]
    args += ["--config", str(folder / f"{mode}.yaml"), "--baseline", str(folder / f"baseline-{mode}.json")]
    args += ["--promote", "--run-id", f"run-{run}", "--out", str(folder / "report.json")]
    with contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(args)
    if code not in (0, 1):
        raise SystemExit(f"ragspine-eval exited {code}")
    return code


def prepare(folder: Path, cases: int) -> None:
    write_gold(folder / "gold.jsonl", cases)
    (folder / "strict.yaml").write_text(GATES)
    (folder / "paired.yaml").write_text(GATES + PAIRED)
    for mode in ("strict", "paired"):
        (folder / f"baseline-{mode}.json").unlink(missing_ok=True)


def no_change(sequences: int, runs: int, cases: int, seed: int) -> dict:
    blocks = {"strict": [], "paired": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for sequence in range(sequences):
            rng = np.random.default_rng([seed, sequence])
            p = probabilities(cases, rng)
            prepare(folder, cases)
            counts = {"strict": 0, "paired": 0}
            for run in range(runs):
                write_traces(folder / "traces.jsonl", p, rng)  # the same traces judged by both modes
                for mode in counts:
                    counts[mode] += score(folder, mode, run)
            for mode, count in counts.items():
                blocks[mode].append(count)
    return {
        mode: {
            "blocked_per_30": round(30 * float(np.mean(values)) / runs, 2),
            "median_sequence": float(np.median(values)),
            "sequences_with_at_most_1": round(float(np.mean(np.array(values) <= 1)), 3),
            "worst_sequence": int(max(values)),
            "sequences": len(values),
        }
        for mode, values in blocks.items()
    }


def real_drop(replicates: int, cases: int, seed: int, points: float = 0.10) -> dict:
    caught = {"strict": 0, "paired": 0}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for replicate in range(replicates):
            rng = np.random.default_rng([seed, 10_000 + replicate])
            p = probabilities(cases, rng)
            prepare(folder, cases)
            write_traces(folder / "traces.jsonl", p, rng)  # an honest run becomes the baseline
            for mode in caught:
                score(folder, mode, 0)
            write_traces(folder / "traces.jsonl", dropped(p, points, rng), rng)
            for mode in caught:
                caught[mode] += score(folder, mode, 1)
    return {mode: round(count / replicates, 3) for mode, count in caught.items()}


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--sequences", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--drops", type=int, default=500)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, Python {platform.python_version()}")
    start = time.perf_counter()
    quiet = no_change(args.sequences, args.runs, args.cases, args.seed)
    print(json.dumps({"no_change": quiet}))
    drops = real_drop(args.drops, args.cases, args.seed)
    print(json.dumps({"real_10_point_drop_blocked": drops}))
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

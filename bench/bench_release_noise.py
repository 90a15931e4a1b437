"""Benchmark: does the release gate block honest runs of a stochastic system, and does it catch a real drop?
(issue 15)

    python bench/bench_release_noise.py [--sequences 100] [--runs 30] [--drops 500] [--cases 200]
                                        [--pool-runs 5] [--honest 5] [--alpha A] [--margin M]

A simulated system under test answers a 200-case golden set (``--cases``); each case passes with its own fixed
probability (most cases nearly always, some flaky: 60 % of cases at 0.97, 25 % at 0.85, 15 % at 0.55).
Nothing about the system changes from run to run — only its sampling. Each run writes the traces and
calls ``ragspine-eval score --gold G --trace T --config C --baseline B --promote`` in-process (the real
CLI path: loading, scoring, the decision under the baseline's lock, the promotion), with gates that always
pass, so only the baseline can block:

* ``strict`` (today's default): a listed metric strictly below its baseline blocks; a shipping run
  promotes every metric to the better of old and current;
* ``paired`` (``baseline_test: paired``): this run's cases against a reference pooled from up to
  ``--pool-runs`` shipping runs (``decision.paired``: an exact Poisson-binomial test, at the default
  alpha and margin unless ``--alpha``/``--margin`` say otherwise); the pool fills with the first
  shipping runs, then moves only on a clearly significant improvement (p < 0.001).

Reported, per mode: over ``--sequences`` sequences of ``--runs`` consecutive re-evaluations with
promotion (no real change), the blocked runs per 30, the share of sequences with 3 or more blocks (95 %
Wilson interval) and the worst sequence; and, for ``--drops`` replicates, how often a run with a real
10-point drop of the pass rate (the flaky and a share of the solid cases made worse) is blocked when the
baseline was built, as in practice, from ``--honest`` honest shipping runs promoted one after the other
(95 % Wilson interval). Targets at 200 cases: sequences with ≥ 3 blocks ≤ 5 %, a 10-point drop blocked
≥ 85 %. Results: bench/RESULTS.md.
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
from ragspine_pipeline.decision.paired import PairedSettings  # noqa: E402
from ragspine_pipeline.scoring.stats import wilson  # noqa: E402

GATES = "gates:\n  compliance: {min: 0.0}\n"  # always passes: only the baseline decides
PAIRED = "baseline_test: paired\npaired: {{alpha: {alpha}, margin: {margin}, pool_runs: {pool_runs}}}\n"
MODES = ("strict", "paired")
DEFAULTS = PairedSettings()
PAIRED_SETTINGS = {"alpha": DEFAULTS.alpha, "margin": DEFAULTS.margin}  # --alpha and --margin change them
STREAK = 3  # a sequence with this many blocks or more is a streak of blocks


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


def prepare(folder: Path, cases: int, pool_runs: int) -> None:
    """A fresh golden set, both configs and no baseline (``PAIRED_SETTINGS``: the paired test's alpha
    and margin)."""
    write_gold(folder / "gold.jsonl", cases)
    (folder / "strict.yaml").write_text(GATES)
    (folder / "paired.yaml").write_text(GATES + PAIRED.format(pool_runs=pool_runs, **PAIRED_SETTINGS))
    for mode in MODES:
        (folder / f"baseline-{mode}.json").unlink(missing_ok=True)


def no_change(sequences: int, runs: int, cases: int, seed: int, pool_runs: int) -> dict:
    blocks: dict[str, list[int]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for sequence in range(sequences):
            rng = np.random.default_rng([seed, sequence])
            p = probabilities(cases, rng)
            prepare(folder, cases, pool_runs)
            counts = dict.fromkeys(MODES, 0)
            for run in range(runs):
                write_traces(folder / "traces.jsonl", p, rng)  # the same traces judged by both modes
                for mode in counts:
                    counts[mode] += score(folder, mode, run)
            for mode, count in counts.items():
                blocks[mode].append(count)
    return {mode: _sequences(values, runs) for mode, values in blocks.items()}


def _sequences(values: list[int], runs: int) -> dict:
    streaks = int(np.sum(np.array(values) >= STREAK))
    low, high = wilson(streaks, len(values))
    return {
        "blocked_per_30": round(30 * float(np.mean(values)) / runs, 2),
        "median_sequence": float(np.median(values)),
        f"sequences_with_{STREAK}_or_more": round(streaks / len(values), 3),
        "wilson_95": [round(low, 3), round(high, 3)],
        "worst_sequence": int(max(values)),
        "sequences": len(values),
    }


def real_drop(
    replicates: int, cases: int, seed: int, pool_runs: int, honest: int, points: float = 0.10
) -> dict:
    """After ``honest`` honest runs scored with promotion (the baseline as it is in practice), is a run
    ``points`` worse blocked?"""
    caught = dict.fromkeys(MODES, 0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for replicate in range(replicates):
            rng = np.random.default_rng([seed, 10_000 + replicate])
            p = probabilities(cases, rng)
            prepare(folder, cases, pool_runs)
            for run in range(honest):
                write_traces(folder / "traces.jsonl", p, rng)  # honest runs build the baseline
                for mode in caught:
                    score(folder, mode, run)
            write_traces(folder / "traces.jsonl", dropped(p, points, rng), rng)
            for mode in caught:
                caught[mode] += score(folder, mode, honest)
    out = {}
    for mode, count in caught.items():
        low, high = wilson(count, replicates)
        out[mode] = {"blocked": round(count / replicates, 3), "wilson_95": [round(low, 3), round(high, 3)]}
    return {**out, "replicates": replicates, "honest_runs_before": honest}


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--sequences", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--drops", type=int, default=500)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--pool-runs", type=int, default=DEFAULTS.pool_runs, help="the paired test's paired.pool_runs"
    )
    parser.add_argument("--honest", type=int, default=5, help="honest runs promoted before the drop")
    parser.add_argument("--alpha", type=float, default=DEFAULTS.alpha, help="the paired test's paired.alpha")
    parser.add_argument(
        "--margin", type=float, default=DEFAULTS.margin, help="the paired test's paired.margin"
    )
    args = parser.parse_args()
    PAIRED_SETTINGS.update(alpha=args.alpha, margin=args.margin)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}")
    settings = {"cases": args.cases, "pool_runs": args.pool_runs, **PAIRED_SETTINGS, "seed": args.seed}
    print(json.dumps(settings))
    start = time.perf_counter()
    quiet = no_change(args.sequences, args.runs, args.cases, args.seed, args.pool_runs)
    print(json.dumps({"no_change": quiet}))
    drops = real_drop(args.drops, args.cases, args.seed, args.pool_runs, args.honest)
    print(json.dumps({"real_10_point_drop_blocked": drops}))
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

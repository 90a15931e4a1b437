"""Benchmark: does the paired release gate block honest runs of a stochastic system, and does it catch a
real drop? (issues 15, 35 and 45)

    python bench/bench_release_noise.py [--sequences 6000] [--runs 30] [--drops 2000] [--cases 200]
                                        [--sut mixed flaky shock] [--scenario release none]
                                        [--cli-sequences 10] [--cli-drops 30] [--alpha A] [--margin M]

Systems under test (``--sut``), each answering a ``--cases`` golden set; nothing about the system changes
from run to run, only its sampling:

* ``mixed``: each case passes with its own fixed probability, 60 % of cases at 0.97, 25 % at 0.85 and
  15 % at 0.55 (mean ≈ 0.88; the system of the earlier benchmarks);
* ``flaky``: 80 % of cases near-certain (0.99) and 20 % that flip 50/50 (mean ≈ 0.89);
* ``shock``: ``mixed`` with a run-level shock shared by every case of a run (``logit p_i + s``,
  ``s ~ N(0, 0.2)`` per run): cases are not independent within a run, which the exact test assumes.

Scenarios (``--scenario``): ``release``, every run of a sequence is a run of one release, scored with
``--release`` (re-evaluations of an unchanged release: the first founds the pool, every later one is of
that release); ``none``, no release is known (every run is judged as a run of its own, as before issue
45).

Reported, per system and scenario: over ``--sequences`` sequences of ``--runs`` consecutive runs with
promotion, the share of sequences with 3 or more blocks (95 % Wilson interval), the worst sequence, the
blocked runs per 30 and the histogram; and, for ``--drops`` replicates, how often a run of a *new*
release with a real 10-point drop of the pass rate (the flaky and a share of the solid cases made worse)
is blocked after 5 honest runs were promoted one after the other (95 % Wilson interval). Targets at 200
cases (issue 45): ≤ 2 % of sequences with ≥ 3 blocks, none with more than 5, a 10-point drop blocked
≥ 0.9.

The sequences go through ``decision.paired`` directly (``paired_test`` then ``next_pool``: what
``ragspine-eval score --promote`` does when only the paired test can block), which is fast; the first
``--cli-sequences`` sequences and ``--cli-drops`` drops of each system and scenario are also scored
through the real CLI in process (``ragspine-eval score --gold G --trace T --config C --baseline B
--promote [--release R]``: loading, scoring, the decision under the baseline's lock, the promotion; gates
that always pass) and must give the same blocks run for run. Results: bench/RESULTS.md.
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
from ragspine_pipeline.decision.paired import PairedSettings, Pool, next_pool, paired_test  # noqa: E402
from ragspine_pipeline.scoring.stats import wilson  # noqa: E402

GATES = "gates:\n  compliance: {min: 0.0}\n"  # always passes: only the baseline decides
PAIRED = "baseline_test: paired\npaired: {{alpha: {alpha}, margin: {margin}, pool_runs: {pool_runs}}}\n"
STREAK = 3  # a sequence with this many blocks or more is a streak of blocks
SHOCK = 0.2  # the shock SUT's run-level standard deviation, in logits
HONEST = 5  # honest runs promoted before the drop
SUTS = ("mixed", "flaky", "shock")
SCENARIOS = ("release", "none")
RELEASE = "r1"  # the release of every run of a sequence (scenario "release")
AT = "2026-11-29T00:00:00Z"  # the time recorded for a join on the direct path (decides nothing)


def probabilities(sut: str, cases: int, rng: np.random.Generator) -> np.ndarray:
    """Each case's pass probability for this sequence."""
    if sut == "flaky":
        return np.where(rng.random(cases) < 0.8, 0.99, 0.5)
    kind = rng.choice(3, size=cases, p=[0.60, 0.25, 0.15])
    return np.array([0.97, 0.85, 0.55])[kind]


def run_probabilities(sut: str, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The pass probabilities of one run: ``p``, or shifted by the run's shock (``shock``)."""
    if sut != "shock":
        return p
    logit = np.log(p / (1 - p)) + rng.normal(0.0, SHOCK)
    return 1 / (1 + np.exp(-logit))


def dropped(p: np.ndarray, points: float, rng: np.random.Generator) -> np.ndarray:
    """The same system ``points`` worse on average: cases chosen at random lose 0.5 of pass probability."""
    worse = p.copy()
    budget = points * len(p)
    for i in rng.permutation(len(p)):
        if budget <= 0:
            break
        loss = min(0.5, worse[i], budget)
        worse[i] -= loss
        budget -= loss
    return worse


# --- one sequence, one drop: the runs' outcomes, judged by a scorer ------------------------------------


def sequence_runs(sut: str, cases: int, runs: int, seed: int, sequence: int) -> list[np.ndarray]:
    """The per-case outcomes of the ``runs`` runs of one no-change sequence."""
    rng = np.random.default_rng([seed, sequence])
    p = probabilities(sut, cases, rng)
    return [rng.random(cases) < run_probabilities(sut, p, rng) for _ in range(runs)]


def drop_runs(sut: str, cases: int, seed: int, replicate: int, points: float = 0.10) -> list[np.ndarray]:
    """``HONEST`` honest runs, then one run ``points`` worse."""
    rng = np.random.default_rng([seed, 10_000 + replicate])
    p = probabilities(sut, cases, rng)
    honest = [rng.random(cases) < run_probabilities(sut, p, rng) for _ in range(HONEST)]
    worse = dropped(p, points, rng)
    return [*honest, rng.random(cases) < run_probabilities(sut, worse, rng)]


class DirectScorer:
    """``decision.paired`` directly: the test, then the pool the run leaves (what the CLI does with
    gates that always pass)."""

    def __init__(self, settings: PairedSettings) -> None:
        self.settings = settings
        self.pool: Pool | None = None

    def reset(self) -> None:
        self.pool = None

    def score(self, passed: np.ndarray, release: str | None, run: int) -> bool:
        outcomes = {f"q{i:03d}": bool(ok) for i, ok in enumerate(passed)}
        comparison = None if self.pool is None else paired_test(self.pool, outcomes, self.settings).to_dict()
        blocked = comparison is not None and comparison["blocks"]
        pool = next_pool(
            self.pool, outcomes, comparison, self.settings, release=release, run=f"run-{run}", at=AT
        )
        self.pool = pool if pool is not None else self.pool
        return blocked


class CliScorer:
    """``ragspine-eval score --promote`` in process, on a fresh baseline file per sequence."""

    def __init__(self, folder: Path, settings: PairedSettings, cases: int) -> None:
        self.folder = folder
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
        (folder / "gold.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        config = PAIRED.format(alpha=settings.alpha, margin=settings.margin, pool_runs=settings.pool_runs)
        (folder / "paired.yaml").write_text(GATES + config)

    def reset(self) -> None:
        (self.folder / "baseline.json").unlink(missing_ok=True)

    def score(self, passed: np.ndarray, release: str | None, run: int) -> bool:
        rows = []
        for i, ok in enumerate(passed):
            cited = f"doc{i}#1" if ok else "other#1"
            claim = f"It is fact number {i:03d}." if ok else "It is something else entirely."
            rows.append(
                {
                    "qid": f"q{i:03d}",
                    "answer": {"claim": claim, "citations": [cited]},
                    "retrieved_ids": [cited],
                }
            )
        (self.folder / "traces.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        args = [
            "score",
            "--gold",
            str(self.folder / "gold.jsonl"),
            "--trace",
            str(self.folder / "traces.jsonl"),
        ]
        args += [
            "--config",
            str(self.folder / "paired.yaml"),
            "--baseline",
            str(self.folder / "baseline.json"),
        ]
        args += ["--promote", "--run-id", f"run-{run}", "--out", str(self.folder / "report.json")]
        args += [] if release is None else ["--release", release]
        with contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(args)
        if code not in (0, 1):
            raise SystemExit(f"ragspine-eval exited {code}")
        return code == 1


Scorer = DirectScorer | CliScorer


def sequences(
    scorer: Scorer, sut: str, scenario: str, count: int, runs: int, cases: int, seed: int
) -> list[int]:
    """Blocks per sequence of ``runs`` runs of an unchanged system."""
    release = RELEASE if scenario == "release" else None
    blocks = []
    for sequence in range(count):
        scorer.reset()
        outcomes = sequence_runs(sut, cases, runs, seed, sequence)
        blocks.append(sum(scorer.score(passed, release, run) for run, passed in enumerate(outcomes)))
    return blocks


def drops(scorer: Scorer, sut: str, scenario: str, count: int, cases: int, seed: int) -> list[bool]:
    """Whether the dropped run of a new release was blocked, per replicate."""
    release = RELEASE if scenario == "release" else None
    caught = []
    for replicate in range(count):
        scorer.reset()
        *honest, worse = drop_runs(sut, cases, seed, replicate)
        for run, passed in enumerate(honest):
            scorer.score(passed, release, run)
        caught.append(scorer.score(worse, None if release is None else "r2", HONEST))
    return caught


def sequence_figures(blocks: list[int], runs: int) -> dict:
    streaks = int(np.sum(np.array(blocks) >= STREAK))
    low, high = wilson(streaks, len(blocks))
    return {
        "sequences": len(blocks),
        f"sequences_with_{STREAK}_or_more": round(streaks / len(blocks), 4),
        "wilson_95": [round(low, 4), round(high, 4)],
        "worst_sequence": int(max(blocks)),
        "blocked_per_30": round(30 * float(np.mean(blocks)) / runs, 3),
        "histogram": np.bincount(blocks).tolist(),
    }


def drop_figures(caught: list[bool]) -> dict:
    low, high = wilson(int(sum(caught)), len(caught))
    return {
        "replicates": len(caught),
        "blocked": round(sum(caught) / len(caught), 4),
        "wilson_95": [round(low, 4), round(high, 4)],
    }


def measure(sut: str, scenario: str, args: argparse.Namespace, settings: PairedSettings) -> dict:
    """The figures of one system and scenario: directly, then cross-checked through the CLI."""
    start = time.perf_counter()
    direct = DirectScorer(settings)
    blocks = sequences(direct, sut, scenario, args.sequences, args.runs, args.cases, args.seed)
    caught = drops(direct, sut, scenario, args.drops, args.cases, args.seed)
    out = {
        "sut": sut,
        "scenario": scenario,
        "no_change": sequence_figures(blocks, args.runs),
        "real_10_point_drop_blocked": drop_figures(caught),
        "seconds": round(time.perf_counter() - start),
    }
    if not (args.cli_sequences or args.cli_drops):
        return out
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        by_cli = CliScorer(Path(tmp), settings, args.cases)
        cli_blocks = sequences(by_cli, sut, scenario, args.cli_sequences, args.runs, args.cases, args.seed)
        cli_caught = drops(by_cli, sut, scenario, args.cli_drops, args.cases, args.seed)
    same = cli_blocks == blocks[: args.cli_sequences] and cli_caught == caught[: args.cli_drops]
    out["cli_cross_check"] = {
        "sequences": len(cli_blocks),
        "drops": len(cli_caught),
        "blocks": int(sum(cli_blocks)),
        "drops_blocked": int(sum(cli_caught)),
        "identical_to_direct": same,
        "seconds": round(time.perf_counter() - start),
    }
    if not same:
        print(json.dumps(out), flush=True)
        raise SystemExit("the CLI and decision.paired disagree: the direct path is not the CLI's")
    return out


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--sequences", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--drops", type=int, default=2000)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--sut", nargs="+", choices=SUTS, default=list(SUTS))
    parser.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--cli-sequences", type=int, default=10, help="sequences also scored by the CLI")
    parser.add_argument("--cli-drops", type=int, default=30, help="drops also scored by the CLI")
    defaults = PairedSettings()
    parser.add_argument("--alpha", type=float, default=defaults.alpha, help="the paired test's alpha")
    parser.add_argument("--margin", type=float, default=defaults.margin, help="the paired test's margin")
    parser.add_argument("--pool-runs", type=int, default=defaults.pool_runs, help="paired.pool_runs")
    args = parser.parse_args()
    settings = PairedSettings(alpha=args.alpha, margin=args.margin, pool_runs=args.pool_runs)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}")
    print(json.dumps({"cases": args.cases, "runs": args.runs, "seed": args.seed, **settings.model_dump()}))
    start = time.perf_counter()
    for sut in args.sut:
        for scenario in args.scenario:
            print(json.dumps(measure(sut, scenario, args, settings)), flush=True)
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

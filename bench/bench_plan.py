"""Benchmark: is the detectable drop ``ragspine-eval plan`` prints caught with the power it claims?

    python bench/bench_plan.py [--replicates 2000] [--json F]

For each configuration the drop ``scoring.power`` says is caught with 80 % power is simulated
``--replicates`` times through the real test, and the share caught is reported with its 95 % Wilson
interval; the target is 80 % ± 5 points. Also, with no drop, the share of false alarms (the test's level).

* nightly: ``scoring.significance.drop_tests`` on synthetic daily summaries (one rate, all traffic, 14
  trailing nights, the one-night window only, ``min_drop`` 0, ``fdr`` set to the per-test level the plan
  used, so that the night's one test is judged at it): ``n`` traces a night at level ``p``, tonight at
  ``p − drop``; with ``τ² > 0`` every night's rate moves by N(0, τ²) on the arcsine scale (the test
  estimates τ² itself from the trailing nights, as it does in production);
* golden: ``decision.paired.paired_test`` on per-case outcomes drawn from the flip model (each case
  regresses with probability ``f + drop``, improves with ``f``) against one reference run, paired at the
  default alpha (0.02) and margin 0.02, or the strict rule (blocks when regressions outnumber improvements).

Results: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragspine_pipeline.decision.paired import paired_test  # noqa: E402
from ragspine_pipeline.scoring import power  # noqa: E402
from ragspine_pipeline.scoring.drop_settings import DropSettings  # noqa: E402
from ragspine_pipeline.scoring.significance import drop_tests  # noqa: E402
from ragspine_pipeline.scoring.stats import wilson  # noqa: E402

FIRST = date(2026, 1, 1)
WINDOW = 14
METRIC = "retrieved_citation_rate"  # lower is worse


@dataclass(frozen=True)
class Nightly:
    n: int
    rate: float
    alpha: float
    tau2: float = 0.0

    @property
    def name(self) -> str:
        return f"nightly n={self.n} p={self.rate:g} α={self.alpha:.3g} τ²={self.tau2:g}"

    def drop(self) -> float:
        design = power.NightlyDesign(rate=self.rate, alpha=self.alpha, tau2=self.tau2, window=WINDOW)
        return power.nightly_detectable_drop(self.n, design)

    def caught(self, drop: float, rng: np.random.Generator) -> bool:
        settings = DropSettings(
            fdr=self.alpha,
            min_drop=0.0,
            window=WINDOW,
            variance_window=WINDOW,
            recent_nights=1,
            sustained_nights=1,
            weekly="off",
            min_n=1,
        )
        level = math.asin(math.sqrt(self.rate))
        shifts = rng.normal(0, math.sqrt(self.tau2), WINDOW + 1) if self.tau2 > 0 else np.zeros(WINDOW + 1)
        summaries = []
        for night in range(WINDOW + 1):
            tonight = night == WINDOW
            base = math.asin(math.sqrt(self.rate - drop)) if tonight else level
            p = math.sin(min(max(base + shifts[night], 0.0), math.pi / 2)) ** 2
            x = int(rng.binomial(self.n, p))
            day = (FIRST + timedelta(days=night)).isoformat()
            summaries.append(
                {"day": day, "metrics": {METRIC: {"value": x / self.n, "n": self.n, "successes": x}}}
            )
        tests = drop_tests(summaries[-1], summaries[:-1], settings)
        return any(t.significant for t in tests.tests if t.metric == METRIC)


@dataclass(frozen=True)
class Golden:
    cases: int
    flip_rate: float
    strict: bool = False

    @property
    def name(self) -> str:
        kind = "strict" if self.strict else "paired"
        return f"golden {self.cases} cases {kind} f={self.flip_rate:g}"

    def design(self) -> power.PairedDesign:
        return power.PairedDesign(flip_rate=self.flip_rate, strict=self.strict)

    def drop(self) -> float:
        return power.paired_detectable_drop(self.cases, self.design())

    def caught(self, drop: float, rng: np.random.Generator) -> bool:
        f = self.flip_rate
        kind = rng.choice(3, size=self.cases, p=[f + drop, f, 1 - 2 * f - drop])  # regress, improve, same
        baseline = {f"q{i}": bool(k != 1) for i, k in enumerate(kind)}
        current = {f"q{i}": bool(k != 0) for i, k in enumerate(kind)}
        comparison = paired_test(baseline, current)
        if self.strict:
            return len(comparison.regressed) > len(comparison.improved)
        return comparison.blocks


CONFIGURATIONS = [
    Nightly(200, 0.95, power.per_test_alpha(0.03, 18)),
    Nightly(1000, 0.9, 0.03),
    Nightly(1000, 0.9, power.per_test_alpha(0.03, 18), tau2=1e-4),
    Golden(50, 0.05),
    Golden(200, 0.05),
    Golden(50, 0.0),
    Golden(50, 0.05, strict=True),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for index, config in enumerate(CONFIGURATIONS):
        started = time.perf_counter()
        drop = config.drop()
        rng = np.random.default_rng([7, index])
        caught = sum(config.caught(drop, rng) for _ in range(args.replicates))
        false = sum(config.caught(0.0, rng) for _ in range(args.replicates))
        low, high = wilson(caught, args.replicates)
        row = {
            "configuration": config.name,
            "detectable_drop": round(drop, 4),
            "replicates": args.replicates,
            "power": caught / args.replicates,
            "power_95": [round(low, 4), round(high, 4)],
            "within_target": abs(caught / args.replicates - 0.8) <= 0.05,
            "false_alarms": false / args.replicates,
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        print(
            f"{row['configuration']:<42} drop {100 * drop:5.2f} pts  power {row['power']:.3f} "
            f"({low:.3f}–{high:.3f})  {'ok' if row['within_target'] else 'OFF'}  "
            f"false alarms {row['false_alarms']:.4f}  {row['seconds']} s",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

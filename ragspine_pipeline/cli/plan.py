"""``ragspine-eval plan``: what a golden set or a nightly sample can detect, one line per configuration.

The figures come from ``scoring.power`` (the models are stated there). With ``--config`` (a gates
config) the release gate's paired alpha and margin and the nightly test's fdr and window come from it
(the options still win), and when its ``production:`` section sets a ``sample:`` target, a third line
prints the nightly sample size that target implies at the given ``--rate`` and ``--tau2``
(``scoring.sample_plan.target_sample_size``: capped by its ``max``, never below ``--sample-size``).
Exit codes: 0 planned, 2 unusable input (``main`` prints the one line).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from ragspine_pipeline.cli.args import EXIT_PASS, UsageError
from ragspine_pipeline.contracts.columns import load_gold
from ragspine_pipeline.decision.detectable import points_up
from ragspine_pipeline.decision.paired import PairedSettings
from ragspine_pipeline.scoring import power, sample_plan
from ragspine_pipeline.scoring.drop_settings import DropSettings

if TYPE_CHECKING:
    from ragspine_pipeline.decision.config import EvalConfig

# The defaults the parser names in its help (``tests/cli/test_plan.py`` keeps the two equal).
DEFAULT_SAMPLE_SIZE = 200  # ``RAGSPINE_SAMPLE_SIZE`` / the component's ``sample_size``
DEFAULT_RATE = 0.9
DEFAULT_POWER = power.DEFAULT_POWER
DEFAULT_FLIP_RATE = 0.05  # a sampling system under test; measure yours: flipped cases / (2 × cases)


def run_plan(args: argparse.Namespace) -> int:
    if args.golden is None and args.cases is None and not args.nightly:
        raise UsageError("plan: give --golden FILE or --cases N, and/or --nightly")
    target = DEFAULT_POWER if args.power is None else args.power
    if not 0 < target < 1:
        raise UsageError("plan: --power must be between 0 and 1, exclusive")
    if args.drop is not None and args.drop <= 0:
        raise UsageError("plan: --drop must be above 0")
    config = _config(args)
    if args.golden is not None or args.cases is not None:
        print(_golden_line(args, target, config))
    if args.nightly:
        print(_nightly_line(args, target, config))
        if config is not None and config.production.sample is not None:
            print(_target_line(args, config))
    return EXIT_PASS


def _config(args: argparse.Namespace) -> EvalConfig | None:
    """The gates config of ``--config`` (None without one)."""
    path = getattr(args, "config", None)
    if path is None:
        return None
    from ragspine_pipeline.decision.config import load_config
    from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
    from ragspine_pipeline.metrics import Scope

    return load_config(path, KNOWN_METRICS, Scope.WITH_REGISTRY)


def _golden_line(args: argparse.Namespace, target: float, config: EvalConfig | None = None) -> str:
    cases = args.cases if args.golden is None else load_gold(args.golden).table.num_rows
    settings = PairedSettings() if config is None else config.paired
    flip = DEFAULT_FLIP_RATE if args.flip_rate is None else args.flip_rate
    if flip >= 0.5:
        raise UsageError("plan: --flip-rate must be below 0.5 (a share of cases in each direction)")
    design = power.PairedDesign(
        flip_rate=flip, alpha=settings.alpha, margin=settings.margin, strict=args.baseline_test == "strict"
    )
    test = (
        f"strict baseline comparison, flip rate {_percent(flip)} each way"
        if design.strict
        else f"paired test at alpha {settings.alpha:g}, margin {_points(settings.margin)} points, "
        f"flip rate {_percent(flip)} each way"
    )
    if design.strict:
        false_blocks = power.paired_false_block_rate(cases, design)
        test += f"; it blocks an unchanged system on {_percent(false_blocks)} of runs"
    how = f"{_percent(target)} power; {test}"
    if args.drop is not None:
        if args.drop > 1 - 2 * flip:
            raise UsageError(f"plan: --drop cannot exceed 1 − 2 × flip rate ({1 - 2 * flip:g})")
        needed = power.paired_sample_size(args.drop, design, target)
        if needed is None:
            why = (
                ""
                if design.strict or args.drop > settings.margin
                else " (not above the paired test's margin)"
            )
            return (
                f"no golden set of up to {power.MAX_CASES:,} cases reliably catches a "
                f"{_points(args.drop)}-point drop{why} ({how})"
            )
        return f"a {_points(args.drop)}-point drop needs {needed:,} golden cases ({how}; you have {cases:,})"
    drop = power.paired_detectable_drop(cases, design, target)
    if drop is None:
        return f"with {cases:,} cases, no drop is reliably caught ({how})"
    return f"with {cases:,} cases, drops under {points_up(drop)} points are not reliably caught ({how})"


def _nightly_line(args: argparse.Namespace, target: float, config: EvalConfig | None = None) -> str:
    n = DEFAULT_SAMPLE_SIZE if args.sample_size is None else args.sample_size
    design, how = _nightly_design(args, config)
    how = f"{_percent(target)} power; {how}"
    rate = design.rate
    if args.drop is not None:
        if args.drop > rate:
            raise UsageError(f"plan: --drop cannot exceed --rate ({rate:g})")
        needed = power.nightly_sample_size(args.drop, design, target)
        if needed is None:
            return (
                f"at a rate of {_percent(rate)}, no nightly sample reliably catches a "
                f"{_points(args.drop)}-point drop: the between-day variance alone hides it ({how})"
            )
        return (
            f"a {_points(args.drop)}-point drop at a rate of {_percent(rate)} needs {needed:,} traces"
            f" a night ({how}; you score {n:,})"
        )
    drop = power.nightly_detectable_drop(n, design, target)
    if drop is None:
        return f"with {n:,} traces a night at a rate of {_percent(rate)}, no drop is reliably caught ({how})"
    return (
        f"with {n:,} traces a night at a rate of {_percent(rate)}, drops under {points_up(drop)} points "
        f"are not reliably caught ({how})"
    )


def _nightly_design(args: argparse.Namespace, config: EvalConfig | None) -> tuple[power.NightlyDesign, str]:
    """The nightly test the options (and the config's ``production:`` section) describe, and how, in
    words."""
    defaults = DropSettings() if config is None else config.production
    rate = DEFAULT_RATE if args.rate is None else args.rate
    tau2 = 0.0 if args.tau2 is None else args.tau2
    if rate <= 0 or not math.isfinite(tau2) or tau2 < 0:
        raise UsageError("plan: --rate must be above 0 and --tau2 a number of at least 0")
    if args.alpha is not None:
        if not 0 < args.alpha < 1:
            raise UsageError("plan: --alpha must be between 0 and 1, exclusive")
        alpha, level = args.alpha, f"α = {args.alpha:.3g}"
    else:
        fdr = defaults.fdr if args.fdr is None else args.fdr
        if not 0 < fdr < 1:
            raise UsageError("plan: --fdr must be between 0 and 1, exclusive")
        tests = sample_plan.nightly_tests(defaults, args.slices) if args.tests is None else args.tests
        alpha, level = (
            power.per_test_alpha(fdr, tests),
            f"α = fdr {fdr:g} / {tests:g} tests = {fdr / tests:.3g}",
        )
    window = defaults.window if args.window is None else args.window
    design = power.NightlyDesign(rate=rate, alpha=alpha, tau2=tau2, window=window)
    return design, f"one-sided test at {level}, τ² = {tau2:g}, {window} trailing nights"


def _target_line(args: argparse.Namespace, config: EvalConfig) -> str:
    """The nightly sample size ``production.sample`` implies at ``--rate`` and ``--tau2``."""
    sample = config.production.sample
    fixed = DEFAULT_SAMPLE_SIZE if args.sample_size is None else args.sample_size
    design, how = _nightly_design(args, config)
    of = f" of {sample.rate}" if sample.rate is not None else ""
    goal = f"a {_points(sample.detect)}-point drop{of} with {_percent(sample.power)} power"
    how = f"{how}; max {sample.max:,}, fixed size {fixed:,}"
    size, reason, traces = sample_plan.target_sample_size(sample, design, fixed)
    if reason == "unreachable":
        best = power.nightly_best_drop(design, sample.power)
        reach = "no drop" if best is None else f"{points_up(best)} points"
        return (
            f"production.sample: at a rate of {_percent(design.rate)}, no nightly sample catches {goal}: "
            f"the between-day variance alone hides it (best reachable: {reach}); {size:,} traces a night, "
            f"the max ({how})"
        )
    why = {
        "target": "what the target needs",
        "floor": f"the fixed size; the target needs {traces:,}",
        "capped": f"the max; the target needs {traces:,}",
    }[reason]
    return (
        f"production.sample: {goal} at a rate of {_percent(design.rate)} → {size:,} traces a night "
        f"({why}; {how})"
    )


def _percent(share: float) -> str:
    return f"{100 * share:.3g} %"


def _points(share: float) -> str:
    return f"{100 * share:g}"

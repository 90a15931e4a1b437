"""What a golden set can detect: the smallest drop of the pass rate the baseline test in use (strict, or
paired with its alpha and margin) catches with 80 % power on the run's number of cases
(``scoring.power``), or why it is not stated; and the release report's line saying so."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # types only: the alerts read decisions without loading the scoring stack
    from ragspine_pipeline.decision.baseline import Comparison
    from ragspine_pipeline.decision.paired import PairedSettings

DETECTABLE_POWER = 0.8  # the power the release report's detectable drop is stated at


def detectable_drop(
    cases: int | None,
    baseline_test: Literal["strict", "paired"],
    *,
    alpha: float | None = None,
    margin: float | None = None,
    power: float = DETECTABLE_POWER,
) -> dict[str, Any]:
    """What a golden set of ``cases`` can detect with the baseline test in use: the smallest drop of the
    pass rate (rate points) it blocks with ``power`` (``scoring.power.paired_detectable_drop``), under
    the flip rate ``scoring.power.RELEASE_FLIP_RATE`` assumes for the test (none for strict, a deterministic
    system; 5 % each way for paired, a system that samples). ``{cases, power, drop, test, [alpha,
    margin,] flip_rate, line}``; ``drop`` is None (with a ``reason``) when no drop is reliably caught,
    and without cases there is no ``drop``, only the ``reason``."""
    from ragspine_pipeline.decision.paired import PairedSettings
    from ragspine_pipeline.scoring import power as plan  # scipy, only where the figure is worked out

    defaults = PairedSettings()
    alpha = defaults.alpha if alpha is None else alpha
    margin = defaults.margin if margin is None else margin
    flip_rate = plan.RELEASE_FLIP_RATE[baseline_test]
    test: dict[str, Any] = {"test": baseline_test}
    if baseline_test == "paired":
        test.update(alpha=alpha, margin=margin)
    test["flip_rate"] = flip_rate
    if not cases or cases < 1:
        return {"cases": 0, **test, "reason": "no golden cases to compare"}
    design = plan.PairedDesign(
        flip_rate=flip_rate, alpha=alpha, margin=margin, strict=baseline_test == "strict"
    )
    drop = plan.paired_detectable_drop(int(cases), design, power)
    out: dict[str, Any] = {
        "cases": int(cases),
        "power": power,
        "drop": None if drop is None else round(drop, 4),
        **test,
    }
    if drop is None:
        out["reason"] = f"with {int(cases):,} cases no drop is reliably caught"
    out["line"] = detectable_drop_text(out)
    return out


def comparison_detectable_drop(
    comparison: Comparison | None,
    cases: int | None,
    *,
    baseline_test: Literal["strict", "paired"] | None = None,
    paired_settings: PairedSettings | None = None,
) -> dict[str, Any]:
    """:func:`detectable_drop` for a run compared with its baseline: the paired test's own cases, alpha
    and margin when it ran (``comparison.paired``); otherwise ``baseline_test`` (when not given: strict,
    the config's default) on the run's ``cases``. Without a comparison, only the reason."""
    if comparison is None:
        return {"reason": "no baseline comparison in this run"}
    if comparison.paired is not None:
        paired = comparison.paired
        return detectable_drop(
            paired.get("n"), "paired", alpha=paired.get("alpha"), margin=paired.get("margin")
        )
    if baseline_test == "paired":
        if paired_settings is None:
            return detectable_drop(cases, "paired")
        return detectable_drop(cases, "paired", alpha=paired_settings.alpha, margin=paired_settings.margin)
    return detectable_drop(cases, "strict")


def detectable_drop_text(figure: Mapping[str, Any] | None) -> str | None:
    """The release report's line: "With 50 cases, drops under 19.8 points are not reliably caught (80 %
    power; paired test at alpha 0.02, margin 2 points, 5 % of cases flipping each way)." None when the
    figure is not stated (no baseline comparison, no cases)."""
    if not isinstance(figure, Mapping) or not figure.get("cases") or "drop" not in figure:
        return None
    cases, drop = int(figure["cases"]), figure["drop"]
    flips = float(figure.get("flip_rate") or 0.0)
    if figure.get("test") == "paired":
        test = (
            f"paired test at alpha {float(figure['alpha']):g}, margin "
            f"{100 * float(figure['margin']):g} points, {100 * flips:g} % of cases flipping "
            "each way"
        )
    else:
        flipping = "a deterministic system" if flips == 0 else f"{100 * flips:g} % of cases flipping each way"
        test = f"strict comparison, {flipping}"
    how = f"{100 * float(figure.get('power', DETECTABLE_POWER)):g} % power; {test}"
    if drop is None:
        return f"With {cases:,} cases, no drop is reliably caught ({how})."
    under = points_up(float(drop))
    return f"With {cases:,} cases, drops under {under} points are not reliably caught ({how})."


def points_up(share: float) -> str:
    """A detectable drop in points, rounded up: to a tenth below 10 points, to a whole point above (the
    release report's and ``ragspine-eval plan``'s rounding)."""
    points = 100 * share
    return f"{math.ceil(points * 10 - 1e-9) / 10:g}" if points < 10 else f"{math.ceil(points - 1e-9)}"

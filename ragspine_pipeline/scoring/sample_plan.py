"""The nightly sample size from a target (``SampleTarget``, ``production: {sample: ...}`` in the gates
config; :func:`nightly_sample_plan`): each all-traffic rate's level and ``τ²`` are estimated from the
previous nights' summaries with ``scoring.significance``'s own estimators, the per-test ``α`` from the
latest night's tests, and the night's size is ``scoring.power.nightly_sample_size`` of the target over
the rate's observations per trace, capped by ``max``, never below the fixed size."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragspine_pipeline.scoring.drop_series import ALL_TRAFFIC, entry_counts
from ragspine_pipeline.scoring.drop_settings import WORSE_WHEN, DropSettings, SampleTarget
from ragspine_pipeline.scoring.night_family import test_weight
from ragspine_pipeline.scoring.power import (
    DEFAULT_WINDOW,
    NightlyDesign,
    nightly_best_drop,
    nightly_detectable_drop,
    nightly_sample_size,
    per_test_alpha,
)
from ragspine_pipeline.scoring.random_effects import between_day_variance, variance_stabilised


@dataclass(frozen=True)
class RateNeed:
    """What one rate's history says a target needs: its level (lower is worse), between-day variance,
    the test's per-test level, observations per sampled trace and the traces the target needs (None:
    no night of any size reaches it; ``best`` is then the smallest drop any night catches)."""

    metric: str
    level: float  # lower is worse (one minus the refusal or fabrication rate)
    tau2: float
    alpha: float
    nights: int
    per_trace: float
    traces: int | None
    best: float | None
    higher_is_worse: bool = False

    @property
    def shown(self) -> float:
        """The level in the rate's own direction (the refusal rate as itself)."""
        return 1 - self.level if self.higher_is_worse else self.level


@dataclass(frozen=True)
class SamplePlan:
    """The night's sample size and why: ``reason`` is ``fixed`` (no target set), ``no history`` (no rate
    has ``min_days`` nights yet), ``target`` (the size the target needs), ``floor`` (the target needs
    fewer than the fixed size), ``capped`` (more than ``max``) or ``unreachable`` (the between-day
    variance alone hides the drop: ``max`` is used and ``warning`` says so)."""

    size: int
    fixed: int
    reason: str
    target: SampleTarget | None = None
    need: RateNeed | None = None
    window: int = DEFAULT_WINDOW
    detectable: float | None = None  # the drop caught with the target's power at ``size``
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (the nightly summary's ``sample_size``): the size, the fixed size, the reason, the
        target and, once sized from history, the rate, its level (in its own direction), τ², the test's
        α, the traces the target needs (null: unreachable) and the drop caught at ``size``."""
        out: dict[str, Any] = {"size": self.size, "fixed": self.fixed, "reason": self.reason}
        if self.target is not None:
            out["target"] = self.target.model_dump()
        need = self.need
        if need is not None:
            out.update(
                rate=need.metric,
                level=round(need.shown, 4),
                tau2=float(f"{need.tau2:.4g}"),
                alpha=float(f"{need.alpha:.4g}"),
                nights=need.nights,
                per_trace=round(need.per_trace, 4),
                needed=need.traces,
                best_drop=None if need.best is None else round(need.best, 4),
                detectable_drop=None if self.detectable is None else round(self.detectable, 4),
            )
        if self.warning is not None:
            out["warning"] = self.warning
        out["why"] = self.line()
        return out

    def line(self) -> str:
        """One line for people: the size and why."""
        if self.target is None:
            return f"{self.size:,} traces a night (the fixed sample size; no production.sample target)"
        goal = f"a {_pts(self.target.detect)}-point drop with {_pct(self.target.power)} power"
        if self.need is None:
            return f"{self.size:,} traces a night (the fixed size: no history yet to size {goal} from)"
        need = self.need
        basis = (
            f"{need.metric} at {_pct(need.shown)}, τ² = {need.tau2:.3g} over "
            f"{need.nights} nights, α = {need.alpha:.3g}"
        )
        caught = (
            "no drop reliably caught"
            if self.detectable is None
            else f"drops of {_pts(self.detectable)} points caught with {_pct(self.target.power)} power"
        )
        if self.reason == "unreachable":
            best = "no drop" if need.best is None else f"{_pts(need.best)} points"
            return (
                f"{self.size:,} traces a night (max): no sample size catches {goal} on {need.metric}, the "
                f"between-day variance alone hides it (best reachable: {best}); {basis}"
            )
        why = {
            "target": f"what {goal} needs",
            "floor": f"the fixed size; {goal} needs only {need.traces:,}",
            "capped": f"the max; {goal} needs {need.traces:,}",
        }[self.reason]
        return f"{self.size:,} traces a night ({why}; {basis}): {caught}"


def target_sample_size(
    target: SampleTarget, design: NightlyDesign, fixed: int, per_trace: float = 1.0
) -> tuple[int, str, int | None]:
    """``(size, reason, traces needed)``: the smallest number of traces a night at which a drop of
    ``target.detect`` is caught with ``target.power`` (``nightly_sample_size`` of the observations, over
    ``per_trace`` observations a sampled trace), capped by ``target.max`` and never below ``fixed``. The
    reason is ``target``, ``floor``, ``capped`` or ``unreachable`` (then ``max``, and no traces)."""
    drop = min(target.detect, design.rate)
    observations = nightly_sample_size(drop, design, target.power)
    if observations is None:
        return max(fixed, target.max), "unreachable", None
    traces = max(1, math.ceil(observations / per_trace - 1e-9))
    if traces > target.max:
        return max(fixed, target.max), "floor" if fixed >= traces else "capped", traces
    if traces <= fixed:
        return fixed, "floor", traces
    return traces, "target", traces


def nightly_sample_plan(history: Sequence[dict], settings: DropSettings, fixed: int) -> SamplePlan:
    """The night's sample size from ``settings.sample`` and the daily summaries of the previous nights
    (``history``, any order; those before the night to sample): ``fixed`` when no target is set or no
    rate has ``settings.min_days`` nights yet. Each all-traffic rate's level (the random-effects mean of
    its last ``window`` kept nights, on the arcsine scale) and between-day variance τ² (over the last
    ``variance_window`` nights, screened) are estimated as ``scoring.significance`` does, with its
    functions; the per-test level is ``fdr`` over the tests of the latest night that ran them, divided by
    the all-traffic one-night test's weight (``nightly_tests`` before any). The rate is ``sample.rate``,
    else the one that needs the most traces (one the target cannot reach at all first)."""
    target = settings.sample
    if target is None:
        return SamplePlan(size=fixed, fixed=fixed, reason="fixed", window=settings.window)

    nights = sorted((d for d in history if d.get("day")), key=lambda d: d["day"])[-settings.variance_window :]
    alpha = per_test_alpha(settings.fdr, _tests_per_weight(nights, settings))
    metrics = [target.rate] if target.rate is not None else list(WORSE_WHEN)
    needs = [need for m in metrics if (need := _rate_need(m, nights, settings, alpha, target)) is not None]
    if not needs:
        return SamplePlan(size=fixed, fixed=fixed, reason="no history", target=target, window=settings.window)
    need = max(needs, key=lambda n: (n.traces is None, n.traces or 0, n.metric))
    design = NightlyDesign(rate=need.level, alpha=alpha, tau2=need.tau2, window=settings.window)
    size, reason, _ = target_sample_size(target, design, fixed, need.per_trace)
    observations = max(1, math.floor(size * need.per_trace))
    warning = None
    if reason == "unreachable":
        best = "no drop at all" if need.best is None else f"{_pts(need.best)} points"
        warning = (
            f"production.sample: no nightly sample catches a {_pts(target.detect)}-point drop of "
            f"{need.metric} with {_pct(target.power)} power (its between-day variance τ² = {need.tau2:.3g} "
            f"alone hides it; the best reachable is {best}): sampling max = {size:,} traces"
        )
    return SamplePlan(
        size=size,
        fixed=fixed,
        reason=reason,
        target=target,
        need=need,
        window=settings.window,
        detectable=nightly_detectable_drop(observations, design, target.power),
        warning=warning,
    )


def _rate_need(
    metric: str, nights: Sequence[dict], settings: DropSettings, alpha: float, target: SampleTarget
) -> RateNeed | None:
    """One all-traffic rate's estimates over ``nights`` (None: fewer than ``min_days`` nights hold it,
    or its level is 0, where it cannot drop)."""

    rows = []
    for night in nights:
        counts = entry_counts((night.get("metrics") or {}).get(metric), WORSE_WHEN[metric])
        if counts is not None:
            rows.append((counts, night.get("n") or counts[2]))
    if len(rows) < settings.min_days:
        return None
    x = np.array([c[0] for c, _ in rows], dtype=float)
    n = np.array([c[1] for c, _ in rows], dtype=float)
    y, v = variance_stabilised(x, n)
    tau2, kept = between_day_variance(y[None, :], v[None, :])
    level_nights = np.zeros(len(rows), dtype=bool)
    level_nights[-settings.window :] = True
    use = kept[0] & level_nights
    if not use.any():
        use = level_nights
    w = 1 / (v[use] + tau2)
    level = math.sin(float(np.sum(w * y[use]) / np.sum(w))) ** 2
    if level <= 0:
        return None
    per_trace = float(n.sum()) / float(sum(traces for _, traces in rows))
    design = NightlyDesign(rate=min(level, 1.0), alpha=alpha, tau2=float(tau2), window=settings.window)
    observations = nightly_sample_size(min(target.detect, design.rate), design, target.power)
    return RateNeed(
        metric=metric,
        level=design.rate,
        tau2=float(tau2),
        alpha=alpha,
        nights=len(rows),
        per_trace=per_trace,
        traces=None if observations is None else max(1, math.ceil(observations / per_trace - 1e-9)),
        best=nightly_best_drop(design, target.power),
        higher_is_worse=WORSE_WHEN[metric] == "higher",
    )


def _tests_per_weight(nights: Sequence[dict], settings: DropSettings) -> float:
    """The night's test count over the all-traffic one-night test's normalised weight — the sum of the
    tests' weights over its weight — from the latest night that ran drop tests; ``nightly_tests``
    before any did."""

    for night in reversed(nights):
        ran = (night.get("drop_tests") or {}).get("tests") or []
        tests = [t for t in ran if t.get("p_value") is not None]
        if tests:
            total = sum(test_weight(t.get("slice"), t.get("nights", 1), settings) for t in tests)
            return max(1.0, total / test_weight(ALL_TRAFFIC, 1, settings))
    return nightly_tests(settings)


def nightly_tests(settings: DropSettings, slices: int = 0) -> float:
    """A night's tests — every production rate in every window, in all traffic and in ``slices`` slices
    (the values of every tag dimension together) — over the all-traffic one-night test's weight:
    ``α = fdr / nightly_tests`` is that test's level (with one real change the night's two-stage
    procedure rejects at the flat procedure's first step, ``scoring.night_family``)."""

    per_rate = sum(test_weight(ALL_TRAFFIC, nights, settings) for nights in settings.windows)
    per_rate += slices * sum(test_weight("slice", nights, settings) for nights in settings.windows)
    return len(WORSE_WHEN) * per_rate / test_weight(ALL_TRAFFIC, 1, settings)


def _pct(share: float) -> str:
    return f"{100 * share:.3g} %"


def _pts(share: float) -> str:
    return f"{100 * share:.3g}"

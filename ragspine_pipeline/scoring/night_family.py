"""The night's error control over all its drop tests, and what an alerting all-traffic test says about
the traffic mix (``scoring.significance`` states the model and why).

**Two stages.** The tests are grouped by rate (every slice and window of one metric is one group).
First the rates: each group's weighted Simes p-value (the smallest weighted Benjamini–Hochberg adjusted
p-value within it) is adjusted over the groups by weighted Benjamini–Hochberg, each group weighing the
sum of its tests' weights; the rates with an adjusted value ≤ ``fdr`` are selected. Then the tests of the
selected rates: weighted Benjamini–Hochberg within each, at ``fdr × W_selected / W`` (the selected
groups' share of the weight; Benjamini & Bogomolov 2014). With one real change this is the flat
procedure exactly — the first rejection needs ``p ≤ fdr · w / Σw`` either way — but many rejections of one
rate (an outage drops a rate in every slice and window: ~27 tests) no longer lower the bar for the other
rates by as many steps: one more selected rate, not 27 more rejections. With no change the chance of any
alert in a night stays at most ``fdr``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ragspine_pipeline.scoring.drop_results import MIX_ALONE, DropTest
from ragspine_pipeline.scoring.drop_series import ALL_TRAFFIC, USUAL_MIX
from ragspine_pipeline.scoring.drop_settings import WORSE_WHEN, DropSettings
from ragspine_pipeline.scoring.mix import Mix
from ragspine_pipeline.scoring.random_effects import weighted_bh


def control(tests: list[DropTest], settings: DropSettings, mix: Mix | None = None) -> list[DropTest]:
    """The two-stage procedure over the tested ones (module docstring): q-values, significance,
    alerts, and the notes of all-traffic tests about the traffic ``mix``."""
    tested = [i for i, t in enumerate(tests) if t.tested]
    if not tested:
        return tests
    p = np.array([tests[i].p_value for i in tested])
    weights = np.array(_weights([tests[i] for i in tested], settings))
    q = two_stage_bh(p, weights, [tests[i].metric for i in tested], settings.fdr)
    out = list(tests)
    for i, q_value in zip(tested, q, strict=True):
        test = tests[i]
        significant = bool(q_value <= settings.fdr)
        big_enough = large_enough(settings, test)
        out[i] = replace(
            test,
            q_value=float(q_value),
            significant=significant,
            alert=significant and big_enough,
            reason=test.reason if big_enough or not significant else too_small(test, settings),
        )
    # The night's rejection threshold on p / weight (weights normalised to mean 1): would the
    # mix-adjusted twin of an alerting all-traffic test have been rejected at it?
    normalised = weights * len(weights) / weights.sum()
    rejected = [p_i / w_i for p_i, w_i, i in zip(p, normalised, tested, strict=True) if out[i].significant]
    threshold = max(rejected, default=0.0)
    twins = {(t.metric, t.nights): t for t in out if t.slice == USUAL_MIX and t.tested}
    for i, w_i in zip(tested, normalised, strict=True):
        test = out[i]
        if test.alert and test.slice == ALL_TRAFFIC:
            twin = twins.get((test.metric, test.nights))
            note = _mix_note(test, threshold * w_i, settings) if twin is None else _twin_note(test, twin, mix)
            out[i] = replace(test, note=note)
        elif test.alert and test.slice == USUAL_MIX and mix is not None:
            out[i] = replace(test, note=f"at the reference nights' traffic mix; tonight {mix.shift()}")
    return out


def two_stage_bh(p: np.ndarray, weights: np.ndarray, groups: Sequence[str], fdr: float) -> np.ndarray:
    """Adjusted p-values of the two-stage procedure (module docstring): a test is significant at ``fdr``
    when its value is at most ``fdr``. A test's value is the larger of its group's adjusted Simes value
    and its within-group adjusted value scaled by ``W / W_selected`` (its own group counted as selected
    when it is not: what it would have needed)."""
    p, weights = np.asarray(p, dtype=float), np.asarray(weights, dtype=float)
    names = sorted(set(groups))
    members = {g: np.array([i for i, name in enumerate(groups) if name == g]) for g in names}
    within = np.empty(len(p))
    simes, group_weight = [], []
    for g in names:
        rows = members[g]
        within[rows] = weighted_bh(p[rows], weights[rows])
        simes.append(float(np.min(within[rows])))
        group_weight.append(float(np.sum(weights[rows])))
    first = weighted_bh(np.array(simes), np.array(group_weight))
    total = float(np.sum(group_weight))
    selected = sum(w for w, q in zip(group_weight, first, strict=True) if q <= fdr)
    out = np.empty(len(p))
    for g, q_group, w_group in zip(names, first, group_weight, strict=True):
        rows = members[g]
        share = (selected if q_group <= fdr else selected + w_group) / total
        out[rows] = np.minimum(1.0, np.maximum(q_group, within[rows] / share))
    return out


def test_weight(slice_name: str, nights: int, settings: DropSettings) -> float:
    """A test's weight in the night's procedure (before normalising), by its slice and window: 1 for a
    slice; ``all_traffic_weight`` for all traffic (raw or at the usual mix), times
    ``all_traffic_tonight_weight`` for its one-night test; times ``sustained_weight`` for the sustained
    window."""
    weight = 1.0
    if slice_name in (ALL_TRAFFIC, USUAL_MIX):
        weight = settings.all_traffic_weight
        if nights == 1:
            weight *= settings.all_traffic_tonight_weight
    sustained = nights == settings.sustained_nights and nights > settings.recent_nights
    return weight * settings.sustained_weight if sustained else weight


def _weights(tests: list[DropTest], settings: DropSettings) -> list[float]:
    """Each test's weight; where a rate's all-traffic test has a twin at the usual mix (the mix moved),
    the two share the all-traffic test's weight, so the night's other tests keep theirs."""
    twinned = {(t.metric, t.nights) for t in tests if t.slice == USUAL_MIX}
    return [
        test_weight(t.slice, t.nights, settings)
        * (0.5 if t.slice in (ALL_TRAFFIC, USUAL_MIX) and (t.metric, t.nights) in twinned else 1.0)
        for t in tests
    ]


def _twin_note(test: DropTest, twin: DropTest, mix: Mix | None) -> str | None:
    """What an alerting all-traffic test says when the mix moved and its rate at the usual mix was tested
    in the night's family too: a drop at the usual mix is a drop behind a mix change; otherwise the mix
    explains it when it accounts for at least half of it."""
    shift = mix.shift() if mix is not None else "the traffic mix moved"
    if twin.alert:
        fell = f"{100 * twin.worse_by:.1f}"
        return f"traffic mix changed ({shift}) and the rate at the usual mix fell {fell} points"
    if twin.worse_by is None or test.worse_by - twin.worse_by < test.worse_by / 2:
        return None
    return f"{MIX_ALONE}{shift}"


def _mix_note(test: DropTest, level: float, settings: DropSettings) -> str | None:
    """ "traffic mix changed: …" when the all-traffic rate alerts but its mix-adjusted twin would not (at
    the p-value ``level`` the raw test was rejected at, and large enough) and the mix accounts for at
    least half of the drop (a mix that moved less than ``mix_shift``: its twin is not a test)."""
    adjusted = test.mix_adjusted
    if adjusted is None or adjusted.worse_by is None or adjusted.p_value is None:
        return None
    alerts = adjusted.p_value <= level and large_enough(
        settings,
        replace(test, current=adjusted.current, trailing=adjusted.trailing, worse_by=adjusted.worse_by),
    )
    if alerts or test.worse_by - adjusted.worse_by < test.worse_by / 2:
        return None
    return f"{MIX_ALONE}{adjusted.shift}"


def too_small(test: DropTest, settings: DropSettings) -> str:
    min_drop, relative = settings.thresholds(test.metric)
    reason = f"significant, but worse by less than min_drop {min_drop:g}"
    if relative is not None:
        reason += f" and its failure share grew by less than min_relative_change {relative:g} of itself"
    return reason


def large_enough(settings: DropSettings, test: DropTest) -> bool:
    """Is the change of ``test`` big enough to alert when significant: worse by at least the settings'
    ``min_drop``, or its failure share grew (``worse_by > 0``) by at least ``min_relative_change`` of the
    trailing failure share (``scoring.significance``)?"""
    if test.worse_by is None or test.trailing is None:
        return False
    min_drop, relative = settings.thresholds(test.metric)
    if test.worse_by >= min_drop:
        return True
    failure_share = test.trailing if WORSE_WHEN[test.metric] == "higher" else 1.0 - test.trailing
    return relative is not None and test.worse_by > 0 and test.worse_by >= relative * failure_share

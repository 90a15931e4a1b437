"""The paired baseline test: exact McNemar on the cases that flipped, a margin, ratchet only on a
significant improvement."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from ragspine_pipeline.decision.paired import PairedSettings, paired_test

BASE = {f"q{i:03d}": i % 4 != 0 for i in range(200)}  # 150 of 200 pass


def flipped(outcomes: dict, to_fail: int = 0, to_pass: int = 0) -> dict:
    out = dict(outcomes)
    passing = [q for q, ok in outcomes.items() if ok][:to_fail]
    failing = [q for q, ok in outcomes.items() if not ok][:to_pass]
    out.update({q: False for q in passing})
    out.update({q: True for q in failing})
    return out


def test_a_real_drop_blocks_and_its_p_value_is_the_exact_one_sided_mcnemar():
    result = paired_test(BASE, flipped(BASE, to_fail=25, to_pass=5))
    assert (len(result.regressed), len(result.improved), result.n) == (25, 5, 200)
    assert result.p_worse == pytest.approx(binomtest(25, 30, 0.5, alternative="greater").pvalue)
    assert result.blocks and not result.improves and result.drop == pytest.approx(0.10)
    assert "25 of 200 cases regressed, 5 improved" in result.summary()


def test_noise_flips_in_both_directions_do_not_block():
    result = paired_test(BASE, flipped(BASE, to_fail=6, to_pass=4))
    assert not result.blocks and not result.improves


def test_a_significant_but_immaterial_drop_does_not_block():
    result = paired_test(BASE, flipped(BASE, to_fail=3), PairedSettings(alpha=0.2, margin=0.02))
    assert result.p_worse < 0.2 and result.drop == pytest.approx(0.015) and not result.blocks


def test_only_a_clearly_significant_improvement_ratchets():
    assert paired_test(BASE, flipped(BASE, to_pass=12)).improves  # p = 0.5**12
    six = paired_test(BASE, flipped(BASE, to_pass=6))
    assert six.p_better < 0.05 and not six.improves  # significant at alpha, not at ratchet_alpha
    assert paired_test(BASE, flipped(BASE, to_pass=6), PairedSettings(ratchet_alpha=0.05)).improves


def test_cases_in_only_one_run_are_counted_not_compared():
    current = {**{q: ok for q, ok in BASE.items() if q != "q000"}, "new": False}
    result = paired_test(BASE, current)
    assert (result.n, result.only_in_baseline, result.only_in_run) == (199, 1, 1)
    assert paired_test({}, {}).p_worse == 1.0 and not paired_test({}, {}).blocks


def test_settings_refuse_booleans_and_out_of_range_values():
    with pytest.raises(ValueError):
        PairedSettings(alpha=True)
    with pytest.raises(ValueError):
        PairedSettings(margin=1.5)

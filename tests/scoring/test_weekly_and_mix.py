"""The drop test under a moving traffic mix: a weekly pattern is compared day type to day type, and an
all-traffic drop that the mix alone explains says so (the mix-adjusted rate beside the raw one)."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest

from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.mix import Mix, standardised, strata, trace_mix
from ragspine_pipeline.scoring.significance import ALL_TRAFFIC, USUAL_MIX, drop_tests

FIRST = date(2026, 1, 5)  # a Monday
METRIC = "production_compliance"
RATES = {"a": 0.95, "b": 0.80}  # slice b is worse


def night(rng: np.random.Generator, day: date, share_b: float, total: int = 1000, rates=RATES) -> dict:
    """One night's summary: ``total`` traces, ``share_b`` of them in slice b, the rest in a."""
    slices, x_all = {}, 0
    n_b = int(rng.binomial(total, share_b))
    for value, n in (("a", total - n_b), ("b", n_b)):
        x = int(rng.binomial(n, rates[value]))
        x_all += x
        slices[value] = {"n": n, "metrics": {METRIC: {"value": x / n, "n": n, "successes": x}}}
    return {
        "day": day.isoformat(),
        "n": total,
        "metrics": {METRIC: {"value": x_all / total, "n": total, "successes": x_all}},
        "slices": {"workflow": slices},
    }


def weekly_history(seed: int, nights: int) -> list[dict]:
    """Slice b carries 10 % of weekday traffic and 40 % of weekend traffic: the all-traffic rate is about
    4.5 points lower every weekend although no slice changes."""
    rng = np.random.default_rng(seed)
    days = [FIRST + timedelta(days=i) for i in range(nights)]
    return [night(rng, d, 0.40 if d.weekday() >= 5 else 0.10) for d in days]


def z_by_day_type(days: list[dict], settings: DropSettings) -> dict[str, np.ndarray]:
    """The all-traffic one-night test's z of every judged night, by day type."""
    z: dict[str, list[float]] = {"weekend": [], "weekday": []}
    for i in range(31, len(days)):
        tests = drop_tests(days[i], days[:i], settings)
        test = next(t for t in tests.tests if t.slice == ALL_TRAFFIC and t.nights == 1)
        z["weekend" if date.fromisoformat(days[i]["day"]).weekday() >= 5 else "weekday"].append(test.z)
    return {kind: np.array(values) for kind, values in z.items()}


def test_with_a_weekly_mix_pattern_weekends_are_compared_with_weekends():
    days = weekly_history(11, 31 + 84)  # twelve judged weeks: 24 weekend and 60 weekday nights
    blind = z_by_day_type(days, DropSettings(weekly="off"))
    aware = z_by_day_type(days, DropSettings())
    # Against one level for every night, each weekend looks like a drop and each weekday like a gain
    # (measured: mean z 1.44 and -0.56; the pattern also inflates the between-day variance).
    assert blind["weekend"].mean() > 1.0 and blind["weekday"].mean() < -0.3
    # Day type to day type, both are centred and spread like a standard normal (measured: 0.12 ± 0.88,
    # 0.02 ± 0.89).
    for z in aware.values():
        assert abs(z.mean()) < 0.4 and 0.6 < z.std() < 1.3
    last = max(i for i in range(len(days)) if i % 7 == 5)  # the last Saturday (the first day is a Monday)
    assert date.fromisoformat(days[last]["day"]).weekday() == 5
    tests = drop_tests(days[last], days[:last])
    test = next(t for t in tests.tests if t.slice == ALL_TRAFFIC and t.nights == 1)
    assert test.by_day_type and test.tested
    assert abs(test.trailing - 0.89) < 0.01  # the weekend level, not the weekly mean (≈ 0.93)


def test_a_real_drop_on_a_weekend_is_still_caught_against_the_weekend_level():
    rng = np.random.default_rng(5)
    days = weekly_history(12, 6 * 7 + 6)  # six weeks and a Saturday
    saturday = FIRST + timedelta(days=6 * 7 + 5)
    assert saturday.weekday() == 5
    worse = night(rng, saturday, 0.40, rates={"a": 0.90, "b": 0.75})  # 5 points worse everywhere
    tests = drop_tests(worse, days[:-1])
    alerted = {t.key for t in tests.alerts}
    assert f"{METRIC}@{ALL_TRAFFIC}" in alerted
    raw = next(t for t in tests.alerts if t.slice == ALL_TRAFFIC)
    # The weekend's mix differs from the reference nights' by more than mix_shift: the rate at the usual
    # mix is a test of the night too, it dropped as well, and the note says both (a drop, not only a mix
    # change).
    assert raw.note.startswith("traffic mix changed (workflow=b grew from ")
    assert raw.note.endswith("and the rate at the usual mix fell 4.8 points")
    assert f"{METRIC}@{USUAL_MIX}" in alerted


def test_a_history_without_a_weekly_pattern_keeps_one_reference_for_every_night():
    rng = np.random.default_rng(3)
    days = [night(rng, FIRST + timedelta(days=i), 0.10) for i in range(31 + 42)]
    tested = [t for i in range(31, len(days)) for t in drop_tests(days[i], days[:i]).tested]
    assert len(tested) >= 5 * 42  # all traffic and two slices (b has about min_n), both windows
    assert sum(t.by_day_type for t in tested) <= 0.03 * len(tested)


def test_an_all_traffic_drop_from_a_new_mix_alone_says_the_traffic_mix_changed():
    rng = np.random.default_rng(8)
    days = [night(rng, FIRST + timedelta(days=i), 0.10) for i in range(30)]
    tonight = night(rng, FIRST + timedelta(days=30), 0.45)  # slice b grows; no slice got worse
    tests = drop_tests(tonight, days)
    raw = next(t for t in tests.alerts if t.slice == ALL_TRAFFIC)
    assert raw.worse_by > 0.03
    assert raw.mix_adjusted.dimension == "workflow"
    assert abs(raw.mix_adjusted.worse_by) < 0.015  # at the reference mix nothing changed
    assert raw.note.startswith("traffic mix changed: workflow=b grew from 10.")
    tonight_share = tonight["slices"]["workflow"]["b"]["n"] / tonight["n"]
    assert raw.note.endswith(f"to {100 * tonight_share:.1f} %")
    assert not any(t.slice != ALL_TRAFFIC for t in tests.alerts)  # and no slice alerts
    assert raw.to_dict()["mix_adjusted"]["shift"] == raw.note.removeprefix("traffic mix changed: ")


def test_a_new_slice_with_a_worse_rate_is_named_as_the_mix_change():
    rng = np.random.default_rng(9)
    days = [night(rng, FIRST + timedelta(days=i), 0.10) for i in range(30)]
    tonight = night(rng, FIRST + timedelta(days=30), 0.10)
    x, n = 150, 300  # a new workflow at 50 %, 300 of 1,300 traces
    tonight["slices"]["workflow"]["c"] = {"n": n, "metrics": {METRIC: {"value": 0.5, "n": n, "successes": x}}}
    whole = tonight["metrics"][METRIC]
    tonight["n"] += n
    tonight["metrics"][METRIC] = {
        "value": (whole["successes"] + x) / (whole["n"] + n),
        "n": whole["n"] + n,
        "successes": whole["successes"] + x,
    }
    raw = next(t for t in drop_tests(tonight, days).alerts if t.slice == ALL_TRAFFIC)
    assert raw.note == f"traffic mix changed: workflow=c grew from 0.0 % to {100 * n / 1300:.1f} %"


def test_direct_standardisation_weighs_each_slice_by_its_reference_share():
    by_day = {
        "ref": {"a": (90.0, 100.0, 100), "b": (30.0, 100.0, 100)},  # shares 50 / 50
        "now": {"a": (180.0, 200.0, 200), "b": (14.0, 20.0, 20)},  # a: 0.9, b: 0.7 at another mix
    }
    out = standardised(by_day, ["ref"])
    x, n_eff, n = out["now"]
    assert x / n_eff == pytest.approx(0.5 * 0.9 + 0.5 * 0.7)
    pa, pb = 180.5 / 201, 14.5 / 21  # the smoothed rates of the variance
    variance = 0.25 * pa * (1 - pa) / 200 + 0.25 * pb * (1 - pb) / 20
    smooth = 0.5 * pa + 0.5 * pb
    assert n_eff == pytest.approx(smooth * (1 - smooth) / variance)
    assert n == 220
    assert out["ref"][0] / out["ref"][1] == pytest.approx(0.6)


def test_untagged_traffic_is_its_own_stratum_and_the_largest_move_is_named():
    summary = {
        "n": 100,
        "metrics": {METRIC: {"value": 0.8, "n": 100, "successes": 80}},
        "slices": {
            "workflow": {"a": {"n": 60, "metrics": {METRIC: {"value": 0.9, "n": 60, "successes": 54}}}}
        },
    }
    counts = strata(summary, "workflow", METRIC, lambda e: (e["successes"], e["n"], e["n"]) if e else None)
    assert counts == {"a": (54, 60, 60), "untagged": (26, 40, 40)}
    later = {**summary, "n": 200}  # 140 untagged now
    mix = trace_mix(later, [summary])
    assert mix.dimension == "workflow" and mix.moved == pytest.approx(0.3)
    assert mix.shift() == "workflow untagged grew from 40.0 % to 70.0 %"
    assert Mix("d", {"x": 0.5, "y": 0.5}, {"x": 0.2, "y": 0.8}).shift() == "d=y grew from 50.0 % to 80.0 %"


def test_weekend_days_are_checked():
    with pytest.raises(ValueError):
        DropSettings(weekend=("caturday",))
    assert DropSettings(weekend=("friday", "saturday")).weekend == ("friday", "saturday")


def test_a_lighter_sustained_weight_gives_the_one_night_tests_more_of_the_budget():
    rng = np.random.default_rng(8)
    days = [night(rng, FIRST + timedelta(days=i), 0.10) for i in range(40)]
    tonight = night(rng, FIRST + timedelta(days=40), 0.10, rates={"a": 0.93, "b": 0.78})

    def one_night_q(settings: DropSettings) -> float:
        tests = drop_tests(tonight, days, settings).tests
        return next(t for t in tests if t.slice == ALL_TRAFFIC and t.nights == 1).q_value

    # With the all-traffic one-night test at the weight of the other all-traffic tests:
    even = {"all_traffic_tonight_weight": 1.0}
    assert one_night_q(DropSettings(**even, sustained_weight=0.25)) < one_night_q(DropSettings(**even))
    # … and the default, three times their weight, gives it more of the budget than that.
    assert one_night_q(DropSettings()) < one_night_q(DropSettings(**even))
    with pytest.raises(ValueError):
        DropSettings(all_traffic_tonight_weight=0)
    with pytest.raises(ValueError):
        DropSettings(sustained_weight=0)


# -- a drop behind a mix change is still a drop ------------------------------------------------------


def three_slices(
    rng: np.random.Generator, day: date, shares: dict[str, float], rates: dict[str, float]
) -> dict:
    """One night of 3,000 traces over the slices of ``shares`` (a slice absent from it has no traffic)."""
    slices, x_all, n_all = {}, 0, 0
    for value, share in shares.items():
        n = round(3000 * share)
        if n == 0:
            continue
        x = int(rng.binomial(n, rates[value]))
        x_all, n_all = x_all + x, n_all + n
        slices[value] = {"n": n, "metrics": {METRIC: {"value": x / n, "n": n, "successes": x}}}
    return {
        "day": day.isoformat(),
        "n": n_all,
        "metrics": {METRIC: {"value": x_all / n_all, "n": n_all, "successes": x_all}},
        "slices": {"workflow": slices},
    }


def shifted(seed: int, before: dict, after: dict, rates_after: dict, rates=None) -> tuple[dict, list[dict]]:
    """Thirty usual nights at the mix ``before``, then tonight at the mix ``after`` with ``rates_after``."""
    rates = rates or {"a": 0.95, "b": 0.95, "c": 0.80}
    rng = np.random.default_rng(seed)
    days = [three_slices(rng, FIRST + timedelta(days=i), before, rates) for i in range(30)]
    return three_slices(rng, FIRST + timedelta(days=30), after, rates_after), days


def test_a_real_drop_while_a_worse_slice_grows_is_reported_as_a_drop_not_only_as_a_mix_change():
    worse = {"a": 0.92, "b": 0.92, "c": 0.77}  # every slice 3 points down
    tonight, days = shifted(21, {"a": 0.45, "b": 0.45, "c": 0.10}, {"a": 0.32, "b": 0.32, "c": 0.36}, worse)
    tests = drop_tests(tonight, days)
    raw = next(t for t in tests.alerts if t.slice == ALL_TRAFFIC)
    assert raw.note.startswith("traffic mix changed (workflow=c grew from 10.0 % to 36.0 %) and the rate at")
    usual = next(t for t in tests.alerts if t.slice == USUAL_MIX)
    assert 0.02 < usual.worse_by < 0.045  # at the usual mix: the 3 points every slice lost


def test_a_drop_hidden_by_a_shrinking_worse_slice_alerts_at_the_usual_mix():
    worse = {"a": 0.91, "b": 0.91, "c": 0.76}  # every slice 4 points down …
    before, after = {"a": 0.30, "b": 0.30, "c": 0.40}, {"a": 0.45, "b": 0.45, "c": 0.10}  # … c shrinks
    tonight, days = shifted(22, before, after, worse)
    tests = drop_tests(tonight, days)
    raw = next(t for t in tests.tests if t.slice == ALL_TRAFFIC and t.nights == 1)
    assert raw.worse_by < 0.01 and not raw.alert  # the raw rate hides it
    usual = next(t for t in tests.alerts if t.slice == USUAL_MIX)
    assert usual.worse_by > 0.03 and usual.note.startswith("at the reference nights' traffic mix")


def test_a_slice_that_disappears_is_a_mix_change():
    rates = {"a": 0.90, "b": 0.90, "c": 0.99}  # c, a quarter of the traffic, is the good one
    tonight, days = shifted(23, {"a": 0.375, "b": 0.375, "c": 0.25}, {"a": 0.5, "b": 0.5}, rates, rates)
    tests = drop_tests(tonight, days)
    raw = next(t for t in tests.alerts if t.slice == ALL_TRAFFIC)
    assert raw.note == "traffic mix changed: workflow=c fell from 25.0 % to 0.0 %"
    assert not any(t.slice == USUAL_MIX for t in tests.alerts)  # at the usual mix nothing changed

"""Nightly drop tests: the night's false-alarm rate and the power by seeded simulation of daily summaries,
the pieces of the model on worked examples, and the rules of which rates are tested at all.

The whole nightly path (traces → sample → scoring → tests → outbox) is simulated by
bench/bench_drift_alarms.py; here the daily summaries are drawn directly, which is fast enough to pin the
error rates in the suite."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.night_family import large_enough
from ragspine_pipeline.scoring.random_effects import between_day_variance, variance_stabilised, weighted_bh
from ragspine_pipeline.scoring.significance import ALL_TRAFFIC, drop_tests

FIRST = date(2026, 1, 1)
# (metric, rate, share of traces it is measured on): the production rates at typical levels.
RATES = (
    ("production_compliance", 0.95, 1.0),
    ("retrieved_citation_rate", 0.90, 0.93),
    ("production_admissible_rate", 0.97, 1.0),
    ("lexical_faithfulness", 0.85, 1.8),
    ("refusal_rate", 0.07, 1.0),
)
SLICES = 8
WARMUP = 31  # nights of history before the first night that is judged


def simulate(
    rng: np.random.Generator,
    nights: int,
    per_slice: int,
    jitter: float = 0.0,
    drop: tuple[str, int, int | None, float] | None = None,
) -> list[dict]:
    """Daily summaries of ``SLICES`` equal slices of ``per_slice`` traces; each rate's log-odds jitters
    from day to day by N(0, jitter²) in each slice. ``drop``: (metric, first night, slice or None for
    all traffic, points) makes the metric worse by that much from that night on."""
    days = []
    for night in range(nights):
        slices, totals = {}, {}
        for s in range(SLICES):
            metrics = {}
            for metric, rate, share in RATES:
                logit = np.log(rate / (1 - rate)) + rng.normal(0, jitter)
                p = 1 / (1 + np.exp(-logit))
                if drop and drop[0] == metric and night >= drop[1] and drop[2] in (None, s):
                    p = p + drop[3] if metric == "refusal_rate" else p - drop[3]
                n = int(rng.poisson(per_slice * share))
                x = int(rng.binomial(n, p))
                metrics[metric] = {"value": x / n, "n": n, "successes": x}
                total = totals.setdefault(metric, [0, 0])
                total[0] += x
                total[1] += n
            slices[f"s{s}"] = {"n": per_slice, "metrics": metrics}
        days.append(
            {
                "day": (FIRST + timedelta(days=night)).isoformat(),
                "metrics": {m: {"value": x / n, "n": n, "successes": x} for m, (x, n) in totals.items()},
                "slices": {"slice": slices},
            }
        )
    return days


# -- the error rates -------------------------------------------------------------------------------


@pytest.mark.system  # a statistical simulation of 30 nights (~20 s)
def test_with_no_change_at_most_one_night_in_thirty_alerts_although_each_night_runs_dozens_of_tests():
    days = simulate(np.random.default_rng(20261123), WARMUP + 300, per_slice=125, jitter=0.1)
    nights = [drop_tests(day, days[:i]) for i, day in enumerate(days) if i >= WARMUP]
    assert min(len(night.tested) for night in nights) >= 80  # metrics × slices × one- and three-night windows
    alarms = [night.day for night in nights if night.alerts]
    assert len(alarms) <= 10, alarms  # ≤ 1 in 30 (measured on this seed: see the assertion message)
    # Without the night's multiple-comparison control the same tests would alarm on most nights.
    settings = DropSettings()
    unadjusted = sum(
        any(t.p_value <= settings.fdr and large_enough(settings, t) for t in n.tested) for n in nights
    )
    assert unadjusted >= 150, unadjusted


def test_a_five_point_drop_of_a_ninety_percent_rate_in_all_traffic_alerts_the_same_night():
    rng = np.random.default_rng(7)
    detected = 0
    for _ in range(40):
        days = simulate(rng, WARMUP + 1, per_slice=125, drop=("retrieved_citation_rate", WARMUP, None, 0.05))
        alerts = drop_tests(days[-1], days[:-1]).alerts
        detected += any(t.metric == "retrieved_citation_rate" and t.slice == ALL_TRAFFIC for t in alerts)
    assert detected >= 32, detected  # ≥ 0.8


@pytest.mark.system  # a statistical simulation (~6 s)
def test_a_ten_point_drop_in_one_small_slice_alerts_within_three_nights():
    rng = np.random.default_rng(11)
    detected = 0
    for _ in range(40):
        days = simulate(rng, WARMUP + 3, per_slice=125, drop=("retrieved_citation_rate", WARMUP, 3, 0.10))
        detected += any(
            any(t.slice == "slice=s3" for t in drop_tests(days[i], days[:i]).alerts)
            for i in (WARMUP, WARMUP + 1, WARMUP + 2)
        )
    assert detected >= 32, detected


# -- one bad night -------------------------------------------------------------------------------


def with_bad_night(days: list[dict], night: int, metric: str, factor: float) -> list[dict]:
    """``days`` with ``metric`` at ``factor`` times its rate on one night, in all traffic and every slice."""

    def scaled(entry: dict) -> dict:
        x = round(entry["successes"] * factor)
        return {**entry, "successes": x, "value": x / entry["n"]}

    bad = dict(days[night])
    bad["metrics"] = {**bad["metrics"], metric: scaled(bad["metrics"][metric])}
    bad["slices"] = {
        "slice": {
            name: {**entry, "metrics": {**entry["metrics"], metric: scaled(entry["metrics"][metric])}}
            for name, entry in bad["slices"]["slice"].items()
        }
    }
    return [*days[:night], bad, *days[night + 1 :]]


def all_traffic_test(days: list[dict]):
    night = drop_tests(days[-1], days[:-1])
    [test] = [
        t
        for t in night.tests
        if t.metric == "retrieved_citation_rate" and t.slice == ALL_TRAFFIC and t.nights == 1
    ]
    return night, test


@pytest.mark.parametrize("factor", [0.5, 0.9])  # an outage at half the rate; a 9-point dip
def test_a_drop_a_week_after_one_bad_night_is_caught_the_same_night(factor):
    drop = ("retrieved_citation_rate", WARMUP, None, 0.05)
    days = simulate(np.random.default_rng(20), WARMUP + 1, per_slice=125, jitter=0.1, drop=drop)
    night, test = all_traffic_test(with_bad_night(days, WARMUP - 7, "retrieved_citation_rate", factor))
    assert test.set_aside == 1 and test.trailing_days == 13  # the bad night is left out of the level
    _, clean = all_traffic_test(days)
    assert test.z > 4 and test.z == pytest.approx(clean.z, abs=0.5)  # as if the night had not happened
    assert any(t.key == "retrieved_citation_rate@all traffic" for t in night.alerts)


def test_the_same_history_without_the_drop_does_not_alarm():
    days = simulate(np.random.default_rng(20), WARMUP + 1, per_slice=125, jitter=0.1)
    night, test = all_traffic_test(with_bad_night(days, WARMUP - 7, "retrieved_citation_rate", 0.5))
    assert night.alerts == [] and abs(test.z) < 2.5 and test.set_aside == 1


def test_the_nights_after_an_outage_do_not_alert_for_it_again():
    # The outage night alerts on its own night; the multi-night windows that still hold it afterwards
    # leave it out (it is an aberrant night of theirs), so one outage is one alert, not a week of them.
    days = simulate(np.random.default_rng(21), WARMUP + 7, per_slice=125, jitter=0.1)
    days = with_bad_night(days, WARMUP, "retrieved_citation_rate", 0.5)
    outage = drop_tests(days[WARMUP], days[:WARMUP])
    assert "retrieved_citation_rate@all traffic" in {t.key for t in outage.alerts}
    for i in range(WARMUP + 1, WARMUP + 7):
        night = drop_tests(days[i], days[:i])
        pooled = [t for t in night.tests if t.metric == "retrieved_citation_rate" and t.nights > 1]
        assert not night.alerts, (i, night.alerts)
        holding = [t for t in pooled if i - WARMUP < t.nights]  # windows that reach back to the outage
        assert holding and all(t.pooled_nights == t.nights - 1 for t in holding)


def dersimonian_laird(y: np.ndarray, v: np.ndarray) -> float:
    """The textbook estimator, pooled over the rows: what the screened one must equal on clean data."""
    w = 1 / v
    mean = (w * y).sum(axis=1, keepdims=True) / w.sum(axis=1, keepdims=True)
    q = (w * (y - mean) ** 2).sum()
    c = (w.sum(axis=1) - (w * w).sum(axis=1) / w.sum(axis=1)).sum()
    return max(0.0, (q - y.shape[0] * (y.shape[1] - 1)) / c)


def test_on_clean_windows_the_screened_variance_is_dersimonian_lairds():
    rng = np.random.default_rng(23)
    same = 0
    for tau in np.repeat([0.0, 0.01, 0.03], 100):  # 8 slices × 28 nights of ~120, day-to-day σ = tau
        n = rng.poisson(120, (8, 28)).astype(float)
        v = 1 / (4 * n + 2)
        y = 1.2 + rng.normal(0, tau, (8, 1 if tau == 0 else 28)) + rng.normal(0, np.sqrt(v))
        tau2, kept = between_day_variance(y, v)
        same += kept.all() and tau2 == pytest.approx(dersimonian_laird(y, v))
    assert same >= 0.97 * 300, same  # a normal night passes 4 standard deviations 99.99 % of the time


def test_one_or_two_aberrant_nights_are_set_aside_and_leave_the_variance_as_it_was():
    rng = np.random.default_rng(29)
    n = np.full((1, 28), 930.0)
    v = 1 / (4 * n + 2)
    y = 1.25 + rng.normal(0, np.sqrt(v))
    clean = dersimonian_laird(y, v)
    for bad in ([20], [3, 20]):  # two outages must not mask each other
        dirty = y.copy()
        dirty[0, bad] -= 0.5  # half of a 90 % rate, on the arcsine scale
        tau2, kept = between_day_variance(dirty, v)
        assert dersimonian_laird(dirty, v) > 100 * max(clean, 1e-5)  # what the unscreened estimate does
        assert list(np.flatnonzero(~kept[0])) == bad and tau2 == pytest.approx(
            dersimonian_laird(np.delete(y, bad, axis=1), np.delete(v, bad, axis=1))
        )


def test_the_screen_keeps_every_night_of_short_series_and_handles_missing_nights():
    y = np.array([[1.0, np.nan, 1.1], [1.2, np.nan, np.nan]])
    v = np.full((2, 3), 0.01)
    tau2, kept = between_day_variance(y, v)
    assert tau2 == 0.0 and kept.tolist() == [[True, False, True], [True, False, False]]


# -- the pieces ------------------------------------------------------------------------------------


def test_weighted_bh_with_equal_weights_is_benjamini_hochberg():
    p = np.random.default_rng(3).uniform(0, 0.2, 50) ** 2
    assert np.allclose(weighted_bh(p, np.ones(50)), false_discovery_control(p, method="bh"))


def test_a_heavier_weight_lowers_a_tests_adjusted_p_value():
    p = np.array([0.001, 0.002, 0.5, 0.6])
    even = weighted_bh(p, np.ones(4))
    heavy = weighted_bh(p, np.array([4.0, 1, 1, 1]))
    assert heavy[0] < even[0] and heavy[1] >= even[1]


def test_the_between_day_variance_is_recovered_from_jittered_days():
    rng = np.random.default_rng(5)
    days = simulate(rng, 200, per_slice=2000, jitter=0.3)
    night = drop_tests(days[-1], days[:-1], DropSettings(window=100, variance_window=199, min_days=5))
    tau2 = {t.slice: t.tau2 for t in night.tests if t.metric == "production_compliance" and t.nights == 1}
    # A log-odds jitter σ is σ·sqrt(p(1 − p))/2 on the arcsine scale (delta method): 0.0327² at p = 0.95,
    # estimated from the eight slices pooled.
    assert 0.0007 <= tau2["slice=s0"] <= 0.0015
    # All traffic averages eight independent jitters: a much smaller variance of its own.
    assert tau2[ALL_TRAFFIC] < 0.0004


def test_the_variance_stabilised_scale_is_finite_at_zero_and_all_and_does_not_depend_on_the_rate():
    y, v = variance_stabilised(np.array([0, 5, 10]), np.array([10, 10, 10]))
    assert np.all(np.isfinite(y)) and y[0] + y[2] == pytest.approx(np.pi / 2) and np.all(v == 1 / 42)


def test_a_rare_failure_becoming_less_rare_is_not_overstated():
    # 12 failures of 125 where 3 % fail: the exact binomial tail is 4.1e-4; the test must not claim more.
    history = [summary(TODAY - timedelta(days=d), (1940, 2000)) for d in range(1, 29)]
    today = summary(TODAY, (113, 125))
    [test] = [t for t in drop_tests(today, history, DropSettings(min_n=100)).tests if t.nights == 1]
    assert 4.1e-4 <= test.p_value <= 2e-3


# -- which rates are tested, and how ---------------------------------------------------------------


def summary(day: date, compliance: tuple[int, int], slice_compliance: tuple[int, int] | None = None) -> dict:
    def rate(x: int, n: int) -> dict:
        return {"value": x / n, "n": n, "successes": x}

    out = {"day": day.isoformat(), "metrics": {"production_compliance": rate(*compliance)}, "slices": {}}
    if slice_compliance:
        out["slices"] = {"channel": {"api": {"metrics": {"production_compliance": rate(*slice_compliance)}}}}
    return out


TODAY = date(2026, 11, 20)
HISTORY = [summary(TODAY - timedelta(days=d), (1800 + d % 3, 2000), (360, 400)) for d in range(1, 29)]


def test_a_significant_drop_alerts_for_its_slice_only_with_every_figure_a_reader_needs():
    night = drop_tests(summary(TODAY, (1790, 2000), (320, 400)), HISTORY)  # api from 90 % to 80 %
    [alert] = night.alerts
    assert (alert.metric, alert.slice, alert.nights) == ("production_compliance", "channel=api", 1)
    assert alert.current == 0.8 and alert.current_n == 400
    assert alert.trailing == 0.9 and alert.trailing_n == 14 * 400 and alert.trailing_days == 14
    assert alert.worse_by == pytest.approx(0.1) and alert.p_value < 1e-6 and alert.q_value < 1e-5
    shown = night.to_dict()
    # both rates (all traffic and the slice), the three windows (1, 3 and 7 nights): every test is listed
    assert shown["tested"] == len(shown["tests"]) == 6
    assert all(t["p_value"] is not None and t["z"] is not None for t in shown["tests"])


def test_a_rate_where_higher_is_worse_alerts_when_it_rises():
    def refusals(day: date, x: int) -> dict:
        return {
            "day": day.isoformat(),
            "metrics": {"refusal_rate": {"value": x / 1000, "n": 1000, "successes": x}},
        }

    history = [refusals(TODAY - timedelta(days=d), 70 + d % 5) for d in range(1, 29)]
    [alert] = drop_tests(refusals(TODAY, 130), history).alerts
    assert (
        alert.metric == "refusal_rate"
        and alert.current == 0.13
        and alert.worse_by == pytest.approx(0.13 - 1010 / 14_000)
    )
    assert drop_tests(refusals(TODAY, 30), history).alerts == []  # fewer refusals are not a drop


def test_a_significant_change_smaller_than_min_drop_does_not_alert():
    history = [summary(TODAY - timedelta(days=d), (900_000, 1_000_000)) for d in range(1, 29)]
    night = drop_tests(summary(TODAY, (890_000, 1_000_000)), history, DropSettings(min_drop=0.02))
    [one_night] = [t for t in night.tests if t.nights == 1]
    assert one_night.significant and not one_night.alert and "min_drop" in one_night.reason
    assert drop_tests(summary(TODAY, (890_000, 1_000_000)), history, DropSettings(min_drop=0.005)).alerts


def refusals(day: date, x: int, n: int = 1000) -> dict:
    return {"day": day.isoformat(), "metrics": {"refusal_rate": {"value": x / n, "n": n, "successes": x}}}


# Refusals (higher is worse: the failure share is the rate itself) at 2 % for four weeks, then 3.9 %:
# nearly doubled, significant, and worse by 1.9 points, less than the default min_drop of two.
RARE_HISTORY = [refusals(TODAY - timedelta(days=d), 19 + d % 3) for d in range(1, 29)]
RARE_TONIGHT = refusals(TODAY, 39)


def one_night(settings: DropSettings):
    [test] = [t for t in drop_tests(RARE_TONIGHT, RARE_HISTORY, settings).tests if t.nights == 1]
    return test


def test_a_significant_doubling_of_a_rare_failure_alerts_by_its_relative_growth():
    absolute_only = one_night(DropSettings(min_relative_change=None))
    assert absolute_only.significant and absolute_only.worse_by == pytest.approx(0.019, abs=0.001)
    assert not absolute_only.alert
    assert absolute_only.reason == "significant, but worse by less than min_drop 0.02"
    relative = one_night(DropSettings(min_relative_change=0.5))  # grew by ~95 % of itself
    assert relative.alert and relative.q_value == absolute_only.q_value  # the threshold only filters
    too_high = one_night(DropSettings(min_relative_change=1.0))
    assert not too_high.alert and too_high.reason == (
        "significant, but worse by less than min_drop 0.02 and its failure share grew by less than "
        "min_relative_change 1 of itself"
    )
    # For a rate where lower is worse the failure share is 1 − rate: 90 % → 89 % is 10 % → 11 %.
    history = [summary(TODAY - timedelta(days=d), (900_000, 1_000_000)) for d in range(1, 29)]
    night = drop_tests(summary(TODAY, (890_000, 1_000_000)), history, DropSettings(min_relative_change=0.05))
    assert [(t.metric, t.nights) for t in night.alerts] == [("production_compliance", 1)]
    assert not drop_tests(summary(TODAY, (890_000, 1_000_000)), history).alerts  # 10 % of 10 % < 0.5


def test_a_rate_of_its_own_overrides_the_default_effect_thresholds():
    off = {"refusal_rate": {"min_relative_change": None}}
    assert not one_night(DropSettings(effect=off)).alert  # the default 0.5 would alert
    assert one_night(DropSettings(effect={"production_compliance": {"min_drop": 0.5}})).alert  # another rate
    lower = DropSettings(min_relative_change=None, effect={"refusal_rate": {"min_drop": 0.01}})
    assert lower.thresholds("refusal_rate") == (0.01, None) and one_night(lower).alert
    assert lower.thresholds("lexical_faithfulness") == (0.02, None)
    partial = DropSettings.model_validate({"effect": {"refusal_rate": {"min_drop": 0.01}}})
    assert partial.thresholds("refusal_rate") == (0.01, 0.5)  # the key left out keeps the default
    assert DropSettings.model_validate_json(partial.model_dump_json()) == partial


@pytest.mark.parametrize(
    ("production", "message"),
    [
        ("effect: {refusal: {min_drop: 0.01}}", "field 'production.effect': Value error, unknown production "
         "rate 'refusal'; the rates tested nightly: refusal_rate, "),
        ("effect: {refusal_rate: {}}", "give min_drop or min_relative_change (or both)"),
        ("effect: {refusal_rate: {min_drop: null}}", "min_drop must be a number"),
        ("effect: {refusal_rate: {min_ratio: 0.5}}", "field 'production.effect.refusal_rate.min_ratio'"),
        ("min_relative_change: -0.5", "field 'production.min_relative_change': Input should be greater"),
        ('min_relative_change: "0.5"', "field 'production.min_relative_change'"),
        ("min_relative_change: .inf", "field 'production.min_relative_change'"),
    ],
)  # fmt: skip
def test_effect_thresholds_in_the_gates_config_are_checked_in_one_line(tmp_path, production, message):
    from ragspine_pipeline.decision.config import load_config
    from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
    from ragspine_pipeline.errors import InputError

    path = tmp_path / "gates.yaml"
    path.write_text(f"production:\n  {production}\n")
    with pytest.raises(InputError) as error:
        load_config(path, KNOWN_METRICS)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_effect_thresholds_are_read_from_the_gates_config(tmp_path):
    from ragspine_pipeline.decision.config import load_config
    from ragspine_pipeline.decision.evaluation import KNOWN_METRICS

    path = tmp_path / "gates.yaml"
    path.write_text(
        "production:\n  min_relative_change: null\n  effect:\n"
        "    refusal_rate: {min_drop: 0.01, min_relative_change: 0.25}\n"
    )
    settings = load_config(path, KNOWN_METRICS).production
    assert settings.thresholds("refusal_rate") == (0.01, 0.25)
    assert settings.thresholds("retrieved_citation_rate") == (0.02, None)


def test_rates_without_enough_history_or_observations_are_listed_with_the_reason():
    today = summary(TODAY, (1700, 2000), (30, 60))
    tests = {(t.slice, t.nights): t for t in drop_tests(today, HISTORY[:3]).tests}
    assert tests[(ALL_TRAFFIC, 1)].reason == "3 trailing night(s), at least 5 needed"
    assert not tests[(ALL_TRAFFIC, 1)].tested and not tests[(ALL_TRAFFIC, 1)].alert
    tests = {(t.slice, t.nights): t for t in drop_tests(today, HISTORY).tests}
    assert tests[("channel=api", 1)].reason.startswith("too few observations (tonight 60")
    assert tests[(ALL_TRAFFIC, 3)].tested  # three nights of 2000: tested
    gap = [d for d in HISTORY if d["day"] != (TODAY - timedelta(days=1)).isoformat()]
    tests = {(t.slice, t.nights): t for t in drop_tests(today, gap).tests}
    assert tests[(ALL_TRAFFIC, 3)].reason == "1 of the last 3 night(s) missing"
    assert drop_tests(summary(date(2026, 1, 1), (10, 2000)), HISTORY).tested == []  # later days: no history


def test_clustered_claims_weigh_less_than_as_many_independent_ones():
    def faithfulness(day: date, x: int, effective: float | None) -> dict:
        entry = {"value": x / 2000, "n": 2000, "successes": x}
        if effective is not None:
            entry["effective_n"] = effective
        return {"day": day.isoformat(), "metrics": {"lexical_faithfulness": entry}}

    def p_value(effective: float | None) -> float:
        history = [faithfulness(TODAY - timedelta(days=d), 1700 + d % 7, effective) for d in range(1, 29)]
        [test] = [t for t in drop_tests(faithfulness(TODAY, 1640, effective), history).tests if t.nights == 1]
        return test.p_value

    assert p_value(None) < 0.001 < p_value(500.0)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="variance_window"):
        DropSettings(window=14, variance_window=7)
    with pytest.raises(ValueError):
        DropSettings(fdr=0)

"""The paired baseline test: this run against a reference pooled from recent shipping runs (an exact
Poisson-binomial test, which is the exact McNemar test on the flipped cases for a pool of one run), a
margin, the pool filled then frozen, restarted only on a significant improvement."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
from scipy.stats import binomtest

from ragspine_pipeline.decision.baseline import (
    BaselineEntry,
    load_baseline,
    locked_update,
    paired_promoted,
)
from ragspine_pipeline.decision.paired import PairedSettings, Pool, next_pool, paired_test
from ragspine_pipeline.errors import InputError

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)

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
    assert result.summary() == (
        "pass rate 65.0 % vs 75.0 % over 1 reference run on 200 cases (net -10.0 points, "
        f"p = {result.p_worse:.3g} for a drop, {result.p_better:.3g} for a gain); 25 regressed, 5 improved"
    )


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


# -- the pooled reference ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_a_pool_of_one_run_is_exactly_the_mcnemar_test_on_the_flipped_cases(seed):
    rng = np.random.default_rng(seed)
    reference = {f"q{i:03d}": bool(ok) for i, ok in enumerate(rng.random(120) < 0.8)}
    current = {qid: (not ok) if rng.random() < 0.1 + 0.05 * seed else ok for qid, ok in reference.items()}
    b = sum(reference[q] and not current[q] for q in reference)
    c = sum(current[q] and not reference[q] for q in reference)
    for result in (paired_test(reference, current), paired_test(Pool.of_run(reference), current)):
        assert (len(result.regressed), len(result.improved), result.reference_runs) == (b, c, 1)
        assert result.p_worse == pytest.approx(binomtest(b, b + c, 0.5, alternative="greater").pvalue)
        assert result.p_better == pytest.approx(binomtest(c, b + c, 0.5, alternative="greater").pvalue)
        assert result.drop == pytest.approx((b - c) / 120)


def test_the_p_values_are_the_exact_poisson_binomial_tails_on_a_hand_computed_example():
    # m / (K + 1): a 1/3 (failed now), b fixed (3 of 3), c 1/2 (passed now), d 1/2 (failed now): t = 1.
    pool = Pool({"a": (1, 2), "b": (2, 2), "c": (0, 1), "d": (1, 1)}, runs=2)
    result = paired_test(pool, {"a": False, "b": True, "c": True, "d": False, "new": True})
    # P(T=0) = 2/3·1/2·1/2 = 1/6, P(T=1) = 1/3·1/4 + 2·(2/3·1/4) = 5/12, P(T=3) = 1/12.
    assert result.p_worse == pytest.approx(1 / 6 + 5 / 12)
    assert result.p_better == pytest.approx(1 - 1 / 6)
    # Pooled rate (1/2 + 1 + 0 + 1) / 4 against 2 / 4 passed now.
    assert (result.reference_rate, result.current_rate, result.drop) == pytest.approx((0.625, 0.5, 0.125))
    assert (result.regressed, result.improved, result.n, result.only_in_run) == (["a", "d"], ["c"], 4, 1)


def test_cases_passed_or_failed_by_every_run_say_nothing():
    pool = Pool({"a": (3, 3), "b": (0, 3)}, runs=3)
    result = paired_test(pool, {"a": True, "b": False})
    assert (result.p_worse, result.p_better, result.drop) == (1.0, 1.0, 0.0)


def test_a_pooled_reference_blocks_a_real_drop_and_not_the_same_pass_rate():
    rng = np.random.default_rng(7)
    p = np.where(rng.random(200) < 0.7, 0.95, 0.6)
    qids = [f"q{i:03d}" for i in range(200)]
    pool = Pool({q: (0, 0) for q in qids}, 0)
    for _ in range(5):
        pool = pool.joined(dict(zip(qids, rng.random(200) < p, strict=True)))
    assert pool.runs == 5 and all(runs == 5 for _, runs in pool.cases.values())
    worse = paired_test(pool, dict(zip(qids, rng.random(200) < p - 0.15, strict=True)))
    assert worse.blocks and worse.reference_runs == 5 and "over 5 reference runs" in worse.summary()
    same = paired_test(pool, {q: pool.share(q) >= 0.5 for q in qids})  # the pool's majority: no drop
    assert not same.blocks


def shipped(pool: Pool | None, outcomes: dict, settings: PairedSettings) -> Pool | None:
    comparison = None if pool is None else paired_test(pool, outcomes, settings).to_dict()
    return next_pool(pool, outcomes, comparison, settings)


def test_the_pool_fills_with_shipping_runs_up_to_pool_runs_then_is_frozen():
    settings = PairedSettings(pool_runs=3)
    runs = [flipped(BASE, to_fail=k, to_pass=k) for k in range(5)]
    pool = shipped(None, runs[0], settings)
    assert pool == Pool.of_run(runs[0])
    pool = shipped(pool, runs[1], settings)
    pool = shipped(pool, {**runs[2], "new": True}, settings)
    assert pool.runs == 3 and pool.cases["new"] == (1, 1)
    assert pool.cases["q001"] == (sum(r["q001"] for r in runs[:3]), 3)
    assert shipped(pool, runs[3], settings) is None  # full: frozen
    worse = flipped(BASE, to_fail=4)  # not blocked (within the margin), not better: still frozen
    assert not paired_test(pool, worse, settings).blocks and shipped(pool, worse, settings) is None


def test_a_clearly_significant_improvement_restarts_the_pool_from_that_run_alone():
    settings = PairedSettings(pool_runs=2)
    pool = shipped(shipped(None, BASE, settings), BASE, settings)
    assert pool.runs == 2
    better = flipped(BASE, to_pass=20)
    assert paired_test(pool, better, settings).improves
    assert shipped(pool, better, settings) == Pool.of_run(better)
    slightly = flipped(BASE, to_pass=4)  # better, but not clearly: the full pool stays
    assert not paired_test(pool, slightly, settings).improves and shipped(pool, slightly, settings) is None


def test_a_blocked_run_never_changes_the_pool():
    settings = PairedSettings(pool_runs=5)
    pool = Pool.of_run(BASE)  # not full: a shipping run would join
    dropped = flipped(BASE, to_fail=30)
    comparison = paired_test(pool, dropped, settings).to_dict()
    assert comparison["blocks"] and next_pool(pool, dropped, comparison, settings) is None


def test_settings_pool_runs_is_a_positive_integer():
    assert PairedSettings().pool_runs == 5
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError):
            PairedSettings(pool_runs=bad)


# -- the pool in the baseline file --------------------------------------------------------------------


def write(path, entry: dict) -> None:
    path.write_text(json.dumps({"golden": {"metrics": {"precision": 0.9}, **entry}}))


def test_an_old_baseline_with_only_cases_is_read_and_compared_as_a_pool_of_one_run(tmp_path):
    path = tmp_path / "b.json"
    write(path, {"cases": BASE, "run": "r1"})
    entry = load_baseline(path, ["precision"])["golden"]
    assert entry.pool is None and entry.reference() == Pool.of_run(BASE)
    current = flipped(BASE, to_fail=25, to_pass=5)
    assert paired_test(entry.reference(), current) == paired_test(BASE, current)
    comparison = paired_test(entry.reference(), BASE).to_dict()
    new = paired_promoted(entry, {"precision": 0.95}, cases=BASE, paired=comparison, run="r2", now=NOW)
    assert new.pool.runs == 2 and new.pool.cases["q001"] == (2, 2) and new.pool.cases["q000"] == (0, 2)
    assert new.metrics == {"precision": 0.9} and (new.run, new.cases) == ("r2", BASE)  # a join: pool only


def test_promotions_write_the_pool_and_a_blocked_run_leaves_the_file_untouched(tmp_path):
    path = tmp_path / "b.json"
    settings = PairedSettings(pool_runs=2)

    def ship(outcomes: dict, run: str) -> BaselineEntry | None:
        def change(old: BaselineEntry | None) -> BaselineEntry | None:
            reference = None if old is None else old.reference()
            paired = None if reference is None else paired_test(reference, outcomes, settings).to_dict()
            return paired_promoted(
                old, {"precision": 0.9}, cases=outcomes, paired=paired, settings=settings, run=run, now=NOW
            )

        return locked_update(path, "golden", None, change)

    ship(BASE, "r1")
    entry = ship(flipped(BASE, to_fail=1), "r2")
    written = json.loads(path.read_text())["golden"]
    assert (
        written["pooled_runs"] == 2
        and written["pool"]["q001"] == [1, 2]
        and written["pool"]["q002"] == [2, 2]
    )
    assert written["cases"]["q001"] is False and written["run"] == "r2"
    assert load_baseline(path, ["precision"])["golden"].pool == entry.pool
    before = path.read_bytes()
    assert ship(flipped(BASE, to_fail=40), "r3") == entry  # blocked: nothing written
    assert ship(BASE, "r4") == entry  # full and no clear gain: frozen
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"pool": {"q1": [1, 1]}}, "'pool' and 'pooled_runs' go together"),
        ({"pooled_runs": 2}, "'pool' and 'pooled_runs' go together"),
        ({"pool": {"q1": [2, 1]}, "pooled_runs": 2}, "case 'q1' must be [passes, runs]"),
        ({"pool": {"q1": [1, 3]}, "pooled_runs": 2}, "runs <= 2"),
        ({"pool": {"q1": [0, 0]}, "pooled_runs": 2}, "case 'q1'"),
        ({"pool": {"q1": [True, 1]}, "pooled_runs": 2}, "case 'q1'"),
        ({"pool": {"q1": [1, 1]}, "pooled_runs": 0}, "'pooled_runs' must be a positive integer"),
        ({"pool": [[1, 1]], "pooled_runs": 1}, "'pool' must be an object"),
    ],
)
def test_a_malformed_pool_is_refused_naming_the_file(tmp_path, extra, message):
    path = tmp_path / "b.json"
    write(path, extra)
    with pytest.raises(InputError, match=r"b\.json") as raised:
        load_baseline(path, ["precision"])
    assert message in str(raised.value)


# -- the founding release: every run of it joins, blocked or not (issue 45) -----------------------------

AT = "2026-11-29T08:00:00Z"
QIDS = [f"q{i:03d}" for i in range(200)]
TRUE = np.array([1.0] * 126 + [0.5] * 74)  # a true pass rate of 0.815
LUCKY = dict(zip(QIDS, [True] * 180 + [False] * 20, strict=True))  # 0.900: the finding's first run


def honest_sequence(release: str | None, runs: int = 30, seed: int = 3) -> tuple[list[bool], Pool]:
    """A lucky first run, then ``runs`` honest runs of the same service; ``release``: of every run."""
    rng = np.random.default_rng(seed)
    pool = next_pool(None, LUCKY, None, release=release)
    blocks = []
    for run in range(runs):
        outcomes = dict(zip(QIDS, (rng.random(200) < TRUE).tolist(), strict=True))
        comparison = paired_test(pool, outcomes).to_dict()
        blocks.append(comparison["blocks"])
        pool = next_pool(pool, outcomes, comparison, release=release, run=f"run-{run}", at=AT) or pool
    return blocks, pool


def test_a_pool_founded_by_a_lucky_run_comes_back_to_its_release_and_stops_blocking_it():
    # As in the finding: the survivor-fed pool froze above the truth and blocked the same service for good.
    unknown, frozen = honest_sequence(release=None)
    assert sum(unknown) >= 10 and sum(unknown[10:]) >= 5 and frozen.rate > 0.84
    blocks, pool = honest_sequence(release="r1")
    assert sum(blocks) <= 2 and sum(blocks[-20:]) <= 1
    assert pool.runs == 31 and pool.release == "r1" and pool.rate == pytest.approx(0.815, abs=0.01)
    # Every blocked run of r1 joined and is on the record; a shipping one joined without a record.
    assert len(pool.joins) == sum(blocks) and all(join.release == "r1" for join in pool.joins)


def test_a_blocked_run_of_the_founding_release_joins_with_who_when_and_why_recorded():
    pool = Pool.of_run(LUCKY, "r1")
    worse = flipped(LUCKY, to_fail=20)
    comparison = paired_test(pool, worse).to_dict()
    assert comparison["blocks"] and comparison["reference_release"] == "r1"
    joined = next_pool(pool, worse, comparison, release="r1", run="run-7", at=AT)
    assert joined.runs == 2 and joined.cases["q000"] == (1, 2) and joined.cases["q199"] == (0, 2)
    [join] = joined.joins
    assert (join.run, join.release, join.at, join.p_worse) == ("run-7", "r1", AT, comparison["p_worse"])
    assert (join.before, join.after) == pytest.approx((0.9, 0.85))
    assert join.sentence() == (
        f"run run-7 of release r1 (blocked, p = {join.p_worse:.3g}) joined the reference pool at {AT}: "
        "its pass rate 90.0 % → 85.0 %"
    )
    later = paired_test(joined, LUCKY)
    assert "over 2 reference runs (founded by release r1, 1 of its runs pooled although blocked)" in (
        later.summary()
    )


def test_a_real_drop_of_another_release_is_blocked_and_never_joins_however_often_it_is_run():
    settings = PairedSettings(pool_runs=5)
    pool = Pool.of_run(BASE, "r1").joined(BASE)  # not full: a shipping run of any release would join
    dropped = flipped(BASE, to_fail=25, to_pass=5)
    for run in range(5):
        comparison = paired_test(pool, dropped, settings).to_dict()
        assert comparison["blocks"]
        assert next_pool(pool, dropped, comparison, settings, release="r2", run=f"r2-{run}") is None
        assert next_pool(pool, dropped, comparison, settings, release=None) is None


def test_a_run_of_the_founding_release_never_restarts_the_pool_and_joins_a_full_one():
    settings = PairedSettings(pool_runs=2)
    pool = Pool.of_run(BASE, "r1").joined(BASE)
    better = flipped(BASE, to_pass=20)
    assert paired_test(pool, better, settings).improves
    own = next_pool(pool, better, paired_test(pool, better, settings).to_dict(), settings, release="r1")
    assert (
        own.runs == 3 and own.release == "r1" and not own.joins
    )  # joined: a release is not better than itself
    other = next_pool(pool, better, paired_test(pool, better, settings).to_dict(), settings, release="r2")
    assert other == Pool.of_run(better, "r2")  # another release, clearly better: it founds the new pool
    same = flipped(BASE, to_fail=1, to_pass=1)
    assert shipped(pool, same, settings) is None  # full: other runs no longer join
    assert (
        next_pool(pool, same, paired_test(pool, same, settings).to_dict(), settings, release="r1").runs == 3
    )


def test_the_founding_release_and_its_joins_are_written_and_read_back(tmp_path):
    path = tmp_path / "b.json"
    settings = PairedSettings(pool_runs=5)

    def run(outcomes: dict, name: str, release: str | None) -> BaselineEntry | None:
        def change(old: BaselineEntry | None) -> BaselineEntry | None:
            reference = None if old is None else old.reference()
            paired = None if reference is None else paired_test(reference, outcomes, settings).to_dict()
            return paired_promoted(
                old,
                {"precision": 0.9},
                cases=outcomes,
                paired=paired,
                settings=settings,
                run=name,
                now=NOW,
                release=release,
            )

        return locked_update(path, "golden", None, change)

    run(LUCKY, "r1-a", "r1")
    before = json.loads(path.read_text())["golden"]
    assert before["pool_release"] == "r1" and "pool_history" not in before
    run(flipped(LUCKY, to_fail=20), "r1-b", "r1")  # blocked by the paired test: pooled, not promoted
    after = json.loads(path.read_text())["golden"]
    assert after["pooled_runs"] == 2 and after["pool"]["q000"] == [1, 2] and after["pool"]["q179"] == [2, 2]
    assert {key: after[key] for key in ("metrics", "cases", "run", "updated_at")} == {
        key: before[key] for key in ("metrics", "cases", "run", "updated_at")
    }
    [join] = after["pool_history"]
    assert join["run"] == "r1-b" and join["release"] == "r1" and join["at"] == "2026-11-27T08:00:00Z"
    assert (join["from"], join["to"]) == pytest.approx((0.9, 0.85)) and 0 < join["p_worse"] < 0.02
    entry = load_baseline(path, ["precision"])["golden"]
    assert entry.pool.release == "r1" and entry.pool.joins[0].run == "r1-b"
    unchanged = path.read_bytes()
    run(flipped(LUCKY, to_fail=20), "r2-a", "r2")  # the same drop of another release: nothing written
    assert path.read_bytes() == unchanged


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"pool_release": "r1"}, "'pool_release' and 'pool_history' need 'pool'"),
        ({"pool": {"q1": [1, 1]}, "pooled_runs": 1, "pool_release": ""}, "'pool_release' must be"),
        ({"pool": {"q1": [1, 1]}, "pooled_runs": 1, "pool_history": {}}, "'pool_history' must be a list"),
        ({"pool": {"q1": [1, 1]}, "pooled_runs": 1, "pool_history": [{"run": "x"}]}, "join 1: missing key"),
        (
            {
                "pool": {"q1": [1, 1]},
                "pooled_runs": 1,
                "pool_history": [
                    {"run": "x", "release": "r1", "at": "now", "from": 0.9, "to": 0.8, "p_worse": 0.01}
                ],
            },
            "join 1: 'at' must be a UTC time",
        ),
        (
            {
                "pool": {"q1": [1, 1]},
                "pooled_runs": 1,
                "pool_history": [
                    {"run": "x", "release": "r1", "at": AT, "from": 1.5, "to": 0.8, "p_worse": 0.01}
                ],
            },
            "join 1: 'from' must be a number in [0, 1]",
        ),
    ],
)
def test_a_malformed_founding_release_or_history_is_refused_naming_the_file(tmp_path, extra, message):
    path = tmp_path / "b.json"
    write(path, extra)
    with pytest.raises(InputError, match=r"b\.json") as raised:
        load_baseline(path, ["precision"])
    assert message in str(raised.value)

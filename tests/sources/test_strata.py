"""Allocating a stratified sample: proportional, floored, summing to n, never above a population."""

from __future__ import annotations

import random

import pytest

from ragspine_pipeline.sources.strata import allocate


def test_proportional_on_big_strata_with_a_floor_for_small_ones():
    allocated, exceeded = allocate({"big": 9000, "mid": 900, "small": 100, "tiny": 5}, n=1000, floor=30)
    assert not exceeded
    assert allocated["tiny"] == 5  # smaller than its floor: all it has
    assert allocated["small"] == 30  # its share (10) is below the floor
    assert sum(allocated.values()) == 1000
    # the rest (965) follows the populations of the big strata: 965 · 9000/9900 and 965 · 900/9900
    assert allocated == {"big": 877, "mid": 88, "small": 30, "tiny": 5}


def test_largest_remainder_then_stratum_name_breaks_ties():
    allocated, _ = allocate({"a": 100, "b": 100, "c": 100}, n=10, floor=0)
    assert allocated == {"a": 4, "b": 3, "c": 3}
    assert allocate({"a": 100, "b": 200}, n=10, floor=0)[0] == {"a": 3, "b": 7}  # 3.33 and 6.67


def test_a_day_smaller_than_n_is_taken_whole():
    assert allocate({"a": 3, "b": 4}, n=10, floor=30) == ({"a": 3, "b": 4}, False)
    assert allocate({}, n=10, floor=30) == ({}, False)


def test_floors_above_n_win_and_say_so():
    allocated, exceeded = allocate({"a": 100, "b": 100, "c": 20}, n=50, floor=30)
    assert allocated == {"a": 30, "b": 30, "c": 20} and exceeded
    assert allocate({"a": 100, "b": 100}, n=60, floor=30) == ({"a": 30, "b": 30}, False)  # exactly n


def test_invalid_arguments():
    with pytest.raises(ValueError):
        allocate({"a": 1}, n=-1, floor=0)
    with pytest.raises(ValueError):
        allocate({"a": 1}, n=1, floor=-1)


@pytest.mark.parametrize("seed", range(200))
def test_random_populations_respect_every_invariant(seed):
    rng = random.Random(seed)
    populations = {f"s{i}": rng.choice([1, 5, 29, 30, 31, 200, 5000]) for i in range(rng.randint(1, 8))}
    n, floor = rng.randint(0, 3000), rng.randint(0, 60)
    allocated, exceeded = allocate(populations, n=n, floor=floor)
    total = sum(populations.values())
    owed = {s: min(floor, size) for s, size in populations.items()}
    assert all(owed[s] <= allocated[s] <= populations[s] for s in populations) or total <= n
    if total <= n:
        assert allocated == populations
    elif sum(owed.values()) >= n:
        assert allocated == owed and exceeded == (sum(owed.values()) > n)
    else:
        assert sum(allocated.values()) == n and not exceeded
        # above the floors, a larger stratum never gets fewer than a smaller one
        for a in populations:
            for b in populations:
                if populations[a] > populations[b] and allocated[b] > owed[b]:
                    assert allocated[a] >= allocated[b]

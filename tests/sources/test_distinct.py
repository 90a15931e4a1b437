"""Distinct counts: exact whether a pass spills or not, and over the union of several passes."""

from __future__ import annotations

import numpy as np
import pytest

from ragspine_pipeline.sources import distinct
from ragspine_pipeline.sources.distinct import DigestUnion, DistinctIds


def occurrences(seed: int, size: int, strata: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    digests = rng.integers(0, 2**64 - 1, size=size, dtype=np.uint64, endpoint=True)
    digests = np.concatenate([digests, digests[: size // 6], digests[:10]])  # repeats
    codes = rng.integers(0, strata, size=len(digests)).astype(np.uint32)
    return digests, codes


@pytest.mark.parametrize("buffer_entries", [7, 1 << 19])
def test_a_pass_gives_its_distinct_pairs_sorted_whether_spilled_or_not(buffer_entries):
    digests, codes = occurrences(4, 3000, 3)
    with DistinctIds(buffer_entries=buffer_entries) as ids:
        for start in range(0, len(digests), 100):
            ids.add(digests[start : start + 100], codes[start : start + 100])
        recode = np.array([2, 0, 1], dtype=np.uint32)
        pairs, strata = ids.unique_pairs(recode, np.uint8)
    expected = sorted(set(zip(digests.tolist(), recode[codes].tolist(), strict=True)))
    assert list(zip(pairs.tolist(), strata.tolist(), strict=True)) == expected
    assert pairs.dtype == np.uint64 and strata.dtype == np.uint8


@pytest.mark.parametrize("buffer_entries", [1, 500, 1 << 22])
def test_the_union_counts_ids_shared_by_passes_once(buffer_entries):
    digests, codes = occurrences(5, 4000, 4)
    names = ["a", "b", "c", "d"]
    passes = []
    # three passes over overlapping slices, each naming the strata in its own order
    for low, high, order in [
        (0, 2000, [3, 1, 0, 2]),
        (1500, 3600, [0, 1, 2, 3]),
        (3000, len(digests), [2, 3, 1, 0]),
    ]:
        with DistinctIds() as ids:
            ids.add(digests[low:high], codes[low:high])
            pair_digests, local = ids.unique_pairs()
        recode = np.array(order, dtype=np.uint32)  # pass code i is the union name names[order[i]]
        inverse = np.argsort(recode).astype(np.uint32)
        passes.append(([names[i] for i in order], pair_digests, inverse[local].astype(np.uint16)))
    with DigestUnion(buffer_entries=buffer_entries) as union:
        for strata, pair_digests, local in passes:
            union.add(strata, pair_digests, local)
        total, per_stratum = union.counts()
    pairs = set(zip(digests.tolist(), codes.tolist(), strict=True))
    assert total == len(set(digests.tolist()))
    assert per_stratum == {names[code]: sum(1 for _, s in pairs if s == code) for code in range(4)}


def test_the_union_refuses_pairs_it_would_miscount():
    with DigestUnion() as union:
        with pytest.raises(ValueError, match="sorted"):
            union.add(["x"], np.array([5, 3], dtype=np.uint64), np.array([0, 0], dtype=np.uint8))
        with pytest.raises(ValueError, match="name a stratum"):
            union.add(["x"], np.array([3, 5], dtype=np.uint64), np.array([0, 1], dtype=np.uint8))
        with pytest.raises(ValueError, match="uint64"):
            union.add(["x"], np.array([3, 5], dtype=np.int64), np.array([0, 0], dtype=np.uint8))
        assert union.counts() == (0, {})


def test_partition_bounds_cover_the_top_bytes():
    digests = np.array([0, 1, 2**56 - 1, 2**56, 2**63, 2**64 - 1], dtype=np.uint64)
    bounds = distinct._bounds(digests)
    assert len(bounds) == 257 and bounds[0] == 0 and bounds[-1] == len(digests)
    assert bounds[1] == 3 and bounds[2] == 4 and bounds[128] == 4 and bounds[129] == 5 and bounds[255] == 5

"""Slice aggregates are exact and independent of the order of the cases."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np
import pyarrow as pa

from ragspine_pipeline.scoring.slices import slices

TAGS = pa.map_(pa.string(), pa.string())


def random_cases(n: int, seed: int) -> tuple[pa.Array, pa.Table, list[dict]]:
    """Tags over four dimensions (one with a value per case), and ratio metrics with denominators."""
    rng = np.random.default_rng(seed)
    tags, rows = [], []
    for i in range(n):
        case_tags = [("workflow", f"w{rng.integers(3)}"), ("case", f"c{i}")]
        case_tags += [(d, f"{d}{rng.integers(4)}") for d in ("team", "lang") if rng.random() < 0.7]
        tags.append(case_tags)
        claims = int(rng.integers(0, 6))
        faithfulness = int(rng.integers(0, claims + 1)) / claims if claims else 0.0
        rows.append(
            {
                "releasable": bool(rng.random() < 0.6),
                "n_claims": claims,
                "claim_faithfulness": None if rng.random() < 0.2 else faithfulness,
                "score": None if rng.random() < 0.2 else float(rng.random()),  # no denominator column
            }
        )
    return pa.array(tags, TAGS), pa.Table.from_pylist(rows), rows


def expected_slices(tags: pa.Array, rows: list[dict]) -> dict:
    members = defaultdict(list)
    for case_tags, row in zip(tags.to_pylist(), rows, strict=True):
        for dimension, value in case_tags:
            members[(dimension, value)].append(row)
    out = {}
    for key, group in sorted(members.items()):
        faithfulness = [
            Fraction(round(r["claim_faithfulness"] * max(r["n_claims"], 1)), max(r["n_claims"], 1))
            for r in group
            if r["claim_faithfulness"] is not None
        ]
        score = [Fraction(r["score"]) for r in group if r["score"] is not None]
        out[key] = (
            len(group),
            sum(r["releasable"] for r in group),
            float(sum(faithfulness) / len(faithfulness)) if faithfulness else None,
            float(sum(score) / len(score)) if score else None,
        )
    return out


def as_dict(result) -> dict:
    return {
        (s.dimension, s.value): (s.n, s.releasable, s.metrics["claim_faithfulness"], s.metrics["score"])
        for s in result
    }


def test_slice_means_are_exact_and_sorted_by_dimension_then_value():
    tags, cases, rows = random_cases(400, seed=1)
    result = slices(tags, cases, ["claim_faithfulness", "score"])
    assert as_dict(result) == expected_slices(tags, rows)
    assert [(s.dimension, s.value) for s in result] == sorted((s.dimension, s.value) for s in result)


def test_slices_of_shuffled_cases_are_identical():
    tags, cases, _ = random_cases(400, seed=2)
    order = np.random.default_rng(3).permutation(400)
    shuffled = slices(
        tags.take(pa.array(order)), cases.take(pa.array(order)), ["claim_faithfulness", "score"]
    )
    assert shuffled == slices(tags, cases, ["claim_faithfulness", "score"])


def test_cases_without_tags_have_no_slice():
    cases = pa.table({"releasable": [True, False], "claim_faithfulness": pa.array([0.5, None])})
    assert slices(pa.array([[], []], TAGS), cases, ["claim_faithfulness"]) == []

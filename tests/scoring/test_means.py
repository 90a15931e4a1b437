"""Order-independent means: exact sums of ratios and of doubles, rounded once."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ragspine_pipeline.contracts.columns import EVIDENCE_SCHEMA
from ragspine_pipeline.scoring import means
from ragspine_pipeline.scoring.layered import score_layered
from ragspine_pipeline.scoring.slices import slices
from tests.scoring.conftest import gold_table, trace_table

THIRDS_AND_SIXTH = [(1, 3), (2, 3), (1, 6)]  # as doubles, their float sum depends on the order


def exact_mean(fractions: list[Fraction]) -> float:
    return float(sum(fractions, Fraction(0)) / len(fractions))


def test_a_float_mean_of_thirds_depends_on_order_and_the_exact_mean_does_not():
    orders = list(itertools.permutations(THIRDS_AND_SIXTH))
    float_means = {pc.mean(pa.array([p / q for p, q in order])).as_py() for order in orders}
    assert len(float_means) == 2  # the problem: one ULP apart, by order alone

    ratio_means = {
        means.mean(pa.array([p / q for p, q in order]), pa.array([q for _, q in order])) for order in orders
    }
    assert ratio_means == {float(Fraction(7, 18))}  # the exact mean of the ratios, rounded once
    double_means = {means.mean(pa.array([p / q for p, q in order])) for order in orders}
    assert double_means == {exact_mean([Fraction(p / q) for p, q in THIRDS_AND_SIXTH])}


def test_the_mean_of_ratios_is_exact_with_nulls_left_out():
    rng = np.random.default_rng(3)
    denominators = rng.integers(0, 40, 5000)
    numerators = rng.integers(0, denominators + 1)
    values = np.divide(numerators, denominators, out=np.zeros(5000), where=denominators > 0)
    applies = rng.random(5000) < 0.8
    got = means.mean(pa.array(values, mask=~applies), pa.array(denominators))
    pairs = zip(numerators.tolist(), denominators.tolist(), applies.tolist(), strict=True)
    expected = [Fraction(p, max(q, 1)) for p, q, applied in pairs if applied]
    assert got == exact_mean(expected)


def test_the_mean_of_doubles_is_the_exact_mean_correctly_rounded():
    rng = np.random.default_rng(5)
    values = np.concatenate(
        [
            rng.random(3000) * 10.0 ** rng.integers(-30, 30, 3000) * rng.choice([-1, 1], 3000),
            [0.0, -0.0, 5e-324, 1e-310, 1.0, 2.0**52 + 1],
        ]
    )
    assert means.mean(pa.array(values)) == exact_mean([Fraction(v) for v in values])
    assert means.mean(pa.array(values[::-1])) == means.mean(pa.array(values))


def test_group_means_count_a_value_in_every_group_of_its_rows():
    values = pa.array([1 / 3, 2 / 3, None, 1 / 7, 0.0])
    denominators = pa.array([3, 3, 0, 7, 0])
    rows = np.array([0, 1, 3, 0, 2, 4, 1])
    groups = np.array([0, 0, 0, 1, 1, 1, 2])
    got = means.group_means(values, groups, 4, denominators, rows=rows)
    assert got == [
        exact_mean([Fraction(1, 3), Fraction(2, 3), Fraction(1, 7)]),
        exact_mean([Fraction(1, 3), Fraction(0)]),  # the null is not counted
        2 / 3,
        None,  # a group with no value
    ]


def test_sums_stay_exact_when_split_into_passes(monkeypatch):
    rng = np.random.default_rng(11)
    values = pa.array(rng.random(1000))
    groups = rng.integers(0, 4, 1000)
    whole = means.group_means(values, groups, 4)
    monkeypatch.setattr(means, "BLOCK", 7)
    assert means.group_means(values, groups, 4) == whole


def test_no_value_and_bad_values():
    assert means.mean(pa.array([], pa.float64())) is None
    assert means.mean(pa.array([None, None], pa.float64())) is None
    with pytest.raises(ValueError, match="NaN"):
        means.mean(pa.array([0.5, float("nan")]))
    with pytest.raises(ValueError, match="not ratios"):
        means.mean(pa.array([0.5, 0.3]), pa.array([2, 3]))


# -- the constructed case, through the layered scorer ------------------------------------------------

CHUNKS = [f"c{i}" for i in range(6)]
EVIDENCE = pa.Table.from_pylist(
    [
        {"chunk_id": c, "document_id": c, "parent_id": None, "version": "v1", "permitted": True,
         "current": True, "text": f"chunk {c}"}
        for c in CHUNKS
    ],
    schema=EVIDENCE_SCHEMA,
)  # fmt: skip


def precision_case(qid: str, required: int, selected: int) -> tuple[dict, dict]:
    """A case whose context precision is ``required / selected``."""
    gold = {"qid": qid, "answerable": False, "gold_citations": CHUNKS[:required], "tags": {"team": "a"}}
    ids = CHUNKS[:selected]
    trace = {"qid": qid, "retrieved_ids": ids, "selected_context_ids": ids, "claim": "I don't know"}
    return gold, trace


def test_layered_and_slice_means_of_thirds_are_the_same_in_every_order():
    cases = [precision_case(f"q{i}", r, s) for i, (r, s) in enumerate(THIRDS_AND_SIXTH)]
    seen_float, seen_layered, seen_slices = set(), set(), set()
    for order in itertools.permutations(cases):
        gold = gold_table([g for g, _ in order])
        traces = trace_table([t for _, t in reversed(order)])  # traces in yet another order
        score = score_layered(gold, traces, EVIDENCE)
        seen_float.add(pc.mean(score.cases.column("context_precision")).as_py())
        seen_layered.add(score.metrics["context_precision"])
        (team,) = slices(gold.column("tags"), score.cases, ["context_precision"])
        seen_slices.add(team.metrics["context_precision"])
    assert len(seen_float) == 2  # what a float mean in input order gives
    assert seen_layered == seen_slices == {float(Fraction(7, 18))}

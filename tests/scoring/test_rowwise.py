"""The row-wise operations answer what Python answers, string by string, whatever the column's layout.

Chunked columns, sliced arrays (a non-zero offset, in the list and in its items), null rows, null items,
multi-byte UTF-8 and long strings are where an operation reading the wrong values would show.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragspine_pipeline.scoring import grounded, join, rowwise

STRING = pa.string()
LIST = pa.list_(STRING)
PIECES = st.sampled_from(["a", "b", "ab", "é", "数据", " ", "-", "q1", "Q1", "policy", "x" * 70])
TEXT = st.lists(PIECES, max_size=8).map("".join)
MAYBE_TEXT = st.one_of(st.none(), TEXT)


@st.composite
def layouts(draw, values: list, type_: pa.DataType = STRING) -> pa.Array | pa.ChunkedArray:
    """``values`` as Arrow in some layout: one array, a slice of a longer one, or chunks (each sliced)."""
    kind = draw(st.sampled_from(["array", "slice", "chunks"] + (["items"] if type_ == LIST else [])))
    if kind == "items":  # the list's items start inside their own array (a sliced child)
        lengths = [0 if v is None else len(v) for v in values]
        items = pa.array(["pad", *(item for v in values if v is not None for item in v)], STRING).slice(1)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())
        return pa.ListArray.from_arrays(offsets, items, mask=pa.array([v is None for v in values]))
    if kind == "array":
        return pa.array(values, type_)
    if kind == "slice":
        pad = draw(st.integers(0, 3))
        padded = [["pad"] if type_ != pa.string() else "pad"] * pad + values + [None]
        return pa.array(padded, type_).slice(pad, len(values))
    cuts = sorted(draw(st.lists(st.integers(0, len(values)), max_size=3)))
    bounds = [0, *cuts, len(values)]
    # Every chunk is offset by one: its first row is a slice's.
    chunks = [pa.array([None, *values[lo:hi]], type_).slice(1) for lo, hi in itertools.pairwise(bounds)]
    return pa.chunked_array(chunks, type_)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), haystacks=st.lists(MAYBE_TEXT, min_size=1, max_size=6))
def test_contains_pairs_is_pythons_in(data, haystacks):
    needles = data.draw(st.lists(st.one_of(st.none(), TEXT, PIECES), max_size=10))
    rows = data.draw(
        st.lists(st.integers(-1, len(haystacks) - 1), min_size=len(needles), max_size=len(needles))
    )
    found = rowwise.contains_pairs(
        data.draw(layouts(haystacks)), data.draw(layouts(needles)), np.array(rows, dtype=np.int64)
    )
    expected = [
        row >= 0 and needle is not None and haystacks[row] is not None and needle in haystacks[row]
        for needle, row in zip(needles, rows, strict=True)
    ]
    assert found.tolist() == expected


LISTS = st.one_of(st.none(), st.lists(st.one_of(st.none(), st.just(""), PIECES), max_size=5))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rows=st.lists(st.tuples(LISTS, LISTS), min_size=1, max_size=6))
def test_all_in_and_any_in_are_pythons_in(data, rows):
    needles = data.draw(layouts([n for n, _ in rows], LIST))
    haystacks = data.draw(layouts([h for _, h in rows], LIST))

    def found(value, hay):
        return value is not None and value in [item for item in hay or [] if item is not None]

    assert rowwise.all_in(needles, haystacks).tolist() == [
        all(found(value, hay) for value in needle or []) for needle, hay in rows
    ]
    assert rowwise.any_in(needles, haystacks).tolist() == [
        any(found(value, hay) for value in needle or []) for needle, hay in rows
    ]


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    gold=st.lists(TEXT, unique=True, min_size=1, max_size=6),
    keys=st.lists(TEXT, max_size=12),
)
def test_each_case_joins_its_last_trace(data, gold, keys):
    """Each gold case gets the row of the last trace with its id; traces beyond the first of a key are
    duplicates, distinct keys with no case are unmatched."""
    traces = pa.table({"qid": data.draw(layouts(keys)), "question": pa.nulls(len(keys), pa.string())})
    rows, counts = join._join(pa.table({"qid": pa.array(gold, pa.string())}), traces)
    last = {key: row for row, key in enumerate(keys)}
    expected = [last.get(qid) for qid in gold]
    assert (list(range(len(gold))) if rows is None else rows.to_pylist()) == expected
    assert counts == {
        "duplicates": len(keys) - len(set(keys)),
        "unmatched": len(set(keys) - set(gold)),
    }


ASCII = st.text(alphabet=st.sampled_from("aaZ0099--_  .,;:\t\n\v\f\r\x1c'\"#/()é数"), max_size=40)


def python_phrases(claim: str) -> list[str]:
    """The phrases of one claim as the definition reads: the maximal runs of letters, digits, hyphens and
    whitespace, each from its first letter or digit to its last character that is not whitespace."""
    runs = re.findall(r"[\w\- \t\n\r\f\v]+", claim.lower().replace("_", "\x00"))
    phrases = [run.lstrip("- \t\n\r\f\v").rstrip(" \t\n\r\f\v") for run in runs]
    return [phrase for phrase in phrases if len(phrase) >= grounded.MIN_SUBSTR_CHARS]


@settings(max_examples=500, deadline=None)
@given(claims=st.lists(st.one_of(st.none(), ASCII), max_size=8))
@example(
    claims=["abcde-", "ab, --", "x -- abcdef --", "  -abc1e \t", "Ab-Cd\tEf", "..--..", "-----", "é abcdef"]
)
def test_a_gold_claims_phrases_are_its_runs_of_letters_digits_hyphens_and_spaces(claims):
    phrases = grounded.gold_claim_phrases(pa.array(claims, pa.string())).to_pylist()
    assert phrases == [python_phrases(claim or "") for claim in claims]

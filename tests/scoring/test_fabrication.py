"""The fabrication rule on Arrow's RE2 engine equals RAGSpine's on Python's ``re``, character for
character: random texts over periods, digits of several scripts and every kind of whitespace."""

from __future__ import annotations

import re

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine_pipeline.scoring.fabrication import fabricated, numbers, without_periods
from tests.scoring.peer_rules import RAGSPINE_PERIOD_RE, ragspine_fabricated

NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")  # RAGSpine's number, Python's Unicode \\d

WHITESPACE = [chr(c) for c in range(0x3001) if chr(c).isspace()]
PIECES = [
    "FY", "fy", "Fy", "H", "h", "Q", "q", "年", "上半年", "下半年", "19", "20", "2024", "２０２５", "1", "7",
    "12.5", ".", "x", "not in context", "１", "٣", "७", "𝟘", "Ⅻ", "²", *WHITESPACE,
]  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=12).map("".join), min_size=1, max_size=20))
def test_re2_fabrication_equals_ragspines_python_rule(texts):
    assert fabricated(pa.array(texts, pa.string())).tolist() == [ragspine_fabricated(t) for t in texts]
    stripped = without_periods(pa.array(texts, pa.string())).to_pylist()
    expected = [NUMBER_RE.findall(RAGSPINE_PERIOD_RE.sub(" ", t)) for t in texts]
    assert [numbers(s) for s in stripped] == expected


def test_superscripts_and_roman_numerals_are_not_decimal_digits():
    # Python's \d is Unicode category Nd: "²" (No) and "Ⅻ" (Nl) are not digits; "𝟘" (Nd) is.
    assert fabricated(pa.array(["x²", "Ⅻ", "𝟘", None])).tolist() == [False, False, True, False]

"""The guard that keeps deep nesting and over-long numbers away from the columnar reader misses none.

DuckDB parses every line but reads only the fields a contract declares; the record reader refuses a
line nested deeper than the cap or holding a number of more than 4,300 digits anywhere. The guard
(``line_guards.suspect_lines``, and ``line_guards.plain_json_lines`` over a file read in blocks) must
flag every such line; a false alarm only costs time. The caps are made small here so that random text reaches
every branch.
"""

from __future__ import annotations

import re
from unittest.mock import patch

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragspine_pipeline import inputs, line_guards

PIECES = st.sampled_from(
    [b"", b" ", b"\t", b"{", b"}", b"[", b"]", b'"', b'"[{', b"12", b"999", b"a", b",", b"\\"]
)
LINES = st.lists(st.lists(PIECES, max_size=12).map(b"".join), max_size=6)
DEPTH, DIGITS = 3, 4  # the caps while testing


def offends(line: bytes) -> bool:
    """What the record reader refuses: nesting beyond the cap (brackets in strings skipped), or a number
    (a run of digits outside strings) longer than the cap."""
    if inputs.nesting_depth(line) > DEPTH:
        return True
    # What lies outside strings, each string a separator: 999"[{"12 holds two numbers, not 99912.
    bare = re.sub(rb'"(?:[^"\\]|\\.)*"', b" ", line)
    return any(len(run) > DIGITS for run in re.findall(rb"[0-9]+", bare))


def small_caps():
    return (
        patch.object(inputs, "MAX_DEPTH", DEPTH),
        patch.object(line_guards, "_LONGEST_NUMBER", b"0" * (DIGITS + 1)),
    )


@settings(max_examples=500, deadline=None)
@given(lines=LINES)
@example(lines=[b"[[[[]]]]", b"{}"])
@example(lines=[b"12345", b'"123456"'])
@example(lines=[b'999"[{"12'])
def test_no_offending_line_goes_unflagged(lines):
    depth, digits = small_caps()
    with depth, digits:
        suspect = line_guards.suspect_lines(b"\n".join(lines))
        assert len(suspect) == max(len(lines), 1)
        for line, flagged in zip(lines, suspect, strict=False):
            assert flagged or not offends(line)


@settings(max_examples=300, deadline=None)
@given(lines=LINES, block=st.integers(1, 16))
def test_a_file_read_in_blocks_is_judged_as_its_lines(tmp_path_factory, lines, block):
    path = tmp_path_factory.mktemp("scan") / "lines.jsonl"
    data = b"\n".join(lines)
    path.write_bytes(data)
    depth, digits = small_caps()
    trailing_comma = re.search(rb",[ \t\r\n]*[}\]]", data) is not None  # wherever the blocks cut it
    with depth, digits, patch.object(line_guards, "_GUARD_BLOCK", block):
        assert line_guards.plain_json_lines(path) == (
            not line_guards.suspect_lines(data).any() and not trailing_comma
        )


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), max_size=8), cap=st.integers(1, 12), block=st.integers(1, 16))
def test_a_line_longer_than_the_cap_is_found_wherever_blocks_cut(tmp_path_factory, lengths, cap, block):
    path = tmp_path_factory.mktemp("scan") / "lines.jsonl"
    path.write_bytes(b"\n".join(b"x" * n for n in lengths))
    with patch.object(inputs, "MAX_LINE_BYTES", cap), patch.object(line_guards, "_GUARD_BLOCK", block):
        assert line_guards.plain_json_lines(path) == all(n <= cap for n in lengths)


def test_plain_lines_pass():
    data = b'{"qid": "q1", "n": [1, [2, 3]], "t": "2026-11-20"}\n' * 3
    assert not line_guards.suspect_lines(data).any()

"""The C line scan that vets a file for pyarrow's JSON reader says what the rule says, line by line.

The rule: every line that is not blank starts with ``{`` once ASCII whitespace is skipped, none is
longer than the line cap, and a line long enough to nest too deep is checked for its nesting. The caps
are made small here so that random text reaches every branch.
"""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragspine_pipeline import inputs

LINES = st.lists(
    st.one_of(
        st.sampled_from([b"", b"  ", b"\t\r", b"{}", b' {"a": 1}', b"null", b"[1]", b"\x0b{", b" x{"]),
        st.binary(max_size=12),
        st.integers(1, 6).map(lambda depth: b"{" * depth + b"}" * depth),
        st.integers(1, 6).map(lambda depth: b"{" * depth),
        st.binary(max_size=12).map(lambda rest: b"{" + rest),
    ),
    max_size=8,
)


def rule(data: bytes) -> bool:
    for line in data.split(b"\n"):
        if len(line) > inputs.MAX_LINE_BYTES or line.lstrip()[:1] not in (b"", b"{"):
            return False
        if len(line) >= inputs.ARROW_DEPTH and not inputs.arrow_safe_line(line):
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(lines=LINES, trailing_newline=st.booleans(), pad=st.integers(0, 3))
@example(lines=[b"{{{{{{}}}}}}", b"{}"], trailing_newline=True, pad=0)
@example(lines=[b"{" + b" " * 20], trailing_newline=False, pad=1)
def test_the_line_scan_is_the_rule(lines, trailing_newline, pad):
    data = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    padded = b"x" * pad + data + b"\nnull"  # the scan reads only data[begin:end]
    with patch.object(inputs, "MAX_LINE_BYTES", 10), patch.object(inputs, "ARROW_DEPTH", 4):
        assert inputs.arrow_safe(padded, pad, pad + len(data)) == rule(data)

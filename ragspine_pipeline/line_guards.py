"""Byte-level guards on JSON Lines, cheap enough to run over every byte of a day or a file: what a
parser that reads only some fields (DuckDB over the columns a dialect uses), or reads more leniently
than Python's JSON, must not accept silently. Each is conservative: a false alarm sends the line or
the file to the record reader (``contracts.records``, ``sources.trace_lines``), which costs time and
names what it finds; a miss would let a line through that the contract refuses.

* :func:`suspect_lines`: lines that may nest deeper than ``inputs.MAX_DEPTH`` or hold a number of more
  than 4,300 digits;
* :func:`has_trailing_comma`: a comma before a closing bracket, which DuckDB's reader takes;
* :func:`plain_json_lines`: a whole file, a block at a time: no line longer than
  ``inputs.MAX_LINE_BYTES``, no suspect line, no trailing comma.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragspine_pipeline import inputs

_GUARD_BLOCK = 16 << 20
# What the guard keeps of a line: its opening brackets (as "[") and its digits (as "0"); the rest goes.
_GUARD_TABLE = bytes.maketrans(b"{0123456789", b"[0000000000")
_GUARD_DELETE = bytes(b for b in range(256) if b not in b"[{0123456789\n")
_LONGEST_NUMBER = b"0" * 4301  # Python converts integers of at most 4,300 digits


def plain_json_lines(path: str | Path) -> bool:
    """Whether no line of the file is longer than :data:`inputs.MAX_LINE_BYTES`, may nest deeper than
    :data:`inputs.MAX_DEPTH` or may hold a number of more than 4,300 digits (:func:`suspect_lines`), and none
    has a comma before a closing bracket (:data:`TRAILING_COMMA`): what a parser that skips the fields it
    does not read, or takes a trailing comma, in place of the record reader, must not accept silently
    (the record reader refuses all four, naming the line). Read a block at a time; a False sends the
    file to the record reader."""
    carried, carried_length = b"", 0  # what the last block's unfinished line kept, and its length
    after_comma = False  # the text so far ends with a comma (and whitespace)
    buffer = bytearray(_GUARD_BLOCK)  # reused: each block lands in memory already touched
    with inputs.open_regular(path) as fh:
        while read := fh.readinto(buffer):
            block = buffer if read == len(buffer) else buffer[:read]
            if has_trailing_comma(block, after_comma):
                return False
            after_comma = _ends_after_comma(block, after_comma)
            first, last = block.find(b"\n"), block.rfind(b"\n")
            if first < 0:
                carried_length += len(block)
            elif carried_length + first > inputs.MAX_LINE_BYTES or _long_line_within(block, first + 1, last):
                return False
            else:
                carried_length = len(block) - last - 1
            kept = carried + block.translate(_GUARD_TABLE, _GUARD_DELETE)
            cut = kept.rfind(b"\n") + 1
            done, carried = kept[:cut], kept[cut:]
            if carried_length > inputs.MAX_LINE_BYTES or _suspects(done).any():
                return False
    return not _suspects(carried).any()


TRAILING_COMMA = r",[ \t\r\n]*[}\]]"
"""A comma before a closing bracket (an RE2 pattern): not JSON, and Python's JSON refuses it, but DuckDB's
reader takes it. Searched for in the bytes, strings included: a false alarm sends the text to the record
reader, which refuses only a comma outside a string."""
_JSON_SPACE = b" \t\r\n"


def has_trailing_comma(data: bytes | bytearray, after_comma: bool = False) -> bool:
    """Whether ``data`` holds a comma before a closing bracket (``after_comma``: the text before it ended
    with a comma, so a closing bracket first counts too). RE2 over the bytes, outside the GIL."""
    # Imported here: most users of this module never search, and need not pay for pyarrow.
    import pyarrow as pa
    import pyarrow.compute as pc

    if after_comma:
        start = 0
        while start < len(data) and data[start] in _JSON_SPACE:
            start += 1
        if start < len(data) and data[start] in b"}]":
            return True
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int32))
    text = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(data)])
    return bool(pc.match_substring_regex(text, TRAILING_COMMA)[0].as_py())


def _ends_after_comma(data: bytes | bytearray, after_comma: bool) -> bool:
    """Whether the text ends with a comma once ``data`` is added (trailing whitespace ignored)."""
    end = len(data)
    while end > 0 and data[end - 1] in _JSON_SPACE:
        end -= 1
    return data[end - 1] == ord(",") if end else after_comma


def _long_line_within(data: bytes, begin: int, end: int) -> bool:
    """Whether a line of ``data[begin:end]`` (whole lines) is longer than :data:`inputs.MAX_LINE_BYTES`.

    Such a line covers a whole window of half the cap that holds no newline, so only windows are
    searched (a few per block), and only a window without one is measured.
    """
    window = (inputs.MAX_LINE_BYTES + 1) // 2
    for start in range(begin, end, window):
        if data.find(b"\n", start, start + window) >= 0:
            continue
        line_start = data.rfind(b"\n", 0, start) + 1
        line_end = data.find(b"\n", start)
        if (end if line_end < 0 else line_end) - line_start > inputs.MAX_LINE_BYTES:
            return True
    return False


def suspect_lines(data: bytes) -> np.ndarray:
    """For each line of ``data`` (split at ``\n``): could it nest deeper than ``inputs.MAX_DEPTH``, or
    hold a number of more than 4,300 digits?

    Conservative and cheap: each line is reduced to its opening brackets and digits (one
    ``bytes.translate`` pass); more than ``inputs.MAX_DEPTH`` opening brackets, or a run of more than
    4,300 digits once the rest is gone, makes a line suspect. Brackets and digits inside strings count too,
    so a false alarm costs time (the record reader reads the line), never correctness.
    """
    return _suspects(data.translate(_GUARD_TABLE, _GUARD_DELETE))


def _suspects(kept: bytes) -> np.ndarray:
    """:func:`suspect_lines` of lines already reduced to brackets, digits and newlines."""
    n_lines = kept.count(b"\n") + 1
    if kept.count(b"[") <= inputs.MAX_DEPTH and _LONGEST_NUMBER not in kept:
        return np.zeros(n_lines, dtype=bool)
    buf = np.frombuffer(kept, dtype=np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    opens = np.flatnonzero(buf == ord("["))
    # Between consecutive newlines (and the text's ends) lies one line each: its opening brackets.
    suspect = np.diff(np.searchsorted(opens, np.concatenate(([0], ends, [len(buf)])))) > inputs.MAX_DEPTH
    at = kept.find(_LONGEST_NUMBER)
    while at >= 0:
        line = int(np.searchsorted(ends, at))
        suspect[line] = True
        next_line = len(kept) if line >= len(ends) else int(ends[line]) + 1
        at = kept.find(_LONGEST_NUMBER, next_line)
    return suspect

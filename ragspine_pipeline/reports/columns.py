"""Building text from whole columns: JSON string literals, Markdown cells, one blob per column."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import value_bytes


def byte_set(chars: bytes) -> np.ndarray:
    """A look-up table of 256 flags for :func:`holds_any`."""
    flags = np.zeros(256, dtype=bool)
    flags[list(chars)] = True
    return flags


def holds_any(values: pa.Array, flags: np.ndarray) -> bool:
    """Whether the bytes of a string column's values include one flagged in ``flags`` (:func:`byte_set`):
    one look-up per byte, far cheaper than a regular expression per value. (It may also read the bytes
    under a null value: a caller only ever skips work on a False.)"""
    return bool(flags[value_bytes(values)].any())


# In UTF-8 every byte of a multi-byte character is at least 0x80, so a value needs escaping exactly when
# one of its bytes is one of these.
_NEEDS_ESCAPE = byte_set(b'"\\' + bytes(range(0x20)))


def json_escaped(arr: pa.Array) -> pa.Array:
    """Each value escaped for use between the quotes of a JSON string, computed on the whole column."""
    out = arr
    if holds_any(out, _NEEDS_ESCAPE):
        out = pc.replace_substring(out, "\\", "\\\\")
        out = pc.replace_substring(out, '"', '\\"')
        for code in range(0x20):
            out = pc.replace_substring(out, chr(code), f"\\u{code:04x}")
    return out


def render_states(
    columns: Sequence[pa.Array], states: Sequence[Sequence[object]], render: Callable[..., str]
) -> pa.Array:
    """Render per-row text that depends only on a few small-valued columns, by table look-up.

    ``columns[i]`` takes values in ``states[i]`` (a dictionary column: its dictionary; a boolean column:
    ``(False, True, None)``). Each combination that occurs is rendered once with ``render(*values)``;
    every row then takes its text by index, so a million rows cost one ``take``.
    """
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column, values in zip(columns, states, strict=True):
        code = code * len(values) + _state_index(column, values)
    sizes = [len(values) for values in states]
    table = [""] * math.prod(sizes)
    for combination in np.flatnonzero(np.bincount(code, minlength=len(table))):
        digits = np.unravel_index(combination, sizes)
        table[combination] = render(*(values[d] for values, d in zip(states, digits, strict=True)))
    return pa.array(table, pa.string()).take(pa.array(code))


BOOL_STATES = (False, True, None)


def _state_index(column: pa.Array, values: Sequence[object]) -> np.ndarray:
    if pa.types.is_dictionary(column.type):
        if column.dictionary.to_pylist() != list(values):
            raise ValueError("a dictionary column must list exactly the given states, in order")
        return np.asarray(column.indices, dtype=np.int64)
    truth = np.asarray(pc.fill_null(column, False), dtype=np.int64)
    return np.where(np.asarray(column.is_null()), 2, truth)


def write_column(out: TextIO, rows: pa.Array, skip: int = 0) -> None:
    """Write every value of a string column, back to back, minus the first ``skip`` bytes.

    The column's data buffer already is the concatenation, so it goes to the stream's byte layer as is:
    no Python string is built, decoded or re-encoded.
    """
    if len(rows) == 0:
        return
    data = memoryview(value_bytes(rows))[skip:]
    binary = getattr(out, "buffer", None)
    if binary is None:  # a text-only stream (e.g. io.StringIO)
        out.write(bytes(data).decode("utf-8"))
        return
    out.flush()
    binary.write(data)


class WriteBehind:
    """Writes string columns to a stream as :func:`write_column` does, each on a second thread while the
    caller renders the next: in order, one at a time, at most one column waiting. Rendering is Arrow work
    and writing is the kernel's (a 160 MB report spends 0.2–0.4 s in ``write``), so the two overlap.

    Use as a context manager: leaving it waits for the last column, and only then may the caller write
    to the stream itself. A failed write (e.g. a reader that left) is raised by the next ``write`` or on
    leaving.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._writer = ThreadPoolExecutor(max_workers=1)
        self._pending: Future | None = None

    def write(self, rows: pa.Array, skip: int = 0) -> None:
        self._wait()
        self._pending = self._writer.submit(write_column, self._out, rows, skip)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._wait()
        finally:
            self._writer.shutdown(wait=True)


def concat(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation of string columns and literals."""
    return pc.binary_join_element_wise(*parts, "")

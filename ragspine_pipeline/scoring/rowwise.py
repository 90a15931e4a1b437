"""Row-wise operations on list and string columns, vectorised over all rows at once.

Per-row questions ("is each cited id among this row's retrieved ids?", "does this row's claim contain
each of its gold substrings?") are answered on the flattened values: each needle names its row's
haystack, one kernel call answers every needle, and the answers are folded back per row with
``np.bincount``. Cost is proportional to the needles and their haystacks, with no Python loop over rows.
An optional row mask restricts the work to the rows whose answer matters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import _kernels
from ragspine_pipeline.columnar import flat, lists_from_rows, one_array

_STRING, _LIST = pa.string(), pa.list_(pa.string())
_ALL_ITEMS = 1 << 62


def member_of_row(
    needles: pa.Array,
    haystacks: pa.Array | pa.ChunkedArray | Chunks,
    rows: np.ndarray | None = None,
    haystack_rows: np.ndarray | None = None,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each value of list column ``needles``: does it occur in the haystack list of its row (among
    the first ``limit`` items when given)?

    Returns ``(found, row)`` aligned with the flattened needles (of the rows selected by the optional
    boolean mask ``rows``). The haystack of needle row ``r`` is ``haystacks[r]``, or with
    ``haystack_rows`` ``haystacks[haystack_rows[r]]`` (negative: none), so a column need not be gathered
    into the needles' order first. A null haystack row is empty; a null needle or item equals nothing.
    """
    needle_values, needle_rows = flat(needles, rows)
    at = needle_rows if haystack_rows is None else haystack_rows[needle_rows]
    limit = _ALL_ITEMS if limit is None else limit
    found = _kernel(_kernels.member, needle_values, haystacks, at, _LIST, limit)
    return found, needle_rows


def codes(first: pa.Array, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The code of each key, numbering distinct strings: ``first`` (distinct strings) are codes 0 to
    ``len(first) - 1`` in order, a key in none of them gets the next code at its first occurrence."""
    first = one_array(first).cast(_STRING)
    keys = Chunks.strings(keys)
    if not keys.valid[:-1].all():
        raise ValueError("a key is null")
    out = np.empty(len(keys.valid) - 1, dtype=np.int64)
    offsets, data = first.buffers()[1:3]
    lengths = np.diff(keys.starts)
    _kernels.codes(_address(offsets), _address(data), first.offset, len(first), keys.addresses, lengths, out)
    return out


def all_per_row(flags: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per row: every flag is true (vacuously true for a row with no values)."""
    return np.bincount(rows, weights=~flags, minlength=n) == 0


def any_per_row(flags: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per row: at least one flag is true (false for a row with no values)."""
    return np.bincount(rows, weights=flags, minlength=n) > 0


def count_per_row(rows: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(rows, minlength=n)


def contains_pairs(
    haystacks: pa.Array | pa.ChunkedArray | Chunks, needles: pa.Array | pa.ChunkedArray, rows: np.ndarray
) -> np.ndarray:
    """For each needle ``i``: is it a substring of ``haystacks[rows[i]]``? A negative row has no
    haystack (the needle is not found); a null is in nothing and contains nothing; the empty string is
    in every string."""
    return _kernel(_kernels.contains, needles, haystacks, rows, _STRING)


# Arrow has no compute function for "needle in this row's string" or "needle among this row's list
# items": the C kernels of ``ragspine_pipeline._kernels`` answer both from the Arrow buffers, in place
# (no Python strings, and a chunked haystack column is neither joined nor gathered into the needles'
# order).


@dataclass(frozen=True, eq=False)
class Chunks:
    """A string or list-of-strings column as the kernels read it, prepared once for any number of calls:
    the addresses of each chunk's buffers, the chunk of every row, and which rows are null.

    A string chunk's addresses are (offsets, data, offset, validity); a list chunk's are (list offsets,
    list offset, item offsets, item data, item offset, item validity). ``arrays`` keeps them alive.
    """

    arrays: tuple[pa.Array, ...]
    addresses: np.ndarray  # int64, one row per chunk
    starts: np.ndarray  # the first row of each chunk, then the number of rows
    chunk_of: np.ndarray  # int32 per row
    valid: np.ndarray  # per row, then False for "no row" (-1)

    @classmethod
    def of(cls, column: pa.Array | pa.ChunkedArray | Chunks, type_: pa.DataType = _STRING) -> Chunks:
        if isinstance(column, Chunks):
            return column
        arrays = tuple(c.cast(type_) if c.type != type_ else c for c in _chunks(column) if len(c))
        lengths = np.array([len(c) for c in arrays], dtype=np.int64)
        addresses = [_string_addresses(c) if type_ == _STRING else _list_addresses(c) for c in arrays]
        return cls(
            arrays=arrays,
            addresses=np.array(addresses, dtype=np.int64).reshape(len(arrays), 4 if type_ == _STRING else 6),
            starts=np.concatenate([[0], np.cumsum(lengths)]),
            chunk_of=np.repeat(np.arange(len(arrays), dtype=np.int32), lengths),
            valid=np.concatenate([np.asarray(c.is_valid(), dtype=bool) for c in arrays] + [[False]]),
        )

    @classmethod
    def strings(cls, column: pa.Array | pa.ChunkedArray) -> Chunks:
        return cls.of(column, _STRING)

    @classmethod
    def lists(cls, column: pa.Array | pa.ChunkedArray) -> Chunks:
        return cls.of(column, _LIST)

    def locate(self, rows: np.ndarray, needles: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(chunk, row within the chunk)`` of each row; -1 for a negative or null row or a null needle."""
        rows = np.where(rows < 0, len(self.valid) - 1, rows)
        rows = np.where(self.valid[rows] & np.asarray(needles.is_valid(), dtype=bool), rows, -1)
        chunk = np.where(rows < 0, 0, self.chunk_of[rows]).astype(np.int64)
        return chunk, np.where(rows < 0, -1, rows - self.starts[chunk])


def _kernel(
    kernel, needles: pa.Array | pa.ChunkedArray, haystacks, rows: np.ndarray, type_, *options
) -> np.ndarray:
    found = np.zeros(len(needles), dtype=np.uint8)
    haystacks = Chunks.of(haystacks, type_)
    if len(needles) == 0 or not haystacks.arrays:
        return found.astype(bool)
    needles = one_array(needles).cast(_STRING)
    chunk, local = haystacks.locate(np.asarray(rows, dtype=np.int64), needles)
    offsets, data = needles.buffers()[1:3]
    needle_args = (offsets.address, _address(data), needles.offset)
    kernel(*needle_args, haystacks.addresses, chunk, local, *options, found)
    return found.astype(bool)


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return column.chunks if isinstance(column, pa.ChunkedArray) else [column]


def _string_addresses(chunk: pa.Array) -> list[int]:
    validity, offsets, data = chunk.buffers()
    return [offsets.address, _address(data), chunk.offset, _address(validity)]


def _list_addresses(chunk: pa.Array) -> list[int]:
    _, offsets, item_valid, item_offsets, item_data = chunk.buffers()
    return [
        offsets.address,
        chunk.offset,
        item_offsets.address,
        _address(item_data),
        chunk.values.offset,
        _address(item_valid),
    ]


def _address(buffer: pa.Buffer | None) -> int:
    return 0 if buffer is None else buffer.address


def split_text(
    lower: pa.Array,
    split_ascii: Callable[[pa.Array], tuple[pa.Array, np.ndarray]],
    split_other: Callable[[pa.Array], tuple[pa.Array, np.ndarray]],
) -> tuple[pa.Array, np.ndarray]:
    """The pieces of every lower-cased text, flat and in row order, with the row of each: a text that is
    ASCII is split by ``split_ascii`` (over its bytes), the others by ``split_other`` (a regex). Both
    return ``(pieces, row)`` for the texts they are given; a null text has no piece."""
    lower = pc.fill_null(lower, "")
    ascii_rows = np.asarray(pc.string_is_ascii(lower), dtype=bool)
    if ascii_rows.all():
        return split_ascii(lower)
    values, rows = split_ascii(lower.filter(pa.array(ascii_rows)))
    others, other_rows = split_other(lower.filter(pa.array(~ascii_rows)))
    rows = np.concatenate([np.flatnonzero(ascii_rows)[rows], np.flatnonzero(~ascii_rows)[other_rows]])
    order = np.argsort(rows, kind="stable")
    return pa.concat_arrays([values, others.cast(pa.string())]).take(pa.array(order)), rows[order]


def ascii_phrases(text: pa.Array, min_chars: int) -> tuple[pa.Array, np.ndarray]:
    """The phrases of every ASCII string (a null has none), flat and in row order, with the row of each:
    the maximal runs of letters, digits, hyphens and whitespace (space and tab to carriage return), each
    from its first letter or digit to its last byte that is not whitespace, of at least ``min_chars``."""
    text = pc.fill_null(one_array(text).cast(_STRING), "")
    if len(text) == 0:
        return pa.array([], _STRING), np.zeros(0, dtype=np.int64)
    _, offsets, data = text.buffers()
    bounds = np.frombuffer(offsets, np.int32, len(text) + 1, 4 * text.offset)
    n_bytes = int(bounds[-1] - bounds[0])
    most = n_bytes // (min_chars + 1) + len(text)  # a phrase ends its text or a byte follows it
    out_offsets, out_data = np.zeros(most + 1, np.int32), np.empty(n_bytes, np.uint8)
    out_rows = np.empty(most, np.int64)
    count = _kernels.phrases(
        offsets.address, _address(data), text.offset, len(text), min_chars, out_offsets, out_data, out_rows
    )
    values = pa.StringArray.from_buffers(
        count, pa.py_buffer(out_offsets[: count + 1]), pa.py_buffer(out_data)
    )
    return values, out_rows[:count]


_TOKEN_BREAK = r"[^\p{L}\p{N}_]+"  # a word token: letters, digits and underscores


def word_tokens(text: pa.Array) -> pa.Array:
    """Word tokens of lower-cased text, as a list column (empty strings dropped)."""
    pieces = pc.split_pattern_regex(pc.utf8_lower(text), _TOKEN_BREAK)
    values, rows = flat(pieces)
    keep = np.asarray(pc.greater(pc.utf8_length(values), 0))
    return lists_from_rows(values.filter(pa.array(keep)), rows[keep], len(text))

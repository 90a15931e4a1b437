"""The moves every row-wise computation makes: flatten a list column and rebuild one, and read a string
column's bytes in place.

Kept below ``contracts``, ``scoring`` and ``reports`` so that all can use them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def one_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array: its only chunk as it is (no copy), else its chunks concatenated."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def value_bytes(values: pa.Array) -> np.ndarray:
    """The bytes of a string column's values, back to back, as its data buffer holds them (no copy)."""
    values = values.cast(pa.string())
    _, offset_buffer, data_buffer = values.buffers()
    if len(values) == 0 or data_buffer is None:
        return np.zeros(0, dtype=np.uint8)
    offsets = np.frombuffer(offset_buffer, dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    return np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]


def flat(lists: pa.Array, rows: np.ndarray | None = None) -> tuple[pa.Array, np.ndarray]:
    """The values of a list column and, for each value, the index of its row. Null rows have none.

    With a boolean ``rows`` mask, only the values of the selected rows are returned.
    """
    values, parents = pc.list_flatten(lists), np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
    if rows is None:
        return values, parents
    keep = rows[parents]
    return values.filter(pa.array(keep)), parents[keep]


def lists_from_rows(
    values: pa.Array, rows: np.ndarray, n: int, null_rows: pa.Array | None = None
) -> pa.Array:
    """A list column of ``n`` rows from flat ``values`` and their row index (sorted by row).

    Rows with no value get an empty list, or null where ``null_rows`` is true.
    """
    return pa.ListArray.from_arrays(pa.array(offsets_of(rows, n)), values, mask=null_rows)


def offsets_of(rows: np.ndarray, n: int) -> np.ndarray:
    """List offsets for ``n`` rows from the (sorted) row index of every value."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return offsets


def empty_lists(n: int) -> pa.Array:
    """``n`` empty lists of strings."""
    return lists_from_rows(pa.array([], pa.string()), np.zeros(0, dtype=np.int64), n)


def distinct(lists: pa.Array, drop_nulls: bool = False) -> pa.Array:
    """Each row's list without repeats (and without null items if asked), in order of first occurrence.

    Null rows stay null.
    """
    values, rows = flat(lists)
    if drop_nulls:
        valid = np.asarray(values.is_valid())
        values, rows = values.filter(pa.array(valid)), rows[valid]
    if len(values) == 0:
        return lists_from_rows(values.cast(pa.string()), rows, len(lists), lists.is_null())
    firsts = (
        pa.table({"row": rows, "value": values.cast(pa.string()), "position": np.arange(len(values))})
        .group_by(["row", "value"], use_threads=False)
        .aggregate([("position", "min")])
        .sort_by("position_min")
    )
    keep = np.asarray(firsts.column("position_min"))
    return lists_from_rows(
        values.take(pa.array(keep)).cast(pa.string()), rows[keep], len(lists), lists.is_null()
    )

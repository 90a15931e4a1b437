"""Row-wise operations on list and string columns, vectorised over all rows at once.

Per-row set questions ("is each cited id among this row's retrieved ids?") are answered on the
flattened values: every needle is paired with every haystack item of its row, the pairs are compared
in one Arrow kernel call, and the answers are folded back per needle and per row with
``np.bincount``. Cost is proportional to the number of pairs, with no Python loop over rows. An
optional row mask restricts the work to the rows whose answer matters; the haystack of a row may be
another table's row (a case searched in its trace's lists), found through an index.

Substrings are searched by polars' native kernel: Arrow has no "needle in haystack" kernel with a
needle per row, and polars reads the Arrow buffers as they are (no Python strings). (Comparing ids
as 64-bit polars hashes was tried: faster per pair, but polars' view of 5 million ids and its hash
table cost 125 MB more at the peak than the pairs compared here, chunk by chunk.)
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import flat, lists_from_rows


class Lists:
    """A list column prepared for membership tests: its row starts and lengths (0 for a null row) and
    its values, each worked out once however often the column is searched.

    A column read in blocks may come in blocks: the offsets are made absolute over the blocks' values.
    """

    def __init__(self, lists: pa.Array | pa.ChunkedArray):
        if isinstance(lists, pa.Array):
            lists = pa.chunked_array([lists])
        self.chunks = [chunk for chunk in lists.chunks if len(chunk)] or [pa.array([], lists.type)]

    @classmethod
    def of(cls, lists: pa.Array | pa.ChunkedArray | Lists) -> Lists:
        return lists if isinstance(lists, Lists) else cls(lists)

    @cached_property
    def _parts(self) -> tuple[np.ndarray, np.ndarray, pa.Array]:
        """Row lengths, absolute row starts in :attr:`values`, and the values of every block."""
        lengths, starts, values = [], [], []
        base = 0
        for chunk in self.chunks:
            offsets = np.asarray(chunk.offsets, dtype=np.int64)
            first, last = int(offsets[0]), int(offsets[-1])
            lengths.append(np.where(np.asarray(chunk.is_valid()), np.diff(offsets), 0))
            starts.append(offsets[:-1] - first + base)
            values.append(chunk.values.slice(first, last - first))
            base += last - first
        # The values are searched at scattered positions, which a chunked array answers by concatenating
        # itself for every search: they are put together once.
        return np.concatenate(lengths), np.concatenate(starts), pa.concat_arrays(values)

    @property
    def value_type(self) -> pa.DataType:
        return self.chunks[0].type.value_type

    @property
    def lengths(self) -> np.ndarray:
        return self._parts[0]

    @property
    def starts(self) -> np.ndarray:
        return self._parts[1]

    @property
    def values(self) -> pa.Array:
        return self._parts[2]

    @cached_property
    def _parents(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.lengths)), self.lengths)

    def flat(self, rows: np.ndarray | None = None) -> tuple[pa.Array, np.ndarray]:
        """:func:`columnar.flat` of the column: its values and the row of each (of the rows selected by
        the boolean mask ``rows``)."""
        parents = self._parents
        if rows is None:
            return self.values, parents
        keep = rows[parents]
        return self.values.filter(pa.array(keep)), parents[keep]


def member_of_row(
    needles: pa.Array | Lists,
    haystacks: pa.Array | Lists,
    rows: np.ndarray | None = None,
    *,
    haystack_rows: np.ndarray | None = None,
    first: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each value of list column ``needles``: does it occur in its row's list of ``haystacks``?

    Returns ``(found, row)`` aligned with the flattened needles (of the rows selected by the optional
    boolean mask ``rows``). A null haystack row is empty. Row ``i`` of the needles is searched in row
    ``haystack_rows[i]`` of the haystacks (by default row ``i``; a negative row is an empty list), and
    only in its ``first`` items when given.
    """
    needle_values, needle_rows = needles.flat(rows) if isinstance(needles, Lists) else flat(needles, rows)
    found = np.zeros(len(needle_values), dtype=bool)
    if len(needle_values) == 0:
        return found, needle_rows
    hay = Lists.of(haystacks)
    at = needle_rows if haystack_rows is None else haystack_rows[needle_rows]
    at = np.where(at >= 0, at, len(hay.lengths))  # a negative row reads the empty row after the last
    lengths = np.append(hay.lengths if first is None else np.minimum(hay.lengths, first), 0)
    counts, starts = lengths[at], np.append(hay.starts, 0)[at]
    total = int(counts.sum())
    if total == 0:
        return found, needle_rows
    pair_needle = np.repeat(np.arange(len(needle_values)), counts)
    first_pair = np.cumsum(counts) - counts
    pair_item = np.arange(total) - np.repeat(first_pair - starts, counts)
    same = equal_pairs(needle_values, hay.values, pair_needle, pair_item)
    found[pair_needle[same]] = True
    return found, needle_rows


def equal_pairs(left: pa.Array, right: pa.Array, left_at: np.ndarray, right_at: np.ndarray) -> np.ndarray:
    """For each pair ``i``: ``left[left_at[i]] == right[right_at[i]]`` (a null equals nothing)."""
    if len(left_at) == 0:
        return np.zeros(0, dtype=bool)
    same = pc.equal(left.take(pa.array(left_at)), right.take(pa.array(right_at)))
    return np.asarray(pc.fill_null(same, False), dtype=bool)


def all_found(needles: pa.Array, haystacks: pa.Array, n: int) -> np.ndarray:
    """Per row: every needle of the row is in its haystack (vacuously true without needles)."""
    found, rows = member_of_row(needles, haystacks)
    return all_per_row(found, rows, n)


def share_found(needles: pa.Array, haystacks: pa.Array, n_needles: np.ndarray, n: int) -> np.ndarray:
    """Per row: share of the row's needles found in its haystack (0 where there is no needle)."""
    found, rows = member_of_row(needles, haystacks)
    hits = np.bincount(rows, weights=found, minlength=n)
    return np.divide(hits, n_needles, out=np.zeros(n), where=n_needles > 0)


def all_per_row(flags: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per row: every flag is true (vacuously true for a row with no values)."""
    return np.bincount(rows, weights=~flags, minlength=n) == 0


def any_per_row(flags: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per row: at least one flag is true (false for a row with no values)."""
    return np.bincount(rows, weights=flags, minlength=n) > 0


def count_per_row(rows: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(rows, minlength=n)


def contains_pairs(haystacks: pa.Array, needles: pa.Array, rows: np.ndarray) -> np.ndarray:
    """For each needle ``i``: is it a substring of ``haystacks[rows[i]]``? A negative row has no
    haystack (the needle is not found); a null is in nothing and contains nothing; the empty string is
    in every string."""
    if len(needles) == 0:
        return np.zeros(0, dtype=bool)
    absent = rows < 0
    if absent.all():
        return np.zeros(len(needles), dtype=bool)
    taken = haystacks.take(pa.array(np.where(absent, 0, rows), mask=absent if absent.any() else None))
    pairs = pl.DataFrame(
        {
            "haystack": pl.Series(values=taken.cast(pa.string())),
            "needle": pl.Series(values=needles.cast(pa.string())),
        }
    )
    found = pairs.select(pl.col("haystack").str.contains(pl.col("needle"), literal=True))
    return found.to_series().fill_null(False).to_numpy()


_TOKEN_BREAK = r"[^\p{L}\p{N}_]+"  # a word token: letters, digits and underscores


def word_tokens(text: pa.Array) -> pa.Array:
    """Word tokens of lower-cased text, as a list column (empty strings dropped)."""
    pieces = pc.split_pattern_regex(pc.utf8_lower(text), _TOKEN_BREAK)
    values, rows = flat(pieces)
    keep = np.asarray(pc.greater(pc.utf8_length(values), 0))
    return lists_from_rows(values.filter(pa.array(keep)), rows[keep], len(text))

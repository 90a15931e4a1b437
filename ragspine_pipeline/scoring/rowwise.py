"""Row-wise operations on list and string columns, vectorised over all rows at once.

Per-row set questions ("is each cited id among this row's retrieved ids?") are answered on the
flattened values: every needle is paired with every haystack item of its own row, the pairs are
compared in one Arrow kernel call, and the answers are folded back per needle and per row with
``np.bincount``. Cost is proportional to the number of pairs, with no Python loop over rows.
An optional row mask restricts the work to the rows whose answer matters.
"""

from __future__ import annotations

import operator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import flat, lists_from_rows

# Element-wise `needle in haystack` over object arrays: numpy drives the loop in C.
_CONTAINS = np.frompyfunc(operator.contains, 2, 1)


def member_of_row(
    needles: pa.Array, haystacks: pa.Array, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """For each value of list column ``needles``: does it occur in the same row of ``haystacks``?

    Returns ``(found, row)`` aligned with the flattened needles (of the rows selected by the optional
    boolean mask ``rows``). A null haystack row is empty.
    """
    needle_values, needle_rows = flat(needles, rows)
    found = np.zeros(len(needle_values), dtype=bool)
    if len(needle_values) == 0:
        return found, needle_rows
    offsets = np.asarray(haystacks.offsets, dtype=np.int64)  # absolute positions in .values, even if sliced
    lengths = np.where(np.asarray(haystacks.is_valid()), np.diff(offsets), 0)
    starts, counts = offsets[:-1][needle_rows], lengths[needle_rows]
    total = int(counts.sum())
    if total == 0:
        return found, needle_rows
    pair_needle = np.repeat(np.arange(len(needle_values)), counts)
    first_pair = np.cumsum(counts) - counts
    pair_item = np.arange(total) - np.repeat(first_pair - starts, counts)
    equal = pc.equal(needle_values.take(pair_needle), haystacks.values.take(pair_item))
    found[pair_needle[np.asarray(equal)]] = True
    return found, needle_rows


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
    in every string.

    Arrow has no element-wise "needle in haystack" kernel: the haystacks some needle is tested in are
    converted to Python strings once each (the expensive step) and the pairs tested with numpy driving
    the loop in C.
    """
    found = np.zeros(len(needles), dtype=bool)
    if len(needles) == 0 or len(haystacks) == 0:
        return found
    has_haystack = np.append(np.asarray(haystacks.is_valid(), dtype=bool), False)
    at = np.where(rows < 0, -1, rows)
    tested = np.flatnonzero(has_haystack[at] & np.asarray(needles.is_valid(), dtype=bool))
    used = np.zeros(len(haystacks), dtype=bool)
    used[rows[tested]] = True
    texts = np.full(len(haystacks), None, dtype=object)
    texts[used] = haystacks.filter(pa.array(used)).to_numpy(zero_copy_only=False)
    words = needles.take(pa.array(tested)).to_numpy(zero_copy_only=False)
    found[tested] = _CONTAINS(texts[rows[tested]], words).astype(bool)
    return found


_TOKEN_BREAK = r"[^\p{L}\p{N}_]+"  # a word token: letters, digits and underscores


def word_tokens(text: pa.Array) -> pa.Array:
    """Word tokens of lower-cased text, as a list column (empty strings dropped)."""
    pieces = pc.split_pattern_regex(pc.utf8_lower(text), _TOKEN_BREAK)
    values, rows = flat(pieces)
    keep = np.asarray(pc.greater(pc.utf8_length(values), 0))
    return lists_from_rows(values.filter(pa.array(keep)), rows[keep], len(text))

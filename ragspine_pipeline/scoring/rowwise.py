"""Row-wise operations on list and string columns, vectorised over all rows at once.

Per-row questions ("is each cited id among this row's retrieved ids?", "does this row's claim contain
each of its gold substrings?") are answered on the flattened values: each needle names its row's
haystack, one DuckDB expression answers every needle (``contains``, ``list_contains``), and the answers
are folded back per row with ``np.bincount``. Cost is proportional to the needles and their haystacks,
with no Python loop over rows. An optional row mask restricts the work to the rows whose answer matters.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import duck
from ragspine_pipeline.columnar import flat, lists_from_rows, one_array

_STRING, _LIST = pa.string(), pa.list_(pa.string())

ALL_IN = "coalesce(list_bool_and([coalesce(list_contains({1}, x), false) FOR x IN {0}]), true)"
"""SQL (``.format(needles, haystack)`` with two list columns): every item of the row's needle list is an
item of its haystack list (true for no needle; a null needle, item or haystack equals nothing)."""
ANY_IN = "coalesce(list_bool_or([coalesce(list_contains({1}, x), false) FOR x IN {0}]), false)"
"""SQL: some item of the row's needle list is an item of its haystack list (false for no needle)."""


def all_in(needles: pa.Array | pa.ChunkedArray, haystacks: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row of two list columns: every needle of the row is in the row's haystack (:data:`ALL_IN`)."""
    return _per_row(ALL_IN, needles, haystacks)


def any_in(needles: pa.Array | pa.ChunkedArray, haystacks: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row of two list columns: some needle of the row is in the row's haystack (:data:`ANY_IN`)."""
    return _per_row(ANY_IN, needles, haystacks)


def _per_row(test: str, needles, haystacks) -> np.ndarray:
    rows = pa.table({"needles": needles, "haystacks": haystacks})
    return np.asarray(
        duck.column(f"SELECT {test.format('needles', 'haystacks')} FROM rows", rows=rows), dtype=bool
    )


def all_per_row(flags: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per row: every flag is true (vacuously true for a row with no values)."""
    return np.bincount(rows, weights=~flags, minlength=n) == 0


def any_per_row(flags: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per row: at least one flag is true (false for a row with no values)."""
    out = np.zeros(n, dtype=bool)
    out[rows[flags]] = True
    return out


def contains_pairs(
    haystacks: pa.Array | pa.ChunkedArray, needles: pa.Array | pa.ChunkedArray, rows: np.ndarray
) -> np.ndarray:
    """For each needle ``i``: is it a substring of ``haystacks[rows[i]]``? A negative row has no
    haystack (the needle is not found); a null is in nothing and contains nothing; the empty string is
    in every string."""
    return _per_needle("contains(hay, needle)", needles, haystacks, rows, _STRING)


def _per_needle(
    test: str,
    needles: pa.Array | pa.ChunkedArray,
    haystacks: pa.Array | pa.ChunkedArray,
    rows: np.ndarray,
    type_: pa.DataType,
) -> np.ndarray:
    """``test`` (SQL over ``needle`` and ``hay``) for each needle and the haystack of its row; false
    where it is null (a null needle, haystack or item, or no haystack: a negative row)."""
    if len(needles) == 0:
        return np.zeros(0, dtype=bool)
    rows = np.asarray(rows, dtype=np.int64)
    hay = one_array(haystacks).cast(type_).take(pa.array(rows, mask=rows < 0))
    pairs = pa.table({"needle": one_array(needles).cast(_STRING), "hay": hay})
    found = duck.column(f"SELECT coalesce({test}, false) FROM pairs", pairs=pairs)
    return np.asarray(found, dtype=bool)


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


def lower(text: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Every string lower-cased as Python's ``str.lower()`` lower-cases it, nulls kept, chunk by chunk.

    Python applies the full Unicode case mapping, in context: a capital sigma that ends a word becomes
    ``ς`` (``ΣΊΣΥΦΟΣ`` → ``σίσυφος``) and ``İ`` becomes ``i`` followed by a combining dot (two code
    points), where Arrow's and DuckDB's ``lower`` map one code point to one (``σίσυφοσ``, ``i``). Scoring
    lower-cases with this function wherever it compares without case (the refusal token, gold snippets,
    support phrases, word tokens); configured refusal phrases are case-folded instead
    (``scoring.refusal``).

    An ASCII string is lower-cased by Arrow (only ``A``–``Z`` change, as in Python); the distinct values
    of the other strings are lower-cased by Python, each once.
    """
    if isinstance(text, pa.ChunkedArray):
        return pa.chunked_array([_lower(chunk) for chunk in text.chunks], text.type)
    return _lower(text)


def _lower(text: pa.Array) -> pa.Array:
    other = pc.fill_null(pc.invert(pc.string_is_ascii(text)), False)
    lowered = pc.ascii_lower(text)
    if not pc.any(other).as_py():
        return lowered
    encoded = pc.dictionary_encode(text.filter(other))
    dictionary = pa.array([value.lower() for value in encoded.dictionary.to_pylist()], text.type)
    return pc.replace_with_mask(lowered, other, dictionary.take(encoded.indices))


_TOKEN_BREAK = r"[^\p{L}\p{N}_]+"  # a word token: letters, digits and underscores


def word_tokens(text: pa.Array) -> pa.Array:
    """Word tokens of the text lower-cased (:func:`lower`), as a list column (:func:`split_words`)."""
    return split_words(lower(text))


def split_words(lower_text: pa.Array) -> pa.Array:
    """Word tokens of text already lower-cased, as a list column: its runs of letters, digits and
    underscores (empty strings dropped)."""
    pieces = pc.split_pattern_regex(lower_text, _TOKEN_BREAK)
    values, rows = flat(pieces)
    keep = np.asarray(pc.greater(pc.utf8_length(values), 0))
    return lists_from_rows(values.filter(pa.array(keep)), rows[keep], len(lower_text))

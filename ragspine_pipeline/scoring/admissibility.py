"""Admissibility: is every piece of evidence on the retrieval path allowed, known and current?

Forbidden evidence is never acceptable: restricted, stale or unknown evidence anywhere in the retrieval
path fails admissibility, whatever its relevance. Each rule is evaluated over all cases at once and
reported by name (see ``scoring.layered`` for the list and the exact conditions).

Per-row set questions (repeats within a list, one list's ids among another's) are asked of integer codes:
each chunk id is coded once (its registry position, or a number past the registry for an unknown id), and
row ``r``'s value with code ``c`` becomes the key ``r * width + c``. Sorted, the keys of a list column
answer "does a value repeat within its row?" by comparing neighbours, and "is this value in its row of
another column?" by a binary search: exact (codes are equal exactly when the strings are), each id
looked up once, and no Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import flat, lists_from_rows, value_bytes
from ragspine_pipeline.scoring import rowwise

ADMISSIBILITY_RULES = (
    "missing_trace",
    "empty_selection",
    "version_count",
    "duplicate_id",
    "missing_version",
    "repeated_version",
    "unknown_chunk",
    "rerank_input_not_in_first_stage",
    "reranked_not_rerank_input",
    "selected_not_reranked",
    "wrong_version",
    "restricted",
    "stale",
)
STAGE_COLUMNS = ("first", "rerank_in", "reranked", "selected")
RESTRICTED, STALE, UNKNOWN = 1, 2, 4  # Registry.problems


class Registry:
    """The evidence registry, looked up by chunk id."""

    def __init__(self, evidence: pa.Table):
        self.chunk_id = evidence.column("chunk_id").combine_chunks()
        self.version = evidence.column("version").combine_chunks()
        self.permitted = np.asarray(evidence.column("permitted").combine_chunks(), dtype=bool)
        self.current = np.asarray(evidence.column("current").combine_chunks(), dtype=bool)
        self.text = rowwise.lower(evidence.column("text").combine_chunks())
        self._indexing_tokens: Future | None = None

    def __len__(self) -> int:
        return len(self.chunk_id)

    def index_tokens_on(self, executor: Executor) -> None:
        """Index the chunk texts' word tokens on ``executor`` from now on (else it happens on first use)."""
        self._indexing_tokens = executor.submit(self._index_tokens)

    @cached_property
    def _token_index(self) -> tuple[pa.Array, int, np.ndarray]:
        return self._index_tokens() if self._indexing_tokens is None else self._indexing_tokens.result()

    def _index_tokens(self) -> tuple[pa.Array, int, np.ndarray]:
        values, rows = lowered_word_tokens(self.text)  # the text is lower-cased already
        encoded = pc.dictionary_encode(values)
        vocabulary = encoded.dictionary
        width = len(vocabulary) + 1
        keys = np.sort(rows * width + np.asarray(encoded.indices, dtype=np.int64), kind="stable")
        distinct = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
        return vocabulary, width, distinct  # sorted

    @property
    def vocabulary(self) -> pa.Array:
        """Every word token of every chunk text, once."""
        return self._token_index[0]

    @property
    def token_key_width(self) -> int:
        """One more than the largest token code: the code ``width - 1`` is no token of any chunk."""
        return self._token_index[1]

    def has_tokens(self, keys: np.ndarray) -> np.ndarray:
        """For each ``chunk position * token_key_width + token code``: is that token one of the chunk's?"""
        distinct = self._token_index[2]
        if len(distinct) == 0:
            return np.zeros(len(keys), dtype=bool)
        at = np.minimum(np.searchsorted(distinct, keys), len(distinct) - 1)
        return distinct[at] == keys

    @cached_property
    def problems(self) -> np.ndarray:
        """What is wrong with the chunk at each registry position (:data:`RESTRICTED`, :data:`STALE`), and
        last, at position -1, with an unknown id (:data:`UNKNOWN`): bit flags."""
        flags = np.where(self.permitted, 0, RESTRICTED) | np.where(self.current, 0, STALE)
        return np.append(flags, UNKNOWN).astype(np.uint8)

    def index(self, ids: pa.Array) -> np.ndarray:
        """Registry position of each id, -1 when the id is unknown."""
        found = pc.index_in(ids, value_set=self.chunk_id)
        return np.asarray(pc.fill_null(found, -1), dtype=np.int64)


def word_tokens(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The word tokens of every text lower-cased (``rowwise.lower``, Python's ``str.lower()``), flat and
    in row order: each token and the index of its row. A null text has none (``rowwise.word_tokens``).

    A text that is ASCII once lower-cased is split by its bytes, where the letters and digits are
    ``A-Z``, ``a-z`` and ``0-9``; the others by ``rowwise.word_tokens``.
    """
    return lowered_word_tokens(rowwise.lower(pc.fill_null(text.cast(pa.string()), "")))


def lowered_word_tokens(lower_text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """:func:`word_tokens` of text already lower-cased (``rowwise.lower``)."""
    return rowwise.split_text(lower_text, _ascii_word_tokens, _regex_word_tokens)


def _ascii_word_tokens(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """:func:`word_tokens` of non-null ASCII strings, found in their bytes: the maximal runs of word bytes
    (:func:`_word_bytes`) within each string."""
    n = len(text)
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * text.offset)
    offsets = offsets.astype(np.int64)
    data = value_bytes(text)
    offsets -= offsets[0]
    word = _word_bytes(data)
    # Runs of word and non-word bytes, cut also where a string starts: the word runs are the tokens.
    cut = np.ones(len(data) + 1, dtype=bool)
    np.not_equal(word[1:], word[:-1], out=cut[1:-1])
    cut[offsets] = True
    bounds = np.flatnonzero(cut)
    token = word[bounds[:-1]]
    starts, ends = bounds[:-1][token], bounds[1:][token]
    token_offsets = np.zeros(len(starts) + 1, dtype=np.int32)
    np.cumsum(ends - starts, out=token_offsets[1:])
    tokens = pa.StringArray.from_buffers(
        len(starts), pa.py_buffer(token_offsets), pa.py_buffer(np.ascontiguousarray(data[word]))
    )
    per_row = np.diff(np.searchsorted(starts, offsets))
    return tokens, np.repeat(np.arange(n), per_row)


def _regex_word_tokens(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    return rowwise.flat(rowwise.split_words(text))


def _word_bytes(data: np.ndarray) -> np.ndarray:
    """For each ASCII byte: is it a letter, a digit or the underscore? (``|`` 32 lower-cases a letter.)"""
    digit = (data - np.uint8(ord("0"))) < 10  # below "0", the difference wraps around past 10
    letter = ((data | np.uint8(32)) - np.uint8(ord("a"))) < 26
    return digit | letter | (data == ord("_"))


class CodedLists:
    """A list column of ``n`` rows whose values are integer codes: equal values, equal codes; a null value
    has its own code, ``width - 1``. Holds the row of every value and its code (in the column's order), and
    the sorted row keys ``row * width + code`` on which per-row set questions are asked."""

    def __init__(self, n: int, rows: np.ndarray, codes: np.ndarray, width: int):
        self.n, self.rows, self.codes, self.width = n, rows, codes, width

    @property
    def null_code(self) -> int:
        return self.width - 1

    @cached_property
    def lengths(self) -> np.ndarray:
        """Per row, the number of values (0 for a null list)."""
        return np.bincount(self.rows, minlength=self.n)

    @cached_property
    def keys(self) -> np.ndarray:
        """``row * width + code`` for every value, sorted (values come grouped by row: nearly sorted)."""
        return np.sort(self.rows * self.width + self.codes, kind="stable")

    @cached_property
    def distinct_keys(self) -> np.ndarray:
        """:attr:`keys` without repeats: each row's distinct values."""
        keys = self.keys
        return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys

    @cached_property
    def has_nulls(self) -> bool:
        return bool(np.any(self.codes == self.null_code))

    @cached_property
    def repeats(self) -> np.ndarray:
        """Per row: some value occurs twice in the row's list (nulls are no value that could repeat)."""
        keys = self.keys
        repeated = keys[1:][keys[1:] == keys[:-1]]
        if self.has_nulls:
            repeated = repeated[repeated % self.width != self.null_code]
        out = np.zeros(self.n, dtype=bool)
        out[repeated // self.width] = True
        return out

    def distinct_counts(self) -> np.ndarray:
        """Per row: the number of distinct values (a null counts as one value)."""
        return np.bincount(self.distinct_keys // self.width, minlength=self.n)

    def found_in(self, other: CodedLists) -> np.ndarray:
        """For each of :attr:`distinct_keys`: is that value in the same row of ``other`` (coded alike)? A
        null is in nothing."""
        needles = self.distinct_keys
        if other is self or np.array_equal(needles, other.distinct_keys):  # each row: the same values
            found = np.ones(len(needles), dtype=bool)
        else:
            found = _in_sorted(needles, other.keys)
        if self.has_nulls:
            found &= needles % self.width != self.null_code
        return found

    def all_in(self, other: CodedLists) -> np.ndarray:
        """Per row: every value is in the same row of ``other`` (vacuously true for an empty row)."""
        out = np.ones(self.n, dtype=bool)
        out[self.distinct_keys[~self.found_in(other)] // self.width] = False
        return out

    def count_in(self, other: CodedLists) -> np.ndarray:
        """Per row: how many of its distinct values are in the same row of ``other``."""
        found = self.distinct_keys[self.found_in(other)]
        return np.bincount(found // self.width, minlength=self.n)


class ChunkIds:
    """List columns of chunk ids coded together (:class:`CodedLists`): a known id's code is its registry
    position, an unknown id's a number past the registry's that every column shares."""

    def __init__(self, registry: Registry, columns: Mapping[str, pa.Array]):
        flats = {name: flat(lists) for name, lists in columns.items()}
        # A column holding the same ids as one before it (the rerank input is often the whole first stage)
        # is looked up once; with the same rows too (an unchanged reranking), it is the same CodedLists.
        like: dict[str, str] = {}
        for name, (values, _) in flats.items():
            like[name] = next(
                (other for other in dict.fromkeys(like.values()) if flats[other][0].equals(values)), name
            )
        coded = [name for name in flats if like[name] == name]
        positions = {name: registry.index(flats[name][0]) for name in coded}
        codes, width = _codes([flats[name][0] for name in coded], list(positions.values()), len(registry))
        codes = dict(zip(coded, codes, strict=True))
        self.positions = {name: positions[like[name]] for name in flats}
        self.columns: dict[str, CodedLists] = {}
        for name, (_, rows) in flats.items():
            if like[name] != name and np.array_equal(rows, flats[like[name]][1]):
                self.columns[name] = self.columns[like[name]]
            else:
                self.columns[name] = CodedLists(len(columns[name]), rows, codes[like[name]], width)

    def __getitem__(self, name: str) -> CodedLists:
        return self.columns[name]


def coded_strings(columns: Sequence[pa.Array]) -> list[CodedLists]:
    """List columns of strings coded together (:class:`CodedLists`)."""
    flats = [flat(lists) for lists in columns]
    values = [values for values, _ in flats]
    codes, width = _codes(values, [np.full(len(v), -1, dtype=np.int64) for v in values], 0)
    return [
        CodedLists(len(lists), rows, code, width)
        for lists, (_, rows), code in zip(columns, flats, codes, strict=True)
    ]


def _codes(values: list[pa.Array], known: list[np.ndarray], n_known: int) -> tuple[list[np.ndarray], int]:
    """Integer codes of the strings ``values`` (several arrays coded together), given the codes below
    ``n_known`` of some of them (``known``, -1 where not known): the others are numbered from ``n_known``
    on, in one dictionary for all arrays; a null gets the last code, ``width - 1``."""
    valid = [np.asarray(v.is_valid()) for v in values]
    others = [v.filter(pa.array((k < 0) & ok)) for v, k, ok in zip(values, known, valid, strict=True)]
    dictionary = pc.unique(
        pa.concat_arrays([o.cast(pa.string()) for o in others] or [pa.array([], pa.string())])
    )
    width = n_known + len(dictionary) + 1
    codes = []
    for v, k, ok in zip(values, known, valid, strict=True):
        code = k.copy()
        other = (k < 0) & ok
        if other.any():
            at = pc.index_in(v.filter(pa.array(other)).cast(pa.string()), value_set=dictionary)
            code[other] = n_known + np.asarray(at, dtype=np.int64)
        code[~ok] = width - 1
        codes.append(code)
    return codes, width


def _in_sorted(needles: np.ndarray, haystack: np.ndarray) -> np.ndarray:
    """For each needle: is it in the sorted array ``haystack``?"""
    if len(haystack) == 0:
        return np.zeros(len(needles), dtype=bool)
    at = np.searchsorted(haystack, needles)
    return haystack[np.minimum(at, len(haystack) - 1)] == needles


def admissibility(
    t,
    first,
    selected,
    missing,
    registry: Registry,
    required_versions,
    ids: ChunkIds | None = None,
) -> dict[str, np.ndarray]:
    """Per row of the trace columns ``t``, whether it breaks each rule (:data:`ADMISSIBILITY_RULES`).

    ``ids`` holds the stages coded (:data:`STAGE_COLUMNS`: ``first``, ``selected`` and the trace's
    ``rerank_input_ids`` and ``reranked_ids``) when the caller has coded them already.
    """
    n = len(missing)
    present = ~missing
    rerank_in, reranked, versions = t["rerank_input_ids"], t["reranked_ids"], t["selected_versions"]
    if ids is None:
        columns = (first, rerank_in, reranked, selected)
        ids = ChunkIds(registry, dict(zip(STAGE_COLUMNS, columns, strict=True)))
    stages = [ids[name] for name in STAGE_COLUMNS]
    n_selected = ids["selected"].lengths
    n_versions = np.asarray(pc.fill_null(pc.list_value_length(versions), 0))

    violations = {
        "missing_trace": missing,
        "empty_selection": present & (n_selected == 0),
        "version_count": present & (n_selected != n_versions),
        "duplicate_id": present & np.any(np.stack([stage.repeats for stage in stages]), axis=0),
    }
    keys, key_rows = flat(t["version_keys"])
    has_all = np.ones(n, dtype=bool)
    for key in dict.fromkeys(required_versions):
        has_all &= rowwise.any_per_row(np.asarray(pc.fill_null(pc.equal(keys, key), False)), key_rows, n)
    violations["missing_version"] = present & ~has_all
    violations["repeated_version"] = present & coded_strings([t["version_keys"]])[0].repeats

    problems, problem_rows = [], []
    distinct_stages = {id(stage): (name, stage) for name, stage in zip(STAGE_COLUMNS, stages, strict=True)}
    for name, stage in distinct_stages.values():
        flags = registry.problems[ids.positions[name]]  # position -1 (unknown) reads the last entry
        at = np.flatnonzero(flags)
        problems.append(flags[at])
        problem_rows.append(stage.rows[at])
    problems, problem_rows = np.concatenate(problems), np.concatenate(problem_rows)
    for rule, flag in (("unknown_chunk", UNKNOWN), ("restricted", RESTRICTED), ("stale", STALE)):
        violations[rule] = rowwise.any_per_row((problems & flag) != 0, problem_rows, n)

    first_ids, rerank_ids, reranked_ids, selected_ids = stages
    both = np.asarray(rerank_in.is_valid()) & np.asarray(first.is_valid())
    violations["rerank_input_not_in_first_stage"] = both & ~rerank_ids.all_in(first_ids)
    both = np.asarray(rerank_in.is_valid()) & np.asarray(reranked.is_valid())
    violations["reranked_not_rerank_input"] = both & ~(
        reranked_ids.all_in(rerank_ids) & rerank_ids.all_in(reranked_ids)
    )
    violations["selected_not_reranked"] = np.asarray(reranked.is_valid()) & ~selected_ids.all_in(reranked_ids)

    # Versions pair with selected ids position by position (where the counts agree).
    same_count = (n_selected == n_versions) & (n_selected > 0)
    paired = same_count[selected_ids.rows]
    given_versions, _ = flat(versions, same_count)
    at = ids.positions["selected"][paired]
    registry_version = registry.version.take(pa.array(at, mask=at < 0))  # null where unknown
    wrong = (at >= 0) & ~np.asarray(pc.fill_null(pc.equal(registry_version, given_versions), False))
    violations["wrong_version"] = rowwise.any_per_row(wrong, selected_ids.rows[paired], n)
    return violations


def rule_names(violations: dict[str, np.ndarray], n: int) -> pa.Array:
    matrix = np.stack([violations[rule] for rule in ADMISSIBILITY_RULES], axis=1)
    rows, rules = np.nonzero(matrix)
    names = np.asarray(ADMISSIBILITY_RULES, dtype=object)[rules]
    return lists_from_rows(pa.array(names, pa.string()), rows, n)

"""Admissibility: is every piece of evidence on the retrieval path allowed, known and current?

Forbidden evidence is never acceptable: restricted, stale or unknown evidence anywhere in the retrieval
path fails admissibility, whatever its relevance. Each rule is evaluated over all cases at once and
reported by name (see ``scoring.layered`` for the list and the exact conditions).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import lists_from_rows
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


class Registry:
    """The evidence registry, looked up by chunk id."""

    def __init__(self, evidence: pa.Table):
        self.chunk_id = evidence.column("chunk_id").combine_chunks()
        self.version = evidence.column("version").combine_chunks()
        self.permitted = np.asarray(evidence.column("permitted").combine_chunks(), dtype=bool)
        self.current = np.asarray(evidence.column("current").combine_chunks(), dtype=bool)
        self.text = pc.utf8_lower(evidence.column("text").combine_chunks())

    @cached_property
    def _token_index(self) -> tuple[pa.Array, int, pa.Array]:
        values, rows = rowwise.flat(rowwise.word_tokens(self.text))
        vocabulary = pc.unique(values)
        width = len(vocabulary) + 1
        keys = rows * width + np.asarray(pc.index_in(values, value_set=vocabulary))
        return vocabulary, width, pa.array(keys)

    @property
    def vocabulary(self) -> pa.Array:
        """Every word token of every chunk text, once."""
        return self._token_index[0]

    @property
    def token_key_width(self) -> int:
        return self._token_index[1]

    @property
    def token_keys(self) -> pa.Array:
        """``chunk position * token_key_width + token code`` for every token of every chunk."""
        return self._token_index[2]

    @staticmethod
    def flag(values: np.ndarray, position: np.ndarray) -> np.ndarray:
        """``values`` at each registry position; False for an unknown id (position -1)."""
        known = position >= 0
        out = np.zeros(len(position), dtype=bool)
        out[known] = values[position[known]]
        return out

    def index(self, ids: pa.Array) -> np.ndarray:
        """Registry position of each id, -1 when the id is unknown."""
        found = pc.index_in(ids, value_set=self.chunk_id)
        return np.asarray(pc.fill_null(found, -1), dtype=np.int64)


def admissibility(
    t, first, selected, missing, registry: Registry, required_versions
) -> dict[str, np.ndarray]:
    n = len(missing)
    present = ~missing
    rerank_in, reranked, versions = t["rerank_input_ids"], t["reranked_ids"], t["selected_versions"]
    n_selected = np.asarray(pc.fill_null(pc.list_value_length(selected), 0))
    n_versions = np.asarray(pc.fill_null(pc.list_value_length(versions), 0))
    stages = [first, rerank_in, reranked, selected]

    violations = {
        "missing_trace": missing,
        "empty_selection": present & (n_selected == 0),
        "version_count": present & (n_selected != n_versions),
        "duplicate_id": present & np.any(np.stack([_has_repeats(stage, n) for stage in stages]), axis=0),
    }
    keys = t["version_keys"]
    wanted = _constant_lists(list(required_versions), n)
    found_keys, key_rows = rowwise.member_of_row(wanted, keys)
    violations["missing_version"] = present & ~rowwise.all_per_row(found_keys, key_rows, n)
    violations["repeated_version"] = present & _has_repeats(keys, n)

    ids = [rowwise.flat(stage) for stage in stages]
    all_ids = pa.concat_arrays([values.cast(pa.string()) for values, _ in ids])
    id_rows = np.concatenate([rows for _, rows in ids])
    position = registry.index(all_ids)
    known = position >= 0
    violations["unknown_chunk"] = rowwise.any_per_row(~known, id_rows, n)
    violations["restricted"] = rowwise.any_per_row(
        known & ~registry.flag(registry.permitted, position), id_rows, n
    )
    violations["stale"] = rowwise.any_per_row(known & ~registry.flag(registry.current, position), id_rows, n)

    both = np.asarray(rerank_in.is_valid()) & np.asarray(first.is_valid())
    violations["rerank_input_not_in_first_stage"] = both & ~rowwise.all_found(rerank_in, first, n)
    both = np.asarray(rerank_in.is_valid()) & np.asarray(reranked.is_valid())
    violations["reranked_not_rerank_input"] = both & ~(
        rowwise.all_found(reranked, rerank_in, n) & rowwise.all_found(rerank_in, reranked, n)
    )
    violations["selected_not_reranked"] = np.asarray(reranked.is_valid()) & ~rowwise.all_found(
        selected, reranked, n
    )

    # Versions pair with selected ids position by position (where the counts agree).
    same_count = (n_selected == n_versions) & (n_selected > 0)
    selected_ids, selected_rows = rowwise.flat(selected, same_count)
    given_versions, _ = rowwise.flat(versions, same_count)
    at = registry.index(selected_ids)
    registry_version = registry.version.take(pa.array(at, mask=at < 0))  # null where unknown
    wrong = (at >= 0) & ~np.asarray(pc.fill_null(pc.equal(registry_version, given_versions), False))
    violations["wrong_version"] = rowwise.any_per_row(wrong, selected_rows, n)
    return violations


def _has_repeats(lists: pa.Array, n: int) -> np.ndarray:
    """Per row: some value occurs twice in the row's list."""
    values, rows = rowwise.flat(lists)
    if len(values) == 0:
        return np.zeros(n, dtype=bool)
    counts = (
        pa.table({"row": rows, "value": values.cast(pa.string())})
        .group_by(["row", "value"], use_threads=False)
        .aggregate([("value", "count")])
    )
    repeated = np.asarray(counts.column("value_count")) > 1
    return rowwise.any_per_row(repeated, np.asarray(counts.column("row")), n)


def _constant_lists(values: list[str], n: int) -> pa.Array:
    offsets = np.arange(n + 1, dtype=np.int32) * len(values)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values * n, pa.string()))


def rule_names(violations: dict[str, np.ndarray], n: int) -> pa.Array:
    matrix = np.stack([violations[rule] for rule in ADMISSIBILITY_RULES], axis=1)
    rows, rules = np.nonzero(matrix)
    names = np.asarray(ADMISSIBILITY_RULES, dtype=object)[rules]
    return lists_from_rows(pa.array(names, pa.string()), rows, n)

"""Joining traces to gold cases: by qid, else by exact question; the last trace wins."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc


def join_traces(gold: pa.Table, traces: pa.Table) -> tuple[pa.Array | None, dict[str, int]]:
    """For each gold row, the index of its (last) trace, null when missing (None: the identity join).

    Also counts ``duplicates`` (traces beyond the first per key) and ``unmatched`` (distinct trace keys
    with no gold case). The answer for the latest pair of tables is kept: every scorer of a run joins
    the same two tables.
    """
    cached = _last_join.get((id(gold), id(traces)))
    if cached is not None and cached[0]() is gold and cached[1]() is traces:
        return cached[2]
    joined = _join(gold, traces)
    _last_join.clear()
    _last_join[(id(gold), id(traces))] = (weakref.ref(gold), weakref.ref(traces), joined)
    return joined


_last_join: dict = {}


def _join(gold: pa.Table, traces: pa.Table) -> tuple[pa.Array | None, dict[str, int]]:
    gold_qid = gold.column("qid").combine_chunks()
    key = traces.column("qid").combine_chunks()
    if key.null_count:  # traces that carry a question instead of an id join on the exact question
        question = traces.column("question").combine_chunks()
        by_question = gold_qid.take(pc.index_in(question, value_set=gold.column("question").combine_chunks()))
        unjoined = pc.binary_join_element_wise("question:", question, "")
        key = pc.coalesce(key, by_question, unjoined)
    n_traces = len(key)
    if n_traces == len(gold_qid) and pc.all(pc.fill_null(pc.equal(key, gold_qid), False)).as_py():
        # Replayed in gold order, one trace per case: nothing to look up.
        return None, {"duplicates": 0, "unmatched": 0}
    # One hash join (polars, both cores): each distinct key with its last trace, then the gold ids
    # looked up among them.
    last = (
        pl.DataFrame({"key": pl.Series(values=key.cast(pa.string()))})
        .with_row_index("row")
        .group_by("key")
        .agg(pl.col("row").max())
    )
    distinct = last.height
    gold_keys = pl.DataFrame({"key": pl.Series(values=gold_qid.cast(pa.string()))})
    found = gold_keys.join(last, on="key", how="left", maintain_order="left").get_column("row")
    rows = found.cast(pl.Int64).to_arrow()
    matched = len(rows) - rows.null_count
    return rows, {"duplicates": n_traces - distinct, "unmatched": distinct - matched}


def aligned_chunks(
    gold: pa.Table, traces: pa.Table, trace_rows: pa.Array | None, chunk_rows: int
) -> Iterator[tuple[pa.Table, pa.Table, np.ndarray]]:
    """Gold rows ``chunk_rows`` at a time with their traces aligned row by row, and which are missing.

    ``trace_rows`` comes from :func:`join_traces` (None: the identity join, so the traces are sliced, not
    gathered). A missing trace is a null row.
    """
    for start in range(0, gold.num_rows, chunk_rows):
        part = gold.slice(start, chunk_rows)
        if trace_rows is None:
            yield part, traces.slice(start, chunk_rows), np.zeros(part.num_rows, dtype=bool)
        else:
            rows = trace_rows.slice(start, chunk_rows)
            yield part, traces.take(rows), np.asarray(rows.is_null())

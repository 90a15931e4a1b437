"""Joining traces to gold cases: by qid, else by exact question; the last trace wins."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def join_traces(gold: pa.Table, traces: pa.Table) -> tuple[pa.Array | None, dict[str, int]]:
    """For each gold row, the index of its (last) trace, null when missing (None: the identity join).

    Also counts ``duplicates`` (traces beyond the first per key) and ``unmatched`` (distinct trace keys
    with no gold case).
    """
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
    distinct = pc.count_distinct(key).as_py()
    if distinct == n_traces:  # no duplicates: the first trace per key is the only one
        rows = pc.index_in(gold_qid, value_set=key).cast(pa.int64())
    else:  # the last trace wins: look the keys up in reverse order
        last_from_end = pc.index_in(gold_qid, value_set=key[::-1])
        rows = pc.subtract(pa.scalar(n_traces - 1, pa.int64()), last_from_end.cast(pa.int64()))
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

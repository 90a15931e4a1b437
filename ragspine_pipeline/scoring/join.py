"""Joining traces to gold cases: by qid, else by exact question; the last trace wins."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import duck


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
    key = traces.column("qid")  # left in its chunks: the hash pass reads them where they are
    if key.null_count:  # traces that carry a question instead of an id join on the exact question
        key = key.combine_chunks()
        question = traces.column("question").combine_chunks()
        by_question = gold_qid.take(pc.index_in(question, value_set=gold.column("question").combine_chunks()))
        unjoined = pc.binary_join_element_wise("question:", question, "")
        key = pc.coalesce(key, by_question, unjoined)
    n_traces = len(key)
    if n_traces == len(gold_qid) and pc.all(pc.fill_null(pc.equal(key, gold_qid), False)).as_py():
        # Replayed in gold order, one trace per case: nothing to look up.
        return None, {"duplicates": 0, "unmatched": 0}
    # The last trace of each key, and whether a gold case has that key: one grouped join.
    found = duck.query(
        """
        WITH last AS (SELECT key, max(position) AS row FROM keys GROUP BY key)
        SELECT gold.position AS case_row, last.row AS trace_row
        FROM last LEFT JOIN gold ON gold.qid = last.key
        """,
        keys=pa.table({"key": key, "position": np.arange(n_traces)}),
        gold=pa.table({"qid": gold_qid, "position": np.arange(len(gold_qid))}),
    )
    case_row = found.column("case_row")
    matched = np.asarray(case_row.is_valid(), dtype=bool)
    last = np.full(len(gold_qid), -1, dtype=np.int64)
    last[np.asarray(case_row.filter(matched))] = np.asarray(found.column("trace_row").filter(matched))
    rows = pa.array(last, mask=last < 0)
    distinct, n_matched = found.num_rows, int(matched.sum())
    return rows, {"duplicates": n_traces - distinct, "unmatched": distinct - n_matched}


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

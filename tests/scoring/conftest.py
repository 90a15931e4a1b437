from __future__ import annotations

import pyarrow as pa
import pytest

from ragspine_pipeline.contracts.columns import GOLD_SCHEMA, TRACE_SCHEMA


def gold_table(rows: list[dict]) -> pa.Table:
    full = [
        {
            "question": f"question of {row['qid']}",
            "gold_claim_substr": [],
            "gold_claim": None,
            "gold_citations": [],
            "required_points": [],
            "tags": {},
            **row,
        }
        for row in rows
    ]
    return pa.Table.from_pylist(full, schema=GOLD_SCHEMA)


def trace_table(rows: list[dict]) -> pa.Table:
    full = [
        {"question": None, "claim": None, "citations": None, "retrieved_ids": None, **row} for row in rows
    ]
    return pa.Table.from_pylist(full, schema=TRACE_SCHEMA)


@pytest.fixture
def make_gold():
    return gold_table


@pytest.fixture
def make_traces():
    return trace_table

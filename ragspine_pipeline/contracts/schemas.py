"""Canonical Arrow schemas: what every dialect of gold, trace and evidence becomes."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STR_LIST = pa.list_(pa.string())
TAGS = pa.map_(pa.string(), pa.string())
LEDGER = pa.list_(
    pa.struct(
        [
            pa.field("text", pa.string()),
            pa.field("citation_id", pa.string()),
            pa.field("support_phrases", STR_LIST),
            pa.field("answer_point", pa.string()),
        ]
    )
)

GOLD_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("answerable", pa.bool_(), nullable=False),
        pa.field("gold_claim_substr", STR_LIST, nullable=False),
        pa.field("gold_claim", pa.string()),
        pa.field("gold_citations", STR_LIST, nullable=False),
        pa.field("required_points", STR_LIST, nullable=False),
        pa.field("tags", TAGS, nullable=False),
        pa.field("reference_date", pa.string()),
        pa.field("case_type", pa.string()),
        pa.field("expected_clarification", pa.string()),
        pa.field("expected_refuse", pa.bool_()),
        pa.field("expected_value", pa.float64()),
        pa.field("expected_unit", pa.string()),
        pa.field("expected_source_doc", pa.string()),
        pa.field("expected_source_locator", pa.string()),
        pa.field("expected_narrative_doc", pa.string()),
        pa.field("expect", pa.string()),
        pa.field("seed_without_snippets", pa.bool_()),
    ]
)
"""Canonical gold columns. Lists and tags are never null (absent means empty); where the absence
itself decides a figure, a flag says so: ``seed_without_snippets``, a seed-000 case (no key of another
dialect) without ``gold_claim_substr``, which seed-000 never finds contained (null: not such a case).
``reference_date`` is the case's ISO date ("today" for relative periods); ``case_type`` and the
``expected_*`` columns are the RAGSpine QA-gate expectations; all of them null where a case has none.
``expect`` marks a canary (``releasable`` or ``blocked``), null for other cases."""

TRACE_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.string()),
        pa.field("question", pa.string()),
        pa.field("claim", pa.string()),
        pa.field("citations", STR_LIST),
        pa.field("retrieved_ids", STR_LIST),
        pa.field("rerank_input_ids", STR_LIST),
        pa.field("reranked_ids", STR_LIST),
        pa.field("selected_context_ids", STR_LIST),
        pa.field("selected_versions", STR_LIST),
        pa.field("claims", LEDGER),
        pa.field("version_keys", STR_LIST),
        pa.field("index_version", pa.string()),
        pa.field("ts", pa.string()),
        pa.field("tags", TAGS),
        pa.field("latency_ms", pa.float64()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("outcome_refused", pa.bool_()),
        pa.field("outcome_clarification", pa.string()),
        pa.field("outcome_found_value", pa.float64()),
        pa.field("outcome_found_value_text", pa.string()),  # a figure written as text: a miss
        pa.field("outcome_found_unit", pa.string()),
        pa.field("outcome_found_doc", pa.string()),
        pa.field("outcome_found_locator", pa.string()),
        pa.field("outcome_source_docs", STR_LIST),
        pa.field("outcome_narrative", pa.string()),
        pa.field("outcome_context", STR_LIST),
        pa.field("context_ids", STR_LIST),
        pa.field("context_texts", STR_LIST),
    ]
)
"""Canonical trace columns. Null means "not in the trace": a null ``citations`` is an answer that carries
no citation list (non-compliant), a null stage is a stage the trace does not carry (skipped).
``claims`` is the claim ledger (null without one); ``version_keys`` the keys of ``versions`` as written
(a repeated key appears twice), ``index_version`` its ``index`` entry. ``ts`` is the event time as text
(``contracts.canonical.trace_sql``); ``tags`` the slice dimensions, keys sorted; ``prompt_tokens`` and
``completion_tokens`` come from ``token_usage``; ``outcome_refused`` is ``outcome.refused``, which decides
whether the trace is a refusal when it is given; the other ``outcome_*`` columns are what the QA gates
read: ``clarification_mode``, ``found_value`` / ``found_unit``, ``found_source`` (doc, locator), the
docs of ``sources``, ``narrative_answer`` and the texts of ``retrieved_context``. ``context_ids`` and
``context_texts`` are the trace's own ``contexts`` (the passages its answer was given), null without."""

EVIDENCE_SCHEMA = pa.schema(
    [
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("document_id", pa.string()),
        pa.field("parent_id", pa.string()),
        pa.field("version", pa.string(), nullable=False),
        pa.field("permitted", pa.bool_(), nullable=False),
        pa.field("current", pa.bool_(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ]
)
"""Canonical evidence registry columns."""


def carried(table: pa.Table, empty: bool = False, names: Iterable[str] | None = None) -> dict[str, int]:
    """Per canonical trace column of ``table`` (or only ``names``), how many traces carry it: not null,
    and a list or map with an item (``empty``: an empty one counts too — an answer that cites nothing
    carries its citations)."""
    counts = {}
    wanted = None if names is None else set(names)
    for field in TRACE_SCHEMA:
        if wanted is not None and field.name not in wanted:
            continue
        column = table.column(field.name)
        present = pc.is_valid(column)
        if not empty and (pa.types.is_list(field.type) or pa.types.is_map(field.type)):
            lengths = [np.diff(np.asarray(chunk.offsets)) for chunk in column.chunks]  # map: no kernel
            present = pc.and_(present, pa.chunked_array([pa.array(n > 0) for n in lengths], pa.bool_()))
        counts[field.name] = int(pc.sum(present).as_py() or 0)
    return counts

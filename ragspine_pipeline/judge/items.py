"""What the judge sees of each case, from canonical trace, gold and evidence columns.

* ``question``: the trace's question, else the golden case's;
* ``answer``: the trace's canonical claim;
* ``context``: the texts of the trace's selected context chunks (else its retrieved chunks) found in
  the evidence registry, in the trace's order; chunk ids the registry does not know are skipped;
* ``reference``: the golden case's claim, else its claim substrings, else the texts of its gold
  citations (the gold context) when a registry is given.

A metric whose inputs are missing does not apply to the case (``prompts.metric_inputs``).
"""

from __future__ import annotations

import pyarrow as pa

from ragspine_pipeline.judge.prompts import JudgeItem

__all__ = ["case_tags", "judge_items"]


def judge_items(
    traces: pa.Table, gold: pa.Table | None = None, evidence: pa.Table | None = None
) -> list[JudgeItem]:
    """One item per trace (traces without a qid are keyed by their question), in trace order."""
    texts = {} if evidence is None else dict(zip(*_columns(evidence, "chunk_id", "text"), strict=True))
    cases = {} if gold is None else {row["qid"]: row for row in gold.select(_GOLD).to_pylist()}
    items = []
    for row in traces.select(_TRACE).to_pylist():
        qid = row["qid"] if row["qid"] is not None else row["question"]
        case = cases.get(qid, {})
        chunk_ids = row["selected_context_ids"] or row["retrieved_ids"] or []
        items.append(
            JudgeItem(
                qid=qid,
                question=row["question"] or case.get("question"),
                answer=row["claim"],
                # The registry's texts of the chunks the answer was given, else the trace's own contexts.
                context=tuple(texts[c] for c in chunk_ids if c in texts)
                if evidence is not None
                else tuple(row["context_texts"] or ()),
                reference=_reference(case, texts),
            )
        )
    return items


def case_tags(traces: pa.Table, gold: pa.Table | None = None) -> dict[str, list[tuple[str, str]]]:
    """Per case, its slice tags: the golden case's tags, else the trace's."""
    tags = {}
    for qid, question, trace_tags in zip(*_columns(traces, "qid", "question", "tags"), strict=True):
        tags[qid if qid is not None else question] = list(trace_tags or [])
    if gold is not None:
        for qid, gold_tags in zip(*_columns(gold, "qid", "tags"), strict=True):
            if qid in tags and gold_tags:
                tags[qid] = list(gold_tags)
    return tags


_GOLD = ["qid", "question", "gold_claim", "gold_claim_substr", "gold_citations"]
_TRACE = ["qid", "question", "claim", "selected_context_ids", "retrieved_ids", "context_texts"]


def _reference(case: dict, texts: dict[str, str]) -> tuple[str, ...]:
    if case.get("gold_claim"):
        return (case["gold_claim"],)
    if case.get("gold_claim_substr"):
        return tuple(case["gold_claim_substr"])
    return tuple(texts[c] for c in case.get("gold_citations") or [] if c in texts)


def _columns(table: pa.Table, *names: str) -> list[list]:
    return [table.column(name).to_pylist() for name in names]

"""A trace's own `contexts: [{id, text}]` stand for the evidence of its answer when no registry is
given: the nightly lexical faithfulness, the LLM judge's context, and they are redacted in samples."""

from __future__ import annotations

import json

from ragspine_pipeline.contracts.columns import load_traces
from ragspine_pipeline.judge.items import judge_items
from ragspine_pipeline.redaction import redact_trace
from ragspine_pipeline.scoring.production import production_metrics

LEAVE = "All employees get 16 weeks of paid parental leave."
TRACES = [
    {
        "qid": "a",
        "answer": "Employees get 16 weeks of paid parental leave.",
        "contexts": [{"id": "c1", "text": LEAVE}],
    },
    {
        "qid": "b",
        "answer": "The moon is made of cheese.",
        "contexts": [{"id": "c1", "text": "Passwords expire."}],
    },
    {"qid": "c", "answer": "A trace that carries no contexts."},
]


def traces(tmp_path, rows=TRACES):
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return load_traces(path).table


def test_without_a_registry_the_traces_contexts_are_the_evidence_of_lexical_faithfulness(tmp_path):
    night = production_metrics(traces(tmp_path))
    faithfulness = night.metrics["lexical_faithfulness"]
    # a's claim is in its own context; b's is not (the same id c1 means another text there); c has none.
    assert (faithfulness.value, faithfulness.n) == (0.5, 2)
    assert "production_admissible_rate" not in night.metrics  # admissibility still needs a registry


def test_without_contexts_or_a_registry_faithfulness_is_not_reported(tmp_path):
    assert "lexical_faithfulness" not in production_metrics(traces(tmp_path, TRACES[2:])).metrics


def test_the_judge_reads_the_contexts_when_there_is_no_registry(tmp_path):
    [a, _b, c] = judge_items(traces(tmp_path))
    assert a.context == (LEAVE,) and c.context == ()


def test_context_texts_are_redacted_in_samples():
    trace = {"qid": "a", "contexts": [{"id": "c1", "text": "write to jane.doe@example.com"}]}
    redacted, counts = redact_trace(trace)
    assert "jane.doe@example.com" not in json.dumps(redacted) and redacted["contexts"][0]["id"] == "c1"
    assert sum(counts.values()) == 1 and trace["contexts"][0]["text"].endswith("example.com")

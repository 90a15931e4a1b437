"""The columnar reader and the record reader (the pydantic models) produce the same canonical columns.

Random records in every dialect are written to a file; the columnar reader (DuckDB, the checks derived
from the models) either vouches for the file and must then agree with the record reader exactly, or it
defers to the record reader. It never accepts a file the models reject.
"""

from __future__ import annotations

import json
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragspine_pipeline.contracts import columns
from ragspine_pipeline.errors import InputError

IDS = st.sampled_from(["p1", "p2", "doc#3", "a b"])
ID_LISTS = st.lists(IDS, max_size=4)
TEXT = st.lists(
    st.sampled_from(
        [*"abc XY.,:[]'\"\n-", "citations: [p1, p2]", "Citations:[ doc#3 ]", "数据", "2026-11-20"]
    ),
    max_size=8,
).map("".join)


def maybe(strategy):
    return st.one_of(st.just(None), strategy)


def present(**fields):
    """A record with only the fields that are not the 'absent' marker."""
    return {key: value for key, value in fields.items() if value is not ABSENT}


ABSENT = object()


def optional(strategy):
    return st.one_of(st.just(ABSENT), st.none(), strategy)


LEDGER = st.lists(
    st.fixed_dictionaries(
        {"text": TEXT},
        optional={
            "claim_id": st.text("c0123", min_size=1, max_size=3),
            "citation_id": maybe(IDS),
            "support_phrases": ID_LISTS,
            "answer_point": TEXT,
        },
    ),
    max_size=3,
)
ANSWER_OBJECT = st.fixed_dictionaries(
    {}, optional={"claim": maybe(TEXT), "citations": maybe(ID_LISTS), "claims": maybe(LEDGER)}
)

# Event times, one kind per file (a file mixing numbers and strings is the record reader's anyway).
TIMESTAMPS = {
    "iso": st.sampled_from(["2026-11-20T10:00:00Z", "2026-11-20", "2026-11-20 10:00:00+01:00", "1700000000"]),
    "epoch": st.integers(-(2**40), 2**62),
    "epoch-float": st.one_of(st.floats(1e9, 2e9), st.floats(), st.sampled_from([0.0, -0.0, 1e16])),
    "mixed": st.one_of(st.integers(0, 2**54), st.floats(1e9, 1e10), st.floats(0, 1e-3)),
}
TAGS = st.dictionaries(
    st.sampled_from(["workflow", "topic", "Region", "a b"]),
    maybe(st.sampled_from(["FIN", "release-freeze", "2026-11-20", "数据", ""])),
    max_size=3,
)


def mostly(common, rare, ratio=6):
    """``common`` about ``ratio`` times as often as ``rare``: rare values send a file to the record reader
    (or get it rejected), and the readers must still be compared on many files the columnar one reads."""
    return st.sampled_from([common] * ratio + [rare]).flatmap(lambda strategy: strategy)


# Whole floats, booleans and digit strings pass the model's lax int but not the columnar check.
COUNT = mostly(st.integers(-3, 10**7), st.sampled_from([2**63 - 1, 12.0, True, "12"]))
TOKEN_USAGE = st.fixed_dictionaries(
    {},
    optional={
        "prompt": maybe(COUNT),
        "prompt_tokens": maybe(COUNT),
        "completion": maybe(COUNT),
        "completion_tokens": maybe(COUNT),
        "total_tokens": COUNT,
    },
)
SOURCE = mostly(
    st.fixed_dictionaries(
        {"doc": st.sampled_from(["R.pptx", "memo.docx"])}, optional={"locator": maybe(TEXT)}
    ),
    st.sampled_from([{"locator": "slide=1"}, {"doc": None}, "R.pptx"]),  # no doc, or not an object
)
OUTCOME = st.fixed_dictionaries(
    {},
    optional={
        "refused": mostly(maybe(st.booleans()), st.sampled_from(["yes", 1])),
        "found_value": mostly(maybe(st.one_of(st.floats(0, 1e6), st.integers(-5, 10**6))), st.just(True)),
        "found_unit": maybe(st.sampled_from(["USD_M", "%"])),
        "found_source": maybe(SOURCE),
        "sources": maybe(st.lists(SOURCE, max_size=3)),
        "clarification_mode": mostly(
            maybe(st.sampled_from(["none", "ask_first", "answer_with_assumptions"])), st.just("maybe")
        ),
        "route": TEXT,
    },
)
# NaN and Infinity: json.dumps writes them, pyarrow's parser reads them, the contract rejects them.
LATENCY = mostly(
    st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), st.integers(2**53, 2**62), st.just(-1.5)),
    st.sampled_from([float("nan"), float("inf")]),
)


def cost_and_slices(draw, ts_kind):
    """The production fields every dialect may carry: event time, tags, latency, tokens, outcome."""
    return present(
        ts=draw(optional(TIMESTAMPS[ts_kind])),
        tags=draw(optional(TAGS)),
        latency_ms=draw(optional(LATENCY)),
        token_usage=draw(optional(TOKEN_USAGE)),
        outcome=draw(optional(OUTCOME)),
    )


@st.composite
def trace_record(draw, dialect, ts_kind="iso"):
    key = draw(st.sampled_from(["qid", "q_id", "case_id", "id", "request_id"]))
    record = {key: draw(st.one_of(st.text("q0123", min_size=1, max_size=3), st.integers(0, 99)))}
    if draw(st.booleans()):
        record[draw(st.sampled_from(["question", "q"]))] = draw(TEXT)
    if dialect == "answer_json":
        record["retrieved_ids"] = draw(maybe(ID_LISTS))
        record["answer_json"] = draw(maybe(ANSWER_OBJECT))
    elif dialect == "text":
        record["chunks"] = draw(maybe(st.lists(st.fixed_dictionaries({"id": IDS}), max_size=4)))
        record["answer"] = draw(maybe(TEXT))
        record.update(present(citations=draw(optional(ID_LISTS)), ok=draw(optional(st.booleans()))))
    else:  # layered
        record.update(
            present(
                first_stage_ids=draw(optional(ID_LISTS)),
                rerank_input_ids=draw(optional(ID_LISTS)),
                reranked_ids=draw(optional(ID_LISTS)),
                selected_context_ids=draw(optional(ID_LISTS)),
                selected_versions=draw(optional(st.lists(st.sampled_from(["v1", "2026-11-20"]), max_size=3))),
                versions=draw(
                    optional(st.fixed_dictionaries({"index": st.sampled_from(["2026-11-20", "i7"])}))
                ),
                answer=draw(optional(ANSWER_OBJECT)),
                answer_json=draw(optional(ANSWER_OBJECT)),
            )
        )
    record.update(cost_and_slices(draw, ts_kind))
    return record


@st.composite
def gold_record(draw, dialect):
    if dialect == "wfgy":
        record = {
            "qid": draw(st.text("q0123", min_size=1, max_size=4)),
            "question": draw(TEXT),
            "answerable": draw(st.booleans()),
        }
        record.update(
            present(
                gold_claim_substr=draw(optional(st.lists(TEXT, max_size=2))),
                gold_citations=draw(optional(ID_LISTS)),
            )
        )
    elif dialect == "qaset":
        record = {
            "qid": draw(st.text("q0123", min_size=1, max_size=4)),
            "q": draw(TEXT),
            "answerable": draw(st.booleans()),
            "gold_ids": draw(ID_LISTS),
            **present(gold_claim=draw(optional(TEXT))),
        }
    elif dialect == "ragspine":
        record = {
            "id": draw(st.text("n0123", min_size=1, max_size=4)),
            "question": draw(TEXT),
            "case_type": draw(
                st.sampled_from(["numeric", "refusal", "narrative", "clarification", "composite"])
            ),
            "expected": {
                "clarification": draw(st.sampled_from(["none", "ask_first", "answer_with_assumptions"])),
                "refuse": draw(st.booleans()),
                **present(
                    value=draw(optional(st.floats(0, 1e6))),
                    unit=draw(optional(st.sampled_from(["USD_M", "%"]))),
                    source=draw(optional(SOURCE)),
                    narrative_doc=draw(optional(st.sampled_from(["memo.docx"]))),
                ),
            },
            "tags": {"topic": draw(st.sampled_from(["FIN", "HR"]))},
            "reference_date": draw(st.sampled_from(["2026-06-12", "2025-01-31"])),
        }
    else:  # layered
        record = {
            "case_id": draw(st.text("L0123", min_size=1, max_size=4)),
            "question": draw(TEXT),
            "required_source_ids": draw(st.lists(IDS, min_size=1, max_size=3)),
            "required_points": draw(st.lists(TEXT, max_size=2)),
            "tags": {"workflow": draw(st.sampled_from(["release-freeze", "access"]))},
        }
    return record


def both_readers(kind: str, records: list[dict]):
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{kind}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        read = columns._TRACE if kind == "trace" else columns._GOLD
        try:
            record_rows = columns._by_records(path, read).to_pylist()
        except InputError:
            record_rows = "rejected"
        columnar = columns._columnar(path, read)
        return None if columnar is None else columnar.to_pylist(), record_rows


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


TRACE_DIALECTS = st.sampled_from(["answer_json", "text", "layered"])


@SETTINGS
@given(
    st.tuples(TRACE_DIALECTS, st.sampled_from(sorted(TIMESTAMPS))).flatmap(
        lambda kinds: st.lists(trace_record(*kinds), min_size=1, max_size=6)
    )
)
def test_trace_readers_agree(records):
    columnar_rows, record_rows = both_readers("trace", records)
    if columnar_rows is not None:
        assert columnar_rows == record_rows


@SETTINGS
@given(
    st.sampled_from(["wfgy", "qaset", "ragspine", "layered"]).flatmap(
        lambda d: st.lists(
            gold_record(d),
            min_size=1,
            max_size=6,
            unique_by=lambda r: str(r.get("qid", r.get("id", r.get("case_id")))),
        )
    )
)
def test_gold_readers_agree(records):
    columnar_rows, record_rows = both_readers("gold", records)
    if columnar_rows is not None:
        assert columnar_rows == record_rows


@pytest.mark.parametrize("dialect", ["answer_json", "text", "layered"])
def test_the_columnar_reader_vouches_for_well_formed_traces(dialect):
    """Guard against a reader that defers everything to the slow path (still 'equal', but slow)."""
    record = {"answer_json": {"claim": "x", "citations": ["p1"]}, "retrieved_ids": ["p1"]}
    if dialect == "text":
        record = {"answer": "x citations: [p1]", "chunks": [{"id": "p1"}]}
    if dialect == "layered":
        record = {
            "first_stage_ids": ["p1"],
            "selected_context_ids": ["p1"],
            "selected_versions": ["v1"],
            "versions": {"index": "2026-11-20"},
            "answer": {"claims": [{"text": "x", "citation_id": "p1"}]},
        }
    columnar_rows, record_rows = both_readers("trace", [{"qid": "a", **record}, {"qid": "b", **record}])
    assert columnar_rows is not None and columnar_rows == record_rows

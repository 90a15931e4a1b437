"""Every gold and trace dialect loads into the same canonical columns; bad input is named precisely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.contracts.schemas import GOLD_SCHEMA
from ragspine_pipeline.errors import InputError

SHARED_RAGSPINE = (
    Path(__file__).resolve().parents[3] / "shared" / "examples" / "ragspine" / "qa_golden_set.jsonl"
)


NO_QA_EXPECTATIONS = {
    **dict.fromkeys(
        n
        for n in GOLD_SCHEMA.names
        if n in ("case_type", "reference_date", "expect") or n.startswith("expected")
    ),
    "seed_without_snippets": False,  # every case here names its snippets, or is of another dialect
}


def write_jsonl(path: Path, records: list, blank_lines_after: tuple[int, ...] = ()) -> Path:
    lines = []
    for i, record in enumerate(records):
        lines.append(record if isinstance(record, str) else json.dumps(record, ensure_ascii=False))
        if i in blank_lines_after:
            lines.append("   ")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# -- gold dialects ----------------------------------------------------------------------------------


def test_wfgy_gold_jsonl(tmp_path):
    path = write_jsonl(
        tmp_path / "gold.jsonl",
        [
            {
                "qid": "A0001",
                "question": "Does X support null keys?",
                "answerable": True,
                "gold_claim_substr": ["rejects null keys"],
                "gold_citations": ["p1#2"],
                "constraints": ["X rejects."],
            },
            {
                "qid": "A0002",
                "question": "Explain Z.",
                "answerable": False,
                "gold_claim_substr": [],
                "gold_citations": [],
            },
        ],
    )
    loaded = load_gold(path)
    assert loaded.reader == "columnar"
    assert loaded.table.to_pylist() == [
        {
            "qid": "A0001",
            "question": "Does X support null keys?",
            "answerable": True,
            "gold_claim_substr": ["rejects null keys"],
            "gold_claim": None,
            "gold_citations": ["p1#2"],
            "required_points": [],
            "tags": [],
            **NO_QA_EXPECTATIONS,
        },
        {
            "qid": "A0002",
            "question": "Explain Z.",
            "answerable": False,
            "gold_claim_substr": [],
            "gold_claim": None,
            "gold_citations": [],
            "required_points": [],
            "tags": [],
            **NO_QA_EXPECTATIONS,
        },
    ]


def test_wfgy_qaset_json_array(tmp_path):
    path = tmp_path / "qaset.json"
    path.write_text(
        '[\n  {"qid": "q1", "q": "What is X?", "answerable": true, "gold_ids": ["p1#1"],\n'
        '   "gold_claim": "X is a constrained mapping."},\n'
        '  {"qid": "q3", "q": "What is Z?", "answerable": false, "gold_ids": []}\n]\n'
    )
    loaded = load_gold(path)
    assert loaded.reader == "record"
    rows = loaded.table.to_pylist()
    assert [r["qid"] for r in rows] == ["q1", "q3"]
    assert rows[0]["question"] == "What is X?" and rows[0]["gold_citations"] == ["p1#1"]
    assert rows[0]["gold_claim"] == "X is a constrained mapping."


def test_ragspine_golden_lines_infer_answerability_from_expected(tmp_path):
    path = write_jsonl(
        tmp_path / "qa_golden_set.jsonl",
        [
            {
                "id": "num-001",
                "question": "香港FY2025的REVENUE是多少",
                "case_type": "numeric",
                "expected": {
                    "clarification": "none",
                    "refuse": False,
                    "value": 1702.0,
                    "unit": "USD_M",
                    "source": {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5"},
                },
                "tags": {"topic": "FIN"},
                "reference_date": "2026-06-12",
            },
            {
                "id": "ref-001",
                "question": "What will revenue be in 2030?",
                "case_type": "refusal",
                "expected": {"clarification": "none", "refuse": True},
                "tags": {"topic": "FIN"},
                "reference_date": "2026-06-12",
            },
        ],
    )
    loaded = load_gold(path)
    assert loaded.reader == "record"  # QA-gate cases: their rules are the model's
    assert loaded.table.column("answerable").to_pylist() == [True, False]
    assert loaded.table.column("qid").to_pylist() == ["num-001", "ref-001"]


def test_ragspine_expectations_become_columns_in_both_readers(tmp_path):
    case = {
        "id": "cmp-1",
        "question": "Revenue and outlook?",
        "case_type": "composite",
        "expected": {
            "clarification": "none",
            "refuse": False,
            "value": 1702,
            "unit": "USD_M",
            "source": {"doc": "R.pptx", "locator": "slide=5"},
            "narrative_doc": "Outlook.docx",
        },
    }
    loaded = load_gold(write_jsonl(tmp_path / "a.jsonl", [case]))
    # What each QA-gate family must state is the model's rule: such a set is read record by record.
    assert loaded.reader == "record"
    row = loaded.table.to_pylist()[0]
    assert row["case_type"] == "composite" and row["expected_value"] == 1702.0
    assert (row["expected_source_doc"], row["expected_source_locator"]) == ("R.pptx", "slide=5")
    assert row["expected_narrative_doc"] == "Outlook.docx" and row["expected_refuse"] is False


@pytest.mark.parametrize(
    ("case_type", "expected", "message"),
    [
        ("refusal", {"refuse": False}, "field 'expected.refuse': a refusal case must expect refuse: true"),
        ("clarification", {"clarification": "none"}, "cannot expect clarification 'none'"),
        ("numeric", {"value": 3.0, "unit": "%"}, "field 'expected.source': a numeric case needs"),
        ("composite", {"value": 1, "unit": "%", "source": {"doc": "d"}}, "needs expected narrative_doc"),
        ("narrative", {"refuse": False}, "field 'expected.narrative_doc'"),
        ("numeric", None, "field 'expected': a numeric case needs 'expected'"),
        ("numeric", {"value": True, "unit": "%", "source": {"doc": "d"}}, "expected a number, not a flag"),
    ],
)
def test_ragspine_lines_that_break_the_qa_rules_reject_the_file_naming_line_and_id(
    tmp_path, case_type, expected, message
):
    good = {"id": "ok-1", "question": "q", "answerable": True}
    bad = {"id": "bad-7", "question": "q", "answerable": True, "case_type": case_type}
    if expected is not None:
        bad["expected"] = expected
    path = write_jsonl(tmp_path / "gold.jsonl", [good, bad])
    with pytest.raises(InputError) as error:
        load_gold(path)
    assert "gold.jsonl:2: id=bad-7: " in str(error.value) and message in str(error.value)


def test_trace_outcome_becomes_qa_gate_columns_in_both_readers(tmp_path):
    outcome = {
        "clarification_mode": "answer_with_assumptions",
        "refused": False,
        "found_value": 1702,
        "found_unit": "USD_M",
        "found_source": {"doc": "R.pptx", "locator": "slide=5"},
        "sources": [{"doc": "R.pptx"}, {"doc": "Outlook.docx", "locator": None}],
        "route": "numeric",
    }
    trace = {"qid": "q1", "answer": {"claim": "1702 [R.pptx]", "citations": []}, "outcome": outcome}
    plain = {"qid": "q2", "answer": {"claim": "x"}}
    columnar = load_traces(write_jsonl(tmp_path / "a.jsonl", [trace, plain]))
    assert columnar.reader == "columnar"
    first, second = columnar.table.to_pylist()
    assert (
        first["outcome_clarification"] == "answer_with_assumptions" and first["outcome_found_value"] == 1702.0
    )
    assert (first["outcome_found_doc"], first["outcome_found_locator"]) == ("R.pptx", "slide=5")
    assert (
        first["outcome_source_docs"] == ["R.pptx", "Outlook.docx"] and first["outcome_found_unit"] == "USD_M"
    )
    assert second["outcome_source_docs"] is None and second["outcome_clarification"] is None
    flagged = {**trace, "outcome": {**outcome, "found_value": True}}
    with pytest.raises(InputError) as error:
        load_traces(write_jsonl(tmp_path / "a.jsonl", [flagged]))
    assert "a.jsonl:1: id=q1: field 'outcome.found_value': expected a number, not a flag" in str(error.value)


@pytest.mark.skipif(not SHARED_RAGSPINE.exists(), reason="shared RAGSpine example not beside the checkout")
def test_the_real_ragspine_golden_set_loads():
    loaded = load_gold(SHARED_RAGSPINE)
    assert loaded.table.num_rows == 41
    assert loaded.reader == "record"  # QA-gate cases: their rules are the model's


def test_layered_cases_are_answerable_when_they_require_sources(tmp_path):
    path = write_jsonl(
        tmp_path / "layered.jsonl",
        [
            {
                "case_id": "L1",
                "question": "Who approves a freeze exception?",
                "required_source_ids": ["pol-7#2"],
                "required_points": ["release manager approves"],
                "tags": {"workflow": "release-freeze"},
            }
        ],
    )
    row = load_gold(path).table.to_pylist()[0]
    assert row["answerable"] is True
    assert row["gold_citations"] == ["pol-7#2"] and row["required_points"] == ["release manager approves"]


def test_integer_ids_are_read_as_strings(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"qid": 17, "question": "q", "answerable": True}])
    assert load_gold(path).table.column("qid").to_pylist() == ["17"]


# -- trace dialects ---------------------------------------------------------------------------------


def test_answer_json_traces(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {
                "qid": "A0001",
                "q": "Does X support null keys?",
                "retrieved_ids": ["p1#1", "p1#2"],
                "answer_json": {"claim": "X rejects null keys.", "citations": ["p1#2"]},
            }
        ],
    )
    row = load_traces(path).table.to_pylist()[0]
    assert row["qid"] == "A0001" and row["question"] == "Does X support null keys?"
    assert row["claim"] == "X rejects null keys." and row["citations"] == ["p1#2"]
    assert row["retrieved_ids"] == ["p1#1", "p1#2"]


def test_text_answers_with_embedded_citations_and_chunks(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {
                "ts": 1699999999,
                "q": "What is X?",
                "chunks": [{"id": "p1#1"}, {"id": "p2#1"}],
                "answer": "- claim\n- citations: [p1#1, p2#1]",
                "ok": True,
            },
            {"ts": 1699999999, "q": "What is Y?", "chunks": [], "answer": "no list here", "ok": True},
        ],
    )
    loaded = load_traces(path)
    assert loaded.reader == "columnar"
    rows = loaded.table.to_pylist()
    assert rows[0]["qid"] is None and rows[0]["question"] == "What is X?"
    assert rows[0]["citations"] == ["p1#1", "p2#1"] and rows[0]["retrieved_ids"] == ["p1#1", "p2#1"]
    assert rows[1]["citations"] is None  # no citation list: not compliant


def test_layered_traces_with_a_claim_ledger(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {
                "case_id": "L1",
                "first_stage_ids": ["a", "b", "c"],
                "rerank_input_ids": ["a", "b"],
                "reranked_ids": ["b", "a"],
                "selected_context_ids": ["b"],
                "selected_versions": ["v3"],
                "versions": {"index": "2026-11-20", "retriever": "bm25-1"},
                "answer": {
                    "claims": [
                        {
                            "claim_id": "c1",
                            "text": "The release manager approves.",
                            "citation_id": "b",
                            "support_phrases": ["release manager"],
                            "answer_point": "release manager approves",
                        },
                        {"claim_id": "c2", "text": "Exceptions are logged.", "citation_id": "b"},
                        {"claim_id": "c3", "text": "Also a.", "citation_id": "a"},
                    ]
                },
            }
        ],
    )
    loaded = load_traces(path)
    assert loaded.reader == "columnar"
    row = loaded.table.to_pylist()[0]
    assert row["claim"] == "The release manager approves. Exceptions are logged. Also a."
    assert row["citations"] == ["b", "a"]
    assert row["retrieved_ids"] == ["a", "b", "c"]
    assert row["selected_context_ids"] == ["b"] and row["reranked_ids"] == ["b", "a"]


def test_a_field_first_seen_after_the_first_block_still_loads(tmp_path):
    records = [
        {"qid": f"q{i}", "retrieved_ids": ["a"], "answer_json": {"claim": "x" * 60}} for i in range(80_000)
    ]
    records.append(
        {
            "qid": "late",
            "retrieved_ids": ["a"],
            "answer_json": {"claim": "y", "citations": ["a"]},
            "selected_context_ids": ["a"],
        }
    )
    loaded = load_traces(write_jsonl(tmp_path / "t.jsonl", records))
    assert loaded.reader == "columnar" and loaded.table.num_rows == 80_001
    last = loaded.table.slice(80_000).to_pylist()[0]
    assert last["citations"] == ["a"] and last["selected_context_ids"] == ["a"]


def test_blank_lines_are_skipped(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [{"qid": "a", "answer": "x"}, {"qid": "b", "answer": "y"}],
        blank_lines_after=(0,),
    )
    assert load_traces(path).table.column("qid").to_pylist() == ["a", "b"]


def test_an_empty_trace_file_is_zero_traces(tmp_path):
    (tmp_path / "t.jsonl").write_text("\n\n")
    assert load_traces(tmp_path / "t.jsonl").table.num_rows == 0


# -- bad input: one line naming file, line, id and field -------------------------------------------


def error_of(loader, path) -> str:
    with pytest.raises(InputError) as info:
        loader(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_malformed_json_line_names_the_line(tmp_path):
    path = write_jsonl(
        tmp_path / "g.jsonl",
        [{"qid": "a", "question": "q", "answerable": True}, '{"qid": "b",'],
        blank_lines_after=(0,),
    )
    assert error_of(load_gold, path).startswith(f"{path}:3: malformed JSON")


def test_citations_not_a_list(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"qid": "a", "answer_json": {"claim": "x", "citations": ["p1"]}},
            {"qid": "b", "answer_json": {"claim": "x", "citations": "p1"}},
        ],
    )
    message = error_of(load_traces, path)
    assert message.startswith(f"{path}:2: id=b: field 'answer_json.citations'")
    assert "valid list" in message


def test_answerable_not_a_bool(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"qid": "a", "question": "q", "answerable": "yes"}])
    message = error_of(load_gold, path)
    assert message.startswith(f"{path}:1: id=a: field 'answerable'") and "boolean" in message


def test_duplicate_gold_id_names_both_lines(tmp_path):
    path = write_jsonl(
        tmp_path / "g.jsonl",
        [
            {"qid": "a", "question": "q", "answerable": True},
            {"qid": "b", "question": "q", "answerable": True},
            {"qid": "a", "question": "q2", "answerable": False},
        ],
    )
    assert error_of(load_gold, path) == f"{path}:3: id=a: field 'qid': duplicate id (first on line 1)"


def test_answerability_must_be_explicit(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"qid": "a", "question": "q"}])
    message = error_of(load_gold, path)
    assert message.startswith(f"{path}:1: id=a: field 'answerable': missing")


def test_missing_required_field(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"qid": "a", "answerable": True}])
    assert error_of(load_gold, path) == f"{path}:1: id=a: field 'question': Field required"


def test_trace_with_nothing_to_join_on(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"qid": "a"}, {"answer": "x"}])
    assert error_of(load_traces, path).startswith(f"{path}:2: field 'qid': missing")


def test_missing_file(tmp_path):
    assert error_of(load_gold, tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: file not found"


def test_empty_golden_set(tmp_path):
    (tmp_path / "g.jsonl").write_text("")
    assert "no cases" in error_of(load_gold, tmp_path / "g.jsonl")


def test_a_json_object_per_line(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"qid": "a", "answer": "x"}, '["a"]'])
    assert error_of(load_traces, path) == f"{path}:2: expected a JSON object, got list"


def test_malformed_json_array_names_the_line(tmp_path):
    path = tmp_path / "qaset.json"
    path.write_text(
        '[\n {"qid": "q1", "q": "x", "answerable": true},\n {"qid": "q2", "q": "y" "answerable": 1}\n]'
    )
    assert error_of(load_gold, path).startswith(f"{path}:3: malformed JSON")


def test_wrong_type_inside_a_json_array_names_its_line(tmp_path):
    path = tmp_path / "qaset.json"
    path.write_text(
        '[\n {"qid": "q1", "q": "x", "answerable": true},\n\n {"qid": "q2", "q": "y",\n  "answerable": 1}\n]'
    )
    assert error_of(load_gold, path).startswith(f"{path}:4: id=q2: field 'answerable'")


def test_not_utf8(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"qid": "a", "question": "\xff", "answerable": true}\n')
    assert "UTF-8" in error_of(load_gold, path)


def test_a_type_change_after_the_first_block_is_named_by_line(tmp_path):
    records = [
        {"qid": f"q{i}", "answer_json": {"claim": "x" * 60, "citations": ["a"]}} for i in range(70_000)
    ]
    records.append({"qid": "bad", "answer_json": {"claim": "y", "citations": "a"}})
    message = error_of(load_traces, write_jsonl(tmp_path / "t.jsonl", records))
    assert message.startswith(f"{tmp_path / 't.jsonl'}:70001: id=bad: field 'answer_json.citations'")


def test_layered_trace_canonical_ledger_and_versions(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"case_id": "L1", "versions": {"index": "ix-7", "retriever": "bm25"},
             "answer": {"claims": [{"text": "A.", "citation_id": "c1", "support_phrases": ["a"]},
                                   {"text": "B.", "answer_point": "p"}]}},
            {"case_id": "L2", "answer": {"claim": "plain"}},
        ],
    )  # fmt: skip
    loaded = load_traces(path)
    assert loaded.reader == "columnar"
    first, second = loaded.table.to_pylist()
    assert first["claims"] == [
        {"text": "A.", "citation_id": "c1", "support_phrases": ["a"], "answer_point": None},
        # No support phrases given: null (its tokens decide), not the empty list (vacuously supported).
        {"text": "B.", "citation_id": None, "support_phrases": None, "answer_point": "p"},
    ]
    assert first["version_keys"] == ["index", "retriever"] and first["index_version"] == "ix-7"
    assert second["claims"] is None and second["version_keys"] is None


def test_a_repeated_version_key_is_kept_for_admissibility(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"case_id": "L1", "versions": {"index": "a", "retriever": "r", "index": "b"}}\n')
    row = load_traces(path).table.to_pylist()[0]
    assert row["version_keys"] == ["index", "retriever", "index"] and row["index_version"] == "b"


def test_gold_tags_are_a_map(tmp_path):
    path = write_jsonl(
        tmp_path / "g.jsonl",
        [{"case_id": "L1", "question": "q", "required_source_ids": ["a"], "tags": {"workflow": "freeze"}},
         {"case_id": "L2", "question": "q", "required_source_ids": ["a"], "tags": {"topic": "FIN"}}],
    )  # fmt: skip
    assert load_gold(path).table.column("tags").to_pylist() == [[("workflow", "freeze")], [("topic", "FIN")]]


# -- production fields: event time, tags, latency, tokens, outcome.refused ----------------------------

PRODUCTION_TRACES = [
    {"request_id": "r1", "ts": "2026-11-20T10:00:00Z", "retrieved_ids": ["a"],
     "answer_json": {"claim": "x", "citations": ["a"]}, "latency_ms": 412,
     "token_usage": {"prompt": 900, "completion": 40}, "tags": {"workflow": "freeze", "topic": "FIN"}},
    {"request_id": "r2", "ts": "2026-11-20", "retrieved_ids": [], "answer_json": {"claim": "Revenue 8.18b"},
     "latency_ms": 97.5, "token_usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
     "outcome": {"refused": True, "route": "llm"}, "tags": {}},
    {"request_id": "r3", "retrieved_ids": ["a"], "answer_json": {"claim": "not in context"},
     "outcome": {"refused": False}, "tags": {"topic": None}},
    {"request_id": "r4", "ts": None, "retrieved_ids": ["a"], "answer_json": {"claim": "y"},
     "token_usage": {"completion": 5}, "outcome": {"route": "rules"}, "latency_ms": None},
]  # fmt: skip
PRODUCTION_COLUMNS = {
    "ts": ["2026-11-20T10:00:00Z", "2026-11-20", None, None],
    # Keys sorted: JSON key order means nothing, and both readers must agree on it.
    "tags": [[("topic", "FIN"), ("workflow", "freeze")], [], [], None],
    "latency_ms": [412.0, 97.5, None, None],
    "prompt_tokens": [900, 10, None, None],
    "completion_tokens": [40, 2, None, 5],
    "outcome_refused": [None, True, False, None],
}


def production_columns(loaded) -> dict:
    return {name: loaded.table.column(name).to_pylist() for name in PRODUCTION_COLUMNS}


def test_production_fields_load_with_the_columnar_reader(tmp_path):
    loaded = load_traces(write_jsonl(tmp_path / "t.jsonl", PRODUCTION_TRACES))
    assert loaded.reader == "columnar"
    assert production_columns(loaded) == PRODUCTION_COLUMNS


def test_production_fields_load_with_the_record_reader(tmp_path):
    path = tmp_path / "t.json"  # a JSON array: only the record reader reads it
    path.write_text(json.dumps(PRODUCTION_TRACES))
    loaded = load_traces(path)
    assert loaded.reader == "record"
    assert production_columns(loaded) == PRODUCTION_COLUMNS


@pytest.mark.parametrize(
    ("written", "text"),
    [
        ([1700000000, 1700000001], ["1700000000", "1700000001"]),
        ([1700000000.25, 1700000000.0], ["1700000000.25", "1700000000"]),  # a whole float reads as an int
        ([1700000000, 1700000000.5], ["1700000000", "1700000000.5"]),  # ints and floats mixed in a column
        ([1700000000123.5, 1e-7], ["1700000000123.5", "1e-07"]),  # Python's repr, via the record reader
    ],
)
def test_epoch_timestamps_are_text_the_same_in_both_readers(tmp_path, written, text):
    records = [{"qid": f"q{i}", "ts": ts} for i, ts in enumerate(written)]
    lines = load_traces(write_jsonl(tmp_path / "t.jsonl", records))
    (tmp_path / "t.json").write_text(json.dumps(records))
    array = load_traces(tmp_path / "t.json")
    assert lines.table.column("ts").to_pylist() == array.table.column("ts").to_pylist() == text


def test_token_counts_written_as_whole_floats_load(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"qid": "a", "token_usage": {"prompt": 12.0}}])
    loaded = load_traces(path)
    assert loaded.reader == "record" and loaded.table.column("prompt_tokens").to_pylist() == [12]


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("outcome", {"refused": "yes"}, "outcome.refused must be true or false"),
        ("outcome", {"refused": 1}, "outcome.refused must be true or false"),
        ("token_usage", {"prompt": "many"}, "valid integer"),
        ("token_usage", {"completion_tokens": 2**64}, "less than"),
        ("tags", {"topic": 3}, "valid string"),
        ("latency_ms", "fast", "valid number"),
    ],
)
def test_malformed_production_fields_name_the_line_and_field(tmp_path, field, value, words):
    path = write_jsonl(tmp_path / "t.jsonl", [{"qid": "a"}, {"qid": "b", field: value}])
    message = error_of(load_traces, path)
    assert message.startswith(f"{path}:2: id=b: field '{field}") and words in message


def test_a_latency_that_is_not_a_number_is_rejected(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"qid": "a", "latency_ms": NaN}\n')  # Python's json reads NaN; no metric may see it
    message = error_of(load_traces, path)
    assert message.startswith(f"{path}:1: id=a: field 'latency_ms'") and "finite" in message

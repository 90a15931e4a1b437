"""The typed fast read streams its batches into the canonical statement: what a later batch says still
decides the whole file, after earlier batches were already mapped.

The batches are made small here so that a 1,500-line file is many of them, and the sniff (the first
1,000 lines) sees only the first few."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline import line_guards
from ragspine_pipeline.contracts import columns, fast
from ragspine_pipeline.errors import InputError

LINES = 1500


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(fast, "_BATCH_ROWS", 64)


def _traces(tmp_path, late: dict, from_line: int = 1200):
    path = tmp_path / "traces.jsonl"
    records = []
    for n in range(1, LINES + 1):
        record = {"qid": f"q{n}", "answer_json": {"claim": f"answer {n}", "citations": ["p1"]}}
        records.append({**record, **(late if n >= from_line else {})})
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_name_first_given_after_the_sniff_is_read_by_the_fast_read_all_the_same(tmp_path):
    path = _traces(tmp_path, {"latency_ms": 12.5, "retrieved_ids": ["p1", "p2"]})
    table = columns._columnar(path, columns._TRACE)
    assert table is not None  # vouched for: read once more with the later names, not deferred
    assert table.to_pylist() == columns._by_records(path, columns._TRACE).to_pylist()
    assert table.column("latency_ms").null_count == 1199
    assert table.column("retrieved_ids").to_pylist()[-1] == ["p1", "p2"]


def test_a_mistyped_value_in_a_later_batch_sends_the_file_to_the_record_reader(tmp_path):
    path = _traces(tmp_path, {"latency_ms": "fast"}, from_line=1300)
    assert columns._columnar(path, columns._TRACE) is None
    with pytest.raises(InputError) as raised:
        columns.load_traces(path)
    assert ":1300:" in str(raised.value) and "latency_ms" in str(raised.value)


def test_a_required_field_missing_in_a_later_batch_sends_the_golden_set_to_the_record_reader(tmp_path):
    path = tmp_path / "gold.jsonl"
    lines = [
        {"qid": f"q{n}", "question": f"question {n}", "answerable": False}
        if n != 1400
        else {"qid": f"q{n}", "answerable": False}
        for n in range(1, LINES + 1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert columns._columnar(path, columns._GOLD) is None
    with pytest.raises(InputError) as raised:
        columns.load_gold(path)
    assert ":1400:" in str(raised.value) and "question" in str(raised.value)


@pytest.mark.parametrize("comma", ['{"qid": "q1300", }', '{"qid": "q1300", "retrieved_ids": ["a", ]}'])
def test_a_trailing_comma_after_the_sniff_is_named_not_read(tmp_path, comma):
    """DuckDB's JSON reader takes a comma before a closing bracket; JSON does not."""
    path = _traces(tmp_path, {})
    lines = path.read_text().splitlines()
    lines[1299] = comma
    path.write_text("\n".join(lines) + "\n")
    assert columns._columnar(path, columns._TRACE) is None
    with pytest.raises(InputError, match=r":1300: malformed JSON"):
        columns.load_traces(path)


def test_a_trailing_comma_split_across_the_guards_blocks_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(line_guards, "_GUARD_BLOCK", 16)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"qid": "a1234",' + b"  \n  }\n")  # the comma ends the first block
    assert not line_guards.plain_json_lines(path)
    path.write_bytes(b'{"qid": "a1234"}' + b'  \n{"a": "x, ]"}\n')  # in a string: only time is lost
    assert not line_guards.plain_json_lines(path)
    path.write_bytes(b'{"qid": "a1234"}' + b'  \n{"a": ["x"]}\n')
    assert line_guards.plain_json_lines(path)

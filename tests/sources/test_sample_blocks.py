"""The sampler's columnar fast path decides exactly as the record reader would, line for line."""

from __future__ import annotations

import io
import json
import random
import tempfile

import pytest

from ragspine_pipeline.sources import sampling, shards, trace_store
from ragspine_pipeline.sources.sample_blocks import BlockReader, BlockTraces
from ragspine_pipeline.sources.trace_store import RawBlock, block_lines, split_blocks, split_lines
from tests.sources.test_sampling import DAY, write_day


def trace(i: int, **extra) -> dict:
    return {
        "request_id": f"r{i:05d}",
        "ts": "2024-05-01T10:00:00Z",
        "answer": {"claim": f"claim {i}", "citations": [f"c{i % 7}"]},
        "latency_ms": 100 + i % 50,
        "tags": {"topic": ("billing", "access", "oncall")[i % 3]},
        **extra,
    }


# Lines the record reader accepts, rejects or reads in a way the columnar reader must not get wrong.
TRICKY = [
    '{"request_id": "t1", "x": NaN}',  # pyarrow reads NaN; JSON does not
    '{"request_id": "t2", "latency_ms": -Infinity}',
    '{"request_id": "t3", "note": "NaN is fine inside a string"}',
    '{"request_id": "t4"}{"request_id": "t5"}',  # two objects on one line: pyarrow reads two rows
    '{"request_id": "t6", "n": 1e400}',  # json.loads reads inf, pyarrow refuses: quarantined
    '{"request_id": "t7\\ud800"}',  # a lone surrogate escape: json.loads reads it; pyarrow refuses
    '{"request_id": "t8", "answer": "text", "citations": ["a"]}',  # answer as text in an object block
    '{"request_id": 17, "answer": {"claim": "an integer id"}}',
    '{"request_id": true}',
    '{"request_id": 1.5}',
    '{"qid": null, "request_id": "t9"}',  # null means absent: the next alias gives the id
    '{"request_id": "t10", "tags": {"topic": null}}',
    '{"request_id": "t11", "tags": null}',
    '{"request_id": "t12", "tags": {"topic": 3}}',
    '{"request_id": "t13", "outcome": {"refused": "yes"}}',
    '{"request_id": "t14", "outcome": {"refused": true}, "ok": 1}',
    '{"request_id": "t15", "token_usage": {"prompt_tokens": 1.5}}',
    '{"request_id": "t16", "token_usage": {"prompt_tokens": 9223372036854775808}}',
    '{"request_id": "t17", "ts": 1700000000}',
    '{"request_id": "t18", "request_id": "t18b"}',  # a repeated key: the last one wins in json.loads
    '   {"request_id": "t19"}   ',
    '{"request_id": "t20"}\r',
    '{"request_id": ""}',
    '{"request_id": " \\t"}',
    '{"question": "no id at all"}',
    "[1, 2]",
    '"just a string"',
    '{"request_id": "t21", "answer": ',
    '{"request_id": "t22", "retrieved_ids": [1, 2]}',
    '{"request_id": "t23", "retrieved_ids": ["a", null]}',
    '{"request_id": "t24", "answer": {"claims": [{"text": "a ledger claim", "citation_id": "c1"}]}}',
    '{"request_id": "t25", "answer": {"claims": [{"citation_id": "c1"}]}}',  # a claim without text
    '{"request_id": "t26", "chunks": [{"id": "c1"}, {"id": 2}]}',
    '{"request_id": "t27", "outcome": {"clarification_mode": "maybe"}}',
    '{"request_id": "t28", "versions": {"index": "v1", "bad": 1}}',
    '{"request_id": "\\u00e9t\\u00e9 \\ud83d\\ude00"}',
    '{"request_id": "t29", "nested": ' + "[" * 50 + "]" * 50 + "}",
    "\x0c",
    '{"request_id": "r00003", "answer": {"claim": "a duplicate with other content"}}',
    '{"request_id": "t30", "retrieved_ids": ["a",]}',  # a trailing comma: DuckDB reads it, JSON does not
    '{"request_id": "t31", "answer": "a comma and a bracket, ] in a string are fine"}',
]


def corpus(seed: int) -> list[str]:
    good = [json.dumps(trace(i)) for i in range(200)]
    lines = good + TRICKY + good[:20]  # exact repeats too
    random.Random(seed).shuffle(lines)
    return lines


class RecordsOnly(BlockReader):
    """Every line to the record reader: what the sampler was before the columnar reader."""

    def read(self, block):
        return BlockTraces(block.source, leftovers=list(block_lines(block)))


@pytest.mark.parametrize("stratify", [None, "topic"])
@pytest.mark.parametrize("block_size", [300, 4096, 1 << 20])
def test_columnar_and_record_readers_give_the_same_sample(tmp_path, monkeypatch, stratify, block_size):
    lines = corpus(1)
    store = write_day(tmp_path / "store", {"a.jsonl": lines[:130], "b.jsonl.gz": lines[130:]})
    monkeypatch.setattr(trace_store, "BLOCK_SIZE", block_size)

    def run(name: str):
        quarantine = tmp_path / f"{name}.jsonl"
        sample = sampling.sample_day(
            store, DAY, n=60, seed=3, quarantine=quarantine, stratify=stratify, floor=5
        )
        return sample.records, sample.counts, sample.allocation, quarantine.read_text()

    fast = run("fast")
    monkeypatch.setattr(shards, "BlockReader", RecordsOnly)
    assert fast == run("records")
    records, counts, _, quarantined = fast
    # NaN, -Infinity, 1e400 (no JSON for infinity), two objects, an array, a string, a truncated line, a
    # trailing comma; the twelve type errors of TRICKY; an empty id, a blank id, no id.
    assert counts["quarantined"] == {"invalid_json": 8, "invalid_trace": 12, "missing_request_id": 3}
    assert len(records) == 60 and len(quarantined.splitlines()) == sum(counts["quarantined"].values())


def test_clean_blocks_need_no_record_reader():
    lines = [json.dumps(trace(i)) for i in range(2000)]
    reader = BlockReader("topic")
    traces = reader.read(RawBlock("s", 1, "\n".join(lines).encode()))
    assert traces.leftovers == [] and len(traces.request_ids) == 2000
    assert traces.strata[:3].to_pylist() == ["billing", "access", "oncall"]
    assert [traces.lines[i] for i in (0, 1999)] == [lines[0].encode(), lines[1999].encode()]


def test_one_bad_line_alone_goes_to_the_record_reader():
    lines = [json.dumps(trace(i)) for i in range(4000)]
    lines[2345] = '{"request_id": "bad", "latency_ms": "slow"}'
    traces = BlockReader(None).read(RawBlock("s", 10, "\n".join(lines).encode()))
    assert [(line.line_no, line.text) for line in traces.leftovers] == [(2345 + 10, lines[2345])]
    assert len(traces.request_ids) == 3999


def test_split_blocks_keeps_whole_lines_and_their_numbers():
    text = b"".join(b'{"n": %d}\n' % i + (b"\n" if i % 4 == 0 else b"") for i in range(300)) + b'{"last": 1}'
    blocks = list(split_blocks(io.BytesIO(text), "s", size=64))
    assert b"".join(block.data for block in blocks) == text
    assert all(block.data.endswith(b"\n") for block in blocks[:-1])
    by_line = {line.line_no: line.text for line in split_lines(io.BytesIO(text), "s")}
    expected = {i + 1: raw.decode() for i, raw in enumerate(text.split(b"\n")) if raw}
    assert by_line == expected


def test_read_ahead_keeps_order_raises_the_readers_error_and_stops_early():
    closed = []

    def blocks(fail_after: int | None):
        try:
            for i in range(6):
                if i == fail_after:
                    raise trace_store.SourceError("s3://b/k", "cannot read: boom")
                yield RawBlock("s", i, b"%d" % i)
        finally:
            closed.append(fail_after)

    assert [b.first_line for b in trace_store.read_ahead(blocks(None))] == list(range(6))
    seen = []
    with pytest.raises(trace_store.SourceError, match="boom"):
        for block in trace_store.read_ahead(blocks(3)):
            seen.append(block.first_line)
    assert seen == [0, 1, 2]
    reader = trace_store.read_ahead(blocks(99), depth=1)
    assert next(reader).first_line == 0
    reader.close()  # the consumer stops: the reader thread stops and closes its generator
    assert closed == [None, 3, 99]


def test_only_strata_that_occur_are_reported(tmp_path):
    lines = [json.dumps(trace(i)) for i in range(300)]  # every trace tagged: no "(none)" stratum
    store = write_day(tmp_path, {"a.jsonl": lines})
    sample = sampling.sample_day(store, DAY, n=30, seed=1, quarantine=None, stratify="topic", floor=5)
    assert set(sample.allocation["strata"]) == {"billing", "access", "oncall"}
    assert all(s["population"] == 100 for s in sample.allocation["strata"].values())


def test_a_clean_block_is_vouched_for_by_the_typed_read_alone():
    lines = [json.dumps(trace(i)) for i in range(3000)]
    lines[7] = json.dumps({**trace(7), "request_id": 7})  # an integer id: its decimal text
    reader = BlockReader("topic")
    traces = reader.read(RawBlock("s", 1, "\n".join(lines).encode()))
    assert reader._sql is None  # the per-line statement was never needed, so never planned
    assert traces.leftovers == [] and traces.request_ids[6:9] == ["r00006", "7", "r00008"]


def test_a_line_that_is_not_json_is_left_out_of_the_typed_read_not_its_whole_block():
    lines = [json.dumps(trace(i)) for i in range(3000)]
    lines[1234] = '{"request_id": "broken", "answer": "x"'  # starts as an object, yet is not JSON
    lines[1500] = '{"request_id": "comma", }'  # DuckDB reads a trailing comma; JSON does not
    lines[2000] = '{"request_id": "nan", "latency_ms": NaN}'
    reader = BlockReader(None)
    traces = reader.read(RawBlock("s", 1, "\n".join(lines).encode()))
    assert reader._sql is None
    assert [line.line_no for line in traces.leftovers] == [1235, 1501, 2001]
    assert len(traces.request_ids) == 2997


def test_a_temporary_folder_that_cannot_be_written_costs_time_not_the_sample(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    lines = [json.dumps(trace(i)) for i in range(300)]
    traces = BlockReader("topic").read(RawBlock("s", 1, "\n".join(lines).encode()))
    assert traces.leftovers == [] and len(traces.request_ids) == 300

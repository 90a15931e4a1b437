"""The daily sample: deterministic whatever the listing, duplicates counted, bad lines quarantined."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import pytest

from ragspine_pipeline.sources.sampling import QUARANTINE_REASONS, sample_day, write_jsonl
from ragspine_pipeline.sources.trace_store import LocalTraceStore, S3TraceStore

DAY = "2024-05-01"

GOOD = [
    json.dumps(
        {"request_id": f"r{i:03d}", "answer": {"claim": f"claim {i}", "citations": [f"c{i}"]}, "ok": True}
    )
    for i in range(40)
]
# Same request ids as GOOD lines, different content: whichever is kept must not depend on the order.
DUPLICATES = [
    json.dumps({"qid": "r001", "answer": {"claim": "a second answer"}}),
    json.dumps({"request_id": "r002", "answer": "third form", "tags": {"topic": "x"}}),
    json.dumps({"request_id": "r002", "answer": "fourth form"}),
    GOOD[3],  # an exact repeat
]
BAD = {
    "invalid_json": ['{"request_id": "r900", ', "[1, 2]", '{"request_id": "r901", "latency_ms": NaN}'],
    "invalid_trace": [json.dumps({"request_id": "r902", "retrieved_ids": "c1"})],
    "missing_request_id": [json.dumps({"question": "who?", "answer": "me"}), json.dumps({"request_id": " "})],
}
ALL_BAD = [line for lines in BAD.values() for line in lines]


def write_day(root: Path, files: dict[str, list[str]]) -> LocalTraceStore:
    """Write each file's lines (a ``.gz`` name is gzipped) with a blank line after every third."""
    folder = root / f"dt={DAY}"
    folder.mkdir(parents=True)
    for name, lines in files.items():
        text = "".join(line + ("\n\n" if i % 3 == 2 else "\n") for i, line in enumerate(lines)).encode()
        (folder / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return LocalTraceStore(root)


def split_shuffled(lines: list[str], names: list[str], seed: int) -> dict[str, list[str]]:
    lines = list(lines)
    random.Random(seed).shuffle(lines)
    return {name: lines[i :: len(names)] for i, name in enumerate(names)}


def test_same_lines_in_other_files_and_orders_give_identical_bytes(tmp_path):
    lines = GOOD + DUPLICATES + ALL_BAD
    layouts = [
        split_shuffled(lines, ["part-0.jsonl", "part-1.jsonl.gz"], seed=1),
        split_shuffled(lines, ["z.jsonl.gz", "b.jsonl", "a.jsonl"], seed=2),
        {"all.jsonl": list(reversed(lines))},
    ]
    outputs = []
    for i, layout in enumerate(layouts):
        sample = sample_day(write_day(tmp_path / f"s{i}", layout), DAY, n=10, seed=42, quarantine=None)
        write_jsonl(sample.records, tmp_path / f"sample{i}.jsonl")
        outputs.append((tmp_path / f"sample{i}.jsonl").read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    assert len(outputs[0].splitlines()) == 10
    other_seed = sample_day(write_day(tmp_path / "seed", layouts[0]), DAY, n=10, seed=43, quarantine=None)
    assert [r for r in other_seed.records] != [json.loads(line) for line in outputs[0].splitlines()]


def test_the_sample_is_the_smallest_priorities_sorted_by_request_id(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": GOOD + DUPLICATES})
    sample = sample_day(store, DAY, n=7, seed=5, quarantine=None)

    def priority(rid: str) -> bytes:
        return hashlib.blake2b(f"5:{rid}".encode(), digest_size=16).digest()

    expected = sorted(sorted({f"r{i:03d}" for i in range(40)}, key=priority)[:7])
    assert [record.get("request_id", record.get("qid")) for record in sample.records] == expected


def test_counts_duplicates_and_quarantine(tmp_path):
    layout = {"a.jsonl": GOOD[:20] + ALL_BAD[:3] + DUPLICATES, "b.jsonl.gz": GOOD[20:] + ALL_BAD[3:]}
    store = write_day(tmp_path / "store", layout)
    quarantine = tmp_path / "q" / "quarantine.jsonl"
    sample = sample_day(store, DAY, n=1000, seed=1, quarantine=quarantine)
    assert sample.counts == {
        "read": len(GOOD) + len(DUPLICATES) + len(ALL_BAD),
        "valid": len(GOOD) + len(DUPLICATES),
        "duplicates": len(DUPLICATES),
        "quarantined": {reason: len(BAD[reason]) for reason in QUARANTINE_REASONS},
        "sampled": len(GOOD),
    }
    assert sample.quarantine_path == quarantine
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert {e["raw"] for e in entries} == set(ALL_BAD)
    for entry in entries:
        assert set(entry) == {"source", "line", "reason", "field", "error", "raw"}
        name = Path(entry["source"]).name
        with (gzip.open if name.endswith(".gz") else open)(entry["source"], "rt") as fh:
            assert fh.read().split("\n")[entry["line"] - 1] == entry["raw"]  # names the exact line
        assert entry["reason"] in BAD and entry["raw"] in BAD[entry["reason"]]
    by_raw = {e["raw"]: e for e in entries}
    assert by_raw[BAD["invalid_trace"][0]]["field"] == "retrieved_ids"
    assert by_raw[BAD["missing_request_id"][0]]["field"] == "qid"
    assert by_raw[BAD["invalid_json"][2]]["error"] == "malformed JSON: NaN is not valid JSON"


def test_quarantine_appends(tmp_path):
    store = write_day(tmp_path / "store", {"a.jsonl": GOOD[:2] + ALL_BAD})
    quarantine = tmp_path / "quarantine.jsonl"
    sample_day(store, DAY, n=5, seed=1, quarantine=quarantine)
    sample_day(store, DAY, n=5, seed=1, quarantine=quarantine)
    assert len(quarantine.read_text().splitlines()) == 2 * len(ALL_BAD)


def test_no_bad_lines_no_quarantine_file(tmp_path):
    store = write_day(tmp_path / "store", {"a.jsonl": GOOD})
    sample = sample_day(store, DAY, n=3, seed=1, quarantine=tmp_path / "quarantine.jsonl")
    assert sample.quarantine_path is None and not (tmp_path / "quarantine.jsonl").exists()


def test_n_larger_than_the_day_keeps_every_valid_trace(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": GOOD + DUPLICATES + ALL_BAD})
    sample = sample_day(store, DAY, n=10_000, seed=3, quarantine=None)
    assert [r.get("request_id", r.get("qid")) for r in sample.records] == [f"r{i:03d}" for i in range(40)]
    assert sample_day(store, DAY, n=0, seed=3, quarantine=None).records == []
    with pytest.raises(ValueError):
        sample_day(store, DAY, n=-1, seed=3, quarantine=None)


def test_an_empty_day(tmp_path):
    (tmp_path / "dt=2024-05-02").mkdir()
    sample = sample_day(LocalTraceStore(tmp_path), DAY, n=5, seed=1, quarantine=tmp_path / "q.jsonl")
    assert sample.records == [] and sample.counts["read"] == 0 and sample.quarantine_path is None


def test_undecodable_bytes_are_quarantined_not_fatal(tmp_path):
    folder = tmp_path / f"dt={DAY}"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(GOOD[0].encode() + b'\n{"request_id": "r\xff"}\n')
    sample = sample_day(LocalTraceStore(tmp_path), DAY, n=5, seed=1, quarantine=tmp_path / "q.jsonl")
    assert sample.counts["quarantined"]["invalid_json"] == 1 and sample.counts["sampled"] == 1
    entry = json.loads((tmp_path / "q.jsonl").read_text())
    assert entry["line"] == 2 and entry["error"].startswith("not UTF-8 text")


def test_s3_and_local_give_the_same_sample(tmp_path, bucket):
    name, client = bucket
    layout = split_shuffled(GOOD + DUPLICATES + ALL_BAD, ["a.jsonl", "b.jsonl.gz"], seed=9)
    local = write_day(tmp_path / "local", layout)
    for path in (tmp_path / "local").rglob("*.jsonl*"):
        client.put_object(
            Bucket=name, Key=f"t/{path.relative_to(tmp_path / 'local')}", Body=path.read_bytes()
        )
    s3 = sample_day(S3TraceStore(name, "t", client), DAY, n=12, seed=8, quarantine=None)
    assert s3.records == sample_day(local, DAY, n=12, seed=8, quarantine=None).records
    assert s3.counts["quarantined"] == {reason: len(BAD[reason]) for reason in QUARANTINE_REASONS}

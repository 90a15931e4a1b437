"""The daily sample: deterministic whatever the listing, duplicates counted, bad lines quarantined."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import random
import stat
from collections import Counter
from pathlib import Path

import pytest

from ragspine_pipeline.files import write_jsonl
from ragspine_pipeline.sources.sampling import QUARANTINE_REASONS, priority, sample_day
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
        "quarantine_kept": len(ALL_BAD),
        "quarantine_omitted": 0,
    }
    assert sample.quarantine_path == quarantine
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert {e["raw"] for e in entries} == set(ALL_BAD)
    for entry in entries:
        assert set(entry) == {"source", "line", "reason", "field", "error", "raw", "raw_base64", "raw_bytes"}
        assert base64.b64decode(entry["raw_base64"]) == entry["raw"].encode()
        assert entry["raw_bytes"] == len(entry["raw"].encode())
        name = Path(entry["source"]).name
        with (gzip.open if name.endswith(".gz") else open)(entry["source"], "rt") as fh:
            assert fh.read().split("\n")[entry["line"] - 1] == entry["raw"]  # names the exact line
        assert entry["reason"] in BAD and entry["raw"] in BAD[entry["reason"]]
    by_raw = {e["raw"]: e for e in entries}
    assert by_raw[BAD["invalid_trace"][0]]["field"] == "retrieved_ids"
    assert by_raw[BAD["missing_request_id"][0]]["field"] == "qid"
    assert by_raw[BAD["invalid_json"][2]]["error"] == "malformed JSON: NaN is not valid JSON"


def test_a_rerun_replaces_the_quarantine(tmp_path):
    store = write_day(tmp_path / "store", {"a.jsonl": GOOD[:2] + ALL_BAD})
    quarantine = tmp_path / "quarantine.jsonl"
    sample_day(store, DAY, n=5, seed=1, quarantine=quarantine)
    sample_day(store, DAY, n=5, seed=1, quarantine=quarantine)
    assert len(quarantine.read_text().splitlines()) == len(ALL_BAD)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_the_quarantine_is_written_through_the_atomic_write(tmp_path, monkeypatch):
    """Synced, renamed over the old file and its folder synced (``files.replacing``); through a symbolic
    link to the file, whose permission bits it keeps."""
    store = write_day(tmp_path / "store", {"a.jsonl": GOOD[:2] + ALL_BAD})
    folder = tmp_path / "q"
    folder.mkdir()
    real = folder / f"quarantine-{DAY}.jsonl"
    real.write_text("yesterday\n")
    real.chmod(0o640)
    link = folder / "quarantine.jsonl"
    link.symlink_to(real.name)
    synced: list[os.stat_result] = []  # what each os.fsync synced; the real fsync still runs
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    sample_day(store, DAY, n=5, seed=1, quarantine=link)

    assert link.is_symlink() and len(real.read_text().splitlines()) == len(ALL_BAD)
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    inode = {(s.st_dev, s.st_ino) for s in synced}
    assert (real.stat().st_dev, real.stat().st_ino) in inode  # the new file, before its rename
    assert (folder.stat().st_dev, folder.stat().st_ino) in inode  # and its folder, after it
    assert sorted(p.name for p in folder.iterdir()) == ["quarantine-2024-05-01.jsonl", "quarantine.jsonl"]


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


# -- stratified ------------------------------------------------------------------------------------------

TOPIC_SIZES = {"billing": 400, "search": 120, "legal": 12}
TAGGED = [
    json.dumps(
        {"request_id": f"{topic[:3]}{i:04d}", "answer": f"a{i}", "tags": {"topic": topic, "lang": "en"}}
    )
    for topic, size in TOPIC_SIZES.items()
    for i in range(size)
]
UNTAGGED = [json.dumps({"request_id": f"none{i:03d}", "answer": "x"}) for i in range(8)]
OTHER_TAGS = [
    json.dumps({"request_id": f"lang{i:03d}", "answer": "x", "tags": {"lang": "fr"}}) for i in range(8)
]
STRATIFIED_DAY = TAGGED + UNTAGGED + OTHER_TAGS


def topic_of(record: dict) -> str:
    return (record.get("tags") or {}).get("topic", "(none)")


def test_stratified_sample_is_identical_whatever_the_files_and_order(tmp_path):
    lines = STRATIFIED_DAY + DUPLICATES + ALL_BAD
    layouts = [
        split_shuffled(lines, ["part-0.jsonl", "part-1.jsonl.gz"], seed=1),
        split_shuffled(lines, ["c.jsonl.gz", "b.jsonl", "a.jsonl", "d.jsonl"], seed=2),
        {"all.jsonl": list(reversed(lines))},
    ]
    outputs, allocations = [], []
    for i, layout in enumerate(layouts):
        store = write_day(tmp_path / f"s{i}", layout)
        sample = sample_day(store, DAY, n=100, seed=42, quarantine=None, stratify="topic", floor=20)
        write_jsonl(sample.records, tmp_path / f"sample{i}.jsonl")
        outputs.append((tmp_path / f"sample{i}.jsonl").read_bytes())
        allocations.append(json.dumps(sample.allocation))
    assert outputs[0] == outputs[1] == outputs[2]
    assert allocations[0] == allocations[1] == allocations[2]
    # r002 is tagged "x" on one line and untagged on another: it counts in both strata's populations but
    # is sampled only where its smallest content hash lies; "x" has nothing else to give.
    allocation = json.loads(allocations[0])
    assert allocation["conflicts"] == 1
    assert allocation["strata"]["x"] == {"population": 1, "allocated": 1, "sampled": 0}
    assert len(outputs[0].splitlines()) == 99 == sum(v["sampled"] for v in allocation["strata"].values())


def test_stratified_allocation_floors_and_proportions(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": STRATIFIED_DAY})
    sample = sample_day(store, DAY, n=200, seed=7, quarantine=None, stratify="topic", floor=20)
    allocation = sample.allocation
    strata = allocation["strata"]
    assert {
        key: allocation[key] for key in ("dimension", "floor", "seed", "n", "exceeded_n", "conflicts")
    } == {
        "dimension": "topic",
        "floor": 20,
        "seed": 7,
        "n": 200,
        "exceeded_n": False,
        "conflicts": 0,
    }
    assert list(strata) == sorted(strata)
    assert {s: v["population"] for s, v in strata.items()} == {**TOPIC_SIZES, "(none)": 16}
    assert strata["legal"] == {"population": 12, "allocated": 12, "sampled": 12}  # below the floor: all
    assert strata["(none)"]["allocated"] == 16  # untagged and other-dimension traces share "(none)"
    assert strata["search"]["allocated"] == 40  # 172 · 120/520 = 39.7, rounded by largest remainder
    assert strata["billing"]["allocated"] == 132
    assert sum(v["allocated"] for v in strata.values()) == 200 == sample.counts["sampled"]
    assert Counter(topic_of(r) for r in sample.records) == {s: v["sampled"] for s, v in strata.items()}
    ids = [r["request_id"] for r in sample.records]
    assert ids == sorted(ids)


def test_each_stratum_keeps_its_smallest_priorities(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": STRATIFIED_DAY})
    sample = sample_day(store, DAY, n=60, seed=3, quarantine=None, stratify="topic", floor=10)
    for stratum, entry in sample.allocation["strata"].items():
        population = [json.loads(line) for line in STRATIFIED_DAY if topic_of(json.loads(line)) == stratum]
        expected = sorted(r["request_id"] for r in population)
        expected = sorted(expected, key=lambda rid: priority(3, rid))[: entry["allocated"]]
        assert sorted(r["request_id"] for r in sample.records if topic_of(r) == stratum) == sorted(expected)


def test_floors_above_n_give_every_stratum_its_floor(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": STRATIFIED_DAY})
    sample = sample_day(store, DAY, n=30, seed=3, quarantine=None, stratify="topic", floor=25)
    strata = sample.allocation["strata"]
    assert sample.allocation["exceeded_n"] is True
    assert {s: v["allocated"] for s, v in strata.items()} == {
        "(none)": 16,
        "billing": 25,
        "legal": 12,
        "search": 25,
    }
    assert sample.counts["sampled"] == 78


def test_stratified_duplicates_and_conflicting_tags(tmp_path):
    first = {"request_id": "leg0000", "answer": "a0", "tags": {"topic": "legal", "lang": "en"}}
    moved = json.dumps({**first, "tags": {"topic": "billing"}, "answer": "z"})
    store = write_day(tmp_path, {"a.jsonl": [*STRATIFIED_DAY, TAGGED[0], moved]})
    sample = sample_day(store, DAY, n=10_000, seed=1, quarantine=None, stratify="topic", floor=5)
    strata = sample.allocation["strata"]
    assert sample.counts["duplicates"] == 2 and sample.allocation["conflicts"] == 1
    assert strata["billing"]["population"] == 401 and strata["legal"]["population"] == 12
    # chosen in both strata, kept once: the record with the smaller content hash
    kept = [r for r in sample.records if r["request_id"] == "leg0000"]
    contents = {
        line: hashlib.blake2b(line.encode(), digest_size=16).digest() for line in (TAGGED[-12], moved)
    }
    assert kept == [json.loads(min(contents, key=contents.get))]
    assert sum(v["sampled"] for v in strata.values()) == sample.counts["sampled"] == len(STRATIFIED_DAY)


def test_without_stratify_no_allocation(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": STRATIFIED_DAY})
    plain = sample_day(store, DAY, n=20, seed=1, quarantine=None)
    assert plain.allocation is None and "redacted" not in plain.counts
    with pytest.raises(ValueError):
        sample_day(store, DAY, n=20, seed=1, quarantine=None, stratify="topic", floor=-1)


# -- redaction hook --------------------------------------------------------------------------------------


def fake_redact(record: dict) -> tuple[dict, Counter]:
    """Replaces the answer of every record by a placeholder: one EMAIL per record, a PHONE for even ids."""
    found = Counter(EMAIL=1)
    if int(record["request_id"][1:]) % 2 == 0:
        found["PHONE"] = 2
    return {**record, "answer": "[EMAIL]"}, found


def test_the_redaction_hook_sees_kept_records_only_and_is_counted(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": GOOD + DUPLICATES + ALL_BAD})
    seen: list[str] = []

    def spy(record: dict) -> tuple[dict, Counter]:
        seen.append(record["request_id"] if "request_id" in record else record["qid"])
        return fake_redact(record)

    plain = sample_day(store, DAY, n=9, seed=4, quarantine=None)
    redacted = sample_day(store, DAY, n=9, seed=4, quarantine=None, redact=spy)
    ids = [r.get("request_id", r.get("qid")) for r in plain.records]
    assert sorted(seen) == ids and len(seen) == 9
    assert [r.get("request_id", r.get("qid")) for r in redacted.records] == ids
    assert all(r["answer"] == "[EMAIL]" for r in redacted.records)
    evens = sum(1 for rid in ids if int(rid[1:]) % 2 == 0)
    assert redacted.counts["redacted"] == {"EMAIL": 9, "PHONE": 2 * evens}
    assert {k: v for k, v in redacted.counts.items() if k != "redacted"} == plain.counts


def test_the_redaction_hook_applies_to_stratified_samples(tmp_path):
    store = write_day(tmp_path, {"a.jsonl": STRATIFIED_DAY})

    def redact(record: dict) -> tuple[dict, Counter]:
        return {**record, "answer": "[EMAIL]"}, Counter(EMAIL=1)

    sample = sample_day(store, DAY, n=50, seed=2, quarantine=None, stratify="topic", floor=5, redact=redact)
    assert sample.counts["redacted"] == {"EMAIL": 50}
    assert {r["answer"] for r in sample.records} == {"[EMAIL]"}


def test_a_conflicting_id_does_not_shrink_a_stratum_with_more_to_give(tmp_path):
    # every legal id also appears under billing: each is sampled once, in one stratum, and billing and
    # legal still reach their allocations from their next priorities
    moved = [json.dumps({**json.loads(line), "tags": {"topic": "billing"}}) for line in TAGGED[-12:]]
    store = write_day(tmp_path, {"a.jsonl": STRATIFIED_DAY + moved})
    sample = sample_day(store, DAY, n=80, seed=5, quarantine=None, stratify="topic", floor=5)
    strata = sample.allocation["strata"]
    assert sample.allocation["conflicts"] == 12
    ids = [r["request_id"] for r in sample.records]
    assert len(ids) == len(set(ids)) == sum(v["sampled"] for v in strata.values())
    assert strata["legal"]["sampled"] == sum(1 for r in sample.records if topic_of(r) == "legal")
    assert strata["billing"]["sampled"] == strata["billing"]["allocated"]  # it had more to give
    assert strata["legal"]["sampled"] == strata["legal"]["allocated"] == 5  # 6 of its 12 ids stayed legal
    assert len(ids) == 80


def test_a_quarantined_line_is_persisted_redacted(tmp_path):
    from ragspine_pipeline.redaction import redact_line

    store = write_day(
        tmp_path, {"part-0.jsonl": ['{"request_id": "r1", "question": "mail ann@example.com', "{}"]}
    )
    quarantine = tmp_path / "quarantine.jsonl"
    sample_day(store, DAY, n=5, seed=1, quarantine=quarantine, redact_text=redact_line)
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert entries[0]["reason"] == "invalid_json" and "[EMAIL]" in entries[0]["raw"]
    assert "ann@example.com" not in quarantine.read_text()

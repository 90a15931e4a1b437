"""Sampling a day in shards: merged, any contiguous split gives exactly the single-pass sample."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragspine_pipeline.sources import shards
from ragspine_pipeline.sources.distinct import DigestUnion
from ragspine_pipeline.sources.priorities import priority
from ragspine_pipeline.sources.sampling import sample_day
from ragspine_pipeline.sources.shards import merge_shards, plan_shards, sample_shard
from ragspine_pipeline.sources.trace_lines import Bad, parse_line
from ragspine_pipeline.sources.trace_store import LocalTraceStore, S3TraceStore
from tests.sources.test_sample_blocks import TRICKY

DAY = "2024-05-01"
PROPERTY = settings(
    max_examples=int(os.environ.get("RAGSPINE_SHARD_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# A few request ids, so that duplicates within and across files are common; a few strata, and lines of
# one id naming different strata (the conflicts a logging fault makes).
ids = st.sampled_from([f"r{i}" for i in range(12)])
topics = st.sampled_from(["billing", "search", "legal", "(none)", None])


@st.composite
def trace_lines(draw) -> str:
    kind = draw(st.sampled_from(["trace", "trace", "trace", "tricky", "truncated", "blank", "record-only"]))
    if kind == "tricky":
        return draw(st.sampled_from(TRICKY))
    if kind == "truncated":  # quarantine entries of very different sizes, so that the cap cuts unevenly
        return '{"request_id": "' + "x" * draw(st.sampled_from([0, 150, 600]))
    if kind == "blank":
        return draw(st.sampled_from(["", "  ", "\t"]))
    trace = {"request_id": draw(ids), "answer": draw(st.sampled_from(["a", "b", "c"]))}
    topic = draw(topics)
    if topic is not None:
        trace["tags"] = {"topic": topic, "lang": "en"}
    elif draw(st.booleans()):
        trace["tags"] = {"lang": "fr"}  # tagged, but not on the stratifying dimension
    line = json.dumps(trace)
    # leading blanks: a line the columnar reader leaves to the record reader, which accepts it
    return "  " + line if kind == "record-only" else line


@st.composite
def days(draw) -> dict[str, list[str]]:
    files = draw(st.integers(1, 5))
    return {
        f"part-{i}.jsonl" + (".gz" if draw(st.booleans()) else ""): draw(st.lists(trace_lines(), max_size=14))
        for i in range(files)
    }


def write_store(root: Path, files: dict[str, list[str]]) -> LocalTraceStore:
    folder = root / f"dt={DAY}"
    folder.mkdir(parents=True)
    for name, lines in files.items():
        data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return LocalTraceStore(root)


def outcome(sample, quarantine: Path) -> tuple:
    text = quarantine.read_text() if quarantine.exists() else None
    return sample.records, sample.counts, sample.allocation, sample.quarantine_path is not None, text


@PROPERTY
@given(
    files=days(),
    cuts=st.lists(st.integers(1, 4), max_size=4, unique=True),
    n=st.integers(0, 8),
    floor=st.integers(0, 4),
    stratify=st.sampled_from([None, "topic"]),
    seed=st.integers(0, 3),
    max_bytes=st.sampled_from([1, 400, 900, 1_300, 2_000, 1 << 20]),
    spill=st.booleans(),
)
def test_merged_shards_equal_the_single_pass(
    tmp_path_factory, files, cuts, n, floor, stratify, seed, max_bytes, spill
):
    root = tmp_path_factory.mktemp("shards")
    store = write_store(root / "store", files)
    names = store.objects(DAY)
    bounds = [0, *sorted(cut for cut in cuts if cut < len(names)), len(names)]
    groups = [names[low:high] for low, high in itertools.pairwise(bounds)]
    options = {"n": n, "seed": seed, "stratify": stratify, "floor": floor}
    results = [
        sample_shard(store, DAY, group, **options, quarantine_max_bytes=max_bytes, redact_text=str.upper)
        for group in groups
    ]
    one = sample_day(
        store,
        DAY,
        **options,
        quarantine=root / "one.jsonl",
        quarantine_max_bytes=max_bytes,
        redact=fake_redact,
        redact_text=str.upper,
    )
    union = partial(DigestUnion, buffer_entries=1) if spill else DigestUnion  # spill after every shard
    with mock.patch.object(shards, "DigestUnion", union):
        merged = merge_shards(
            DAY,
            iter(results),  # consumed once, in order
            **options,
            quarantine=root / "merged.jsonl",
            quarantine_max_bytes=max_bytes,
            redact=fake_redact,
        )
    assert outcome(merged, root / "merged.jsonl") == outcome(one, root / "one.jsonl")
    if stratify is None:  # and both are the sample by brute force
        records, counts = brute_force(store, n, seed)
        assert merged.records == [fake_redact(record)[0] for record in records]
        assert {key: merged.counts[key] for key in counts} == counts


def brute_force(store: LocalTraceStore, n: int, seed: int) -> tuple[list[dict], dict[str, int]]:
    """The unstratified sample without the sampler: every line through the record reader, every valid
    one kept, the ``n`` smallest priorities taken at the end."""
    best: dict[str, tuple[bytes, bytes]] = {}  # request id -> (content hash, text) of its smallest line
    read = valid = 0
    for line in store.iter_lines(DAY):
        read += 1
        parsed = parse_line(line)
        if isinstance(parsed, Bad):
            continue
        valid += 1
        request_id, content, text, _ = parsed
        best[request_id] = min(best.get(request_id, (content, text)), (content, text))
    chosen = sorted(sorted(best, key=lambda request_id: (priority(seed, request_id), request_id))[:n])
    counts = {"read": read, "valid": valid, "duplicates": valid - len(best), "sampled": len(chosen)}
    return [json.loads(best[request_id][1]) for request_id in chosen], counts


def fake_redact(record: dict) -> tuple[dict, Counter]:
    return {**record, "answer": "[REDACTED]"}, Counter(ANSWER=1)


def test_duplicates_and_conflicts_across_shards_are_counted_once(tmp_path):
    first = json.dumps({"request_id": "x1", "answer": "a", "tags": {"topic": "billing"}})
    again = json.dumps({"request_id": "x1", "answer": "b", "tags": {"topic": "legal"}})  # another stratum
    files = {"a.jsonl": [first, json.dumps({"request_id": "x2"})], "b.jsonl": [first, again]}
    store = write_store(tmp_path, files)
    options = {"n": 5, "seed": 1, "stratify": "topic", "floor": 1}
    merged = merge_shards(DAY, [sample_shard(store, DAY, [name], **options) for name in files], **options)
    assert merged.counts["valid"] == 4 and merged.counts["duplicates"] == 2  # x1 three times: two repeats
    assert merged.allocation["conflicts"] == 1
    strata = merged.allocation["strata"]
    assert {s: v["population"] for s, v in strata.items()} == {"(none)": 1, "billing": 1, "legal": 1}
    assert [r["request_id"] for r in merged.records] == ["x1", "x2"]
    assert merged == sample_day(store, DAY, **options, quarantine=None)


def test_the_quarantine_is_the_shards_quarantines_in_order_under_one_cap(tmp_path):
    bad = [f'{{"request_id": "b{i}", ' for i in range(6)]
    store = write_store(tmp_path / "store", {"a.jsonl": bad[:3], "b.jsonl": bad[3:]})
    one_entry = len(sample_shard(store, DAY, ["a.jsonl"], n=1, seed=1)["quarantine"][0]) + 1
    cap = 4 * one_entry  # room for four entries of the six
    results = [
        sample_shard(store, DAY, [name], n=1, seed=1, quarantine_max_bytes=cap)
        for name in ("a.jsonl", "b.jsonl")
    ]
    merged = merge_shards(
        DAY, results, n=1, seed=1, quarantine=tmp_path / "q.jsonl", quarantine_max_bytes=cap
    )
    assert merged.counts["quarantine_kept"] == 4 and merged.counts["quarantine_omitted"] == 2
    lines = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert [(Path(e["source"]).name, e["line"]) for e in lines] == [
        ("a.jsonl", 1),
        ("a.jsonl", 2),
        ("a.jsonl", 3),
        ("b.jsonl", 1),
    ]


def test_an_entry_that_does_not_fit_closes_the_quarantine_for_every_later_shard(tmp_path):
    small, big = '{"request_id": "s", ', '{"request_id": "' + "b" * 400
    store = write_store(tmp_path / "store", {"a.jsonl": [small, big], "b.jsonl": [small]})
    entry = len(sample_shard(store, DAY, ["b.jsonl"], n=1, seed=1)["quarantine"][0]) + 1
    cap = 2 * entry  # the big entry does not fit after the first; the last small one would
    results = [
        sample_shard(store, DAY, [name], n=1, seed=1, quarantine_max_bytes=cap)
        for name in ("a.jsonl", "b.jsonl")
    ]
    assert [len(r["quarantine"]) for r in results] == [1, 1]  # b alone keeps its entry
    merged = merge_shards(
        DAY, results, n=1, seed=1, quarantine=tmp_path / "q.jsonl", quarantine_max_bytes=cap
    )
    one = sample_day(store, DAY, n=1, seed=1, quarantine=tmp_path / "one.jsonl", quarantine_max_bytes=cap)
    assert merged.counts["quarantine_kept"] == one.counts["quarantine_kept"] == 1
    assert merged.counts["quarantine_omitted"] == one.counts["quarantine_omitted"] == 2
    assert (tmp_path / "q.jsonl").read_text() == (tmp_path / "one.jsonl").read_text()


def test_a_shard_reads_only_its_objects(tmp_path):
    store = write_store(tmp_path, {"a.jsonl": [json.dumps({"request_id": "a"})], "b.jsonl": ["{"] * 3})
    result = sample_shard(store, DAY, ["a.jsonl"], n=3, seed=1)
    assert result["counts"] == {
        "read": 1,
        "valid": 1,
        "quarantined": {"invalid_json": 0, "invalid_trace": 0, "missing_request_id": 0},
    }
    assert result["objects"] == ["a.jsonl"] and result["strata"] == ["(none)"]
    assert sample_shard(store, DAY, [], n=3, seed=1)["counts"]["read"] == 0
    with pytest.raises(ValueError, match="not a trace object name"):
        sample_shard(store, DAY, ["../dt=2024-05-02/a.jsonl"], n=3, seed=1)


def test_merging_refuses_shards_that_would_give_another_sample(tmp_path):
    store = write_store(tmp_path, {"a.jsonl": ["{"] * 3 + [json.dumps({"request_id": "a"})]})
    shard = sample_shard(store, DAY, ["a.jsonl"], n=3, seed=1, quarantine_max_bytes=10)
    with pytest.raises(ValueError, match="seed 1"):
        merge_shards(DAY, [shard], n=3, seed=2)
    with pytest.raises(ValueError, match="stratify"):
        merge_shards(DAY, [shard], n=3, seed=1, stratify="topic")
    with pytest.raises(ValueError, match="needs 4"):
        merge_shards(DAY, [shard], n=4, seed=1)
    with pytest.raises(ValueError, match="two shards"):
        merge_shards(DAY, [shard, shard], n=3, seed=1)
    with pytest.raises(ValueError, match="capped its quarantine at 10 bytes"):
        merge_shards(DAY, [shard], n=3, seed=1, quarantine=tmp_path / "q.jsonl", quarantine_max_bytes=100)
    with pytest.raises(ValueError, match="not a shard result"):
        merge_shards(DAY, [{**shard, "format": "other"}], n=3, seed=1)
    assert merge_shards(DAY, [shard], n=2, seed=1).counts["sampled"] == 1  # more candidates than needed: fine
    assert merge_shards(DAY, [], n=2, seed=1).counts["read"] == 0


def plain_types(value, path="result") -> list[str]:
    """Where ``value`` holds anything but builtins, bytes and numpy arrays of plain numbers."""
    if isinstance(value, np.ndarray):
        return [] if value.dtype.kind in "ui" else [f"{path}: {value.dtype}"]
    if value is None or type(value) in (str, bytes, int, float, bool):
        return []
    if type(value) in (list, tuple):
        return [bad for i, item in enumerate(value) for bad in plain_types(item, f"{path}[{i}]")]
    if type(value) is dict:
        return [
            bad
            for key, item in value.items()
            for bad in [*plain_types(key, f"{path} key"), *plain_types(item, f"{path}[{key!r}]")]
        ]
    return [f"{path}: {type(value).__module__}.{type(value).__qualname__}"]


LOAD_WITHOUT_THE_PROJECT = """
import pickle, sys
sys.modules["ragspine_pipeline"] = None  # importing it now fails
class Plain(pickle.Unpickler):
    def find_class(self, module, name):
        if module.split(".")[0] not in ("builtins", "numpy", "copyreg", "collections"):
            raise pickle.UnpicklingError(f"needs {module}.{name}")
        return super().find_class(module, name)
result = Plain(sys.stdin.buffer).load()
print(result["counts"]["valid"], len(result["digests"]), sorted(result["candidates"]))
"""


def test_a_shard_result_is_plain_data_that_loads_without_this_project(tmp_path):
    lines = [json.dumps({"request_id": f"r{i}", "tags": {"topic": "ab"[i % 2]}}) for i in range(50)]
    store = write_store(tmp_path, {"a.jsonl": [*lines, "{", *lines[:5]]})
    result = sample_shard(store, DAY, ["a.jsonl"], n=10, seed=1, stratify="topic", floor=3)
    assert plain_types(result) == []
    assert result["digests"].dtype == np.uint64 and result["digest_strata"].dtype == np.uint8
    assert len(result["digests"]) == 50 and list(result["digests"]) == sorted(result["digests"])
    assert all(len(candidates) == 10 for candidates in result["candidates"].values())
    done = subprocess.run(
        [sys.executable, "-I", "-c", LOAD_WITHOUT_THE_PROJECT],
        input=pickle.dumps(result),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["55", "50", "['a',", "'b']"]


# -- plan_shards -----------------------------------------------------------------------------------------


class CountedStore:
    """A store that cannot tell sizes: plan_shards balances by count."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def objects(self, day: str) -> list[str]:
        return list(self.names)


class SizedStore(CountedStore):
    def __init__(self, sizes: list[int]) -> None:
        super().__init__([f"p{i:03d}.jsonl" for i in range(len(sizes))])
        self.sizes = sizes

    def object_sizes(self, day: str) -> dict[str, int]:
        return dict(zip(self.names, self.sizes, strict=True))


def best_largest(sizes: list[int], groups: int) -> int:
    """The smallest largest group over every split into exactly ``groups`` non-empty contiguous groups."""
    return min(
        max(sum(sizes[low:high]) for low, high in itertools.pairwise((0, *cuts, len(sizes))))
        for cuts in itertools.combinations(range(1, len(sizes)), groups - 1)
    )


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 1000), max_size=9), shards_=st.integers(1, 6))
def test_plan_is_contiguous_non_empty_and_as_balanced_as_any_split(sizes, shards_):
    store = SizedStore(sizes)
    plan = plan_shards(store, DAY, shards_)
    assert [name for group in plan for name in group] == store.names  # contiguous, in order, each once
    assert len(plan) == min(shards_, len(sizes)) and all(plan)
    if sizes:
        by_name = store.object_sizes(DAY)
        largest = max(sum(by_name[name] for name in group) for group in plan)
        assert largest == best_largest(sizes, len(plan))


def test_plan_without_sizes_balances_by_count():
    store = CountedStore([f"p{i}.jsonl" for i in range(10)])
    assert [len(group) for group in plan_shards(store, DAY, 4)] == [3, 3, 3, 1]
    assert [len(group) for group in plan_shards(store, DAY, 5)] == [2, 2, 2, 2, 2]
    assert plan_shards(store, DAY, 1) == [store.names]


def test_plan_edge_cases():
    assert plan_shards(SizedStore([]), DAY, 3) == []
    assert plan_shards(SizedStore([5, 7]), DAY, 8) == [["p000.jsonl"], ["p001.jsonl"]]
    # one huge object: it is a shard of its own, the rest share the others
    assert [len(g) for g in plan_shards(SizedStore([1, 1, 100, 1, 1, 1]), DAY, 3)] == [2, 1, 3]
    with pytest.raises(ValueError):
        plan_shards(SizedStore([1]), DAY, 0)


SIZED_LAYOUT = {f"part-{i}.jsonl": b"x" * size for i, size in enumerate([300, 100, 100, 100, 50, 50, 100])}


def test_plan_on_a_local_store_balances_by_bytes(tmp_path):
    folder = tmp_path / f"dt={DAY}"
    folder.mkdir()
    for name, data in SIZED_LAYOUT.items():
        (folder / name).write_bytes(data)
    (folder / "notes.txt").write_bytes(b"y" * 1000)  # not a trace object
    store = LocalTraceStore(tmp_path)
    assert store.object_sizes(DAY) == {name: len(data) for name, data in SIZED_LAYOUT.items()}
    assert plan_shards(store, DAY, 3) == [
        ["part-0.jsonl"],
        ["part-1.jsonl", "part-2.jsonl", "part-3.jsonl"],
        ["part-4.jsonl", "part-5.jsonl", "part-6.jsonl"],
    ]
    assert plan_shards(store, "2024-05-09", 3) == []  # no such day


def test_plan_on_s3_uses_the_listings_sizes(tmp_path, bucket):
    name, client = bucket
    for key, data in SIZED_LAYOUT.items():
        client.put_object(Bucket=name, Key=f"p/dt={DAY}/{key}", Body=data)
    client.put_object(Bucket=name, Key=f"p/dt={DAY}/_SUCCESS", Body=b"")
    store = S3TraceStore(name, "p", client)
    assert store.object_sizes(DAY) == {key: len(data) for key, data in SIZED_LAYOUT.items()}
    assert plan_shards(store, DAY, 3) == [
        ["part-0.jsonl"],
        ["part-1.jsonl", "part-2.jsonl", "part-3.jsonl"],
        ["part-4.jsonl", "part-5.jsonl", "part-6.jsonl"],
    ]
    assert plan_shards(store, DAY, 10) == [[key] for key in SIZED_LAYOUT]
    assert plan_shards(store, "2024-05-09", 2) == []


def test_shards_read_from_s3_merge_to_the_local_sample(tmp_path, bucket):
    name, client = bucket
    lines = [json.dumps({"request_id": f"r{i % 30}", "answer": str(i)}) for i in range(90)] + ["{"]
    files = {f"part-{i}.jsonl": lines[i::3] for i in range(3)}
    local = write_store(tmp_path, files)
    for path in (tmp_path / f"dt={DAY}").iterdir():
        client.put_object(Bucket=name, Key=f"t/dt={DAY}/{path.name}", Body=path.read_bytes())
    s3 = S3TraceStore(name, "t", client)
    results = [sample_shard(s3, DAY, group, n=7, seed=3) for group in plan_shards(s3, DAY, 2)]
    merged = merge_shards(DAY, results, n=7, seed=3)
    one = sample_day(local, DAY, n=7, seed=3, quarantine=None)
    assert (merged.records, merged.counts) == (one.records, one.counts)
    assert merged.counts["duplicates"] == 60 and len(results) == 2

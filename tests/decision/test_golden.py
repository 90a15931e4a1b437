"""Golden freeze: the hash is of the canonical content; a content change without a new version fails."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from ragspine_pipeline import files
from ragspine_pipeline.decision.golden import (
    LOCK_SUFFIX,
    GoldenLock,
    content_hash,
    freeze,
    lock_path,
    read_lock,
    verify,
)
from ragspine_pipeline.errors import InputError

NOW = datetime(2026, 11, 22, 3, 0, 0, tzinfo=UTC)

CASES = [
    {
        "qid": "q1",
        "question": "What was Q3 revenue?",
        "answerable": True,
        "gold_claim_substr": ["4.2"],
        "gold_citations": ["doc-a", "doc-b"],
        "tags": {"topic": "finance"},
    },
    {"qid": "q2", "question": "Who is the CEO of Mars?", "answerable": False, "tags": {"topic": "trick"}},
    {"qid": "q3", "question": "When did the fund launch?", "answerable": True, "gold_citations": ["doc-c"]},
]


def write_jsonl(path, records, **dumps):
    path.write_text("".join(json.dumps(r, **dumps) + "\n" for r in records), encoding="utf-8")
    return path


def hash_of(tmp_path, records, name="gold.jsonl", **dumps):
    return content_hash(write_jsonl(tmp_path / name, records, **dumps))


def edited(which, **changes):
    return [{**case, **changes} if case["qid"] == which else case for case in CASES]


# -- freeze and read_lock --------------------------------------------------------------------------


def test_lock_path_appends_the_suffix(tmp_path):
    assert LOCK_SUFFIX == ".lock"
    assert lock_path("gold.jsonl").name == "gold.jsonl.lock"
    assert lock_path(tmp_path / "qaset.json") == tmp_path / "qaset.json.lock"


def test_freeze_writes_the_lock_with_every_field(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    lock = freeze(gold, "v3", "alice", now=NOW)

    on_disk = lock_path(gold).read_text(encoding="utf-8")
    assert on_disk.endswith("}\n")
    assert on_disk.startswith('{\n  "version"')  # indent 2
    data = json.loads(on_disk)
    assert data == {
        "version": "v3",
        "sha256": content_hash(gold)[0],
        "n_cases": 3,
        "approved_by": "alice",
        "frozen_at": "2026-11-22T03:00:00Z",
    }
    assert lock == GoldenLock("v3", data["sha256"], 3, "alice", "2026-11-22T03:00:00Z")
    assert read_lock(gold) == lock


def test_freeze_stores_the_time_in_utc(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    paris = timezone(timedelta(hours=1))
    assert freeze(gold, "v1", "bob", now=datetime(2026, 11, 22, 4, 0, 0, 999, tzinfo=paris)).frozen_at == (
        "2026-11-22T03:00:00Z"
    )
    assert freeze(gold, "v1", "bob", now=datetime(2026, 11, 22, 3, 0, 0)).frozen_at == "2026-11-22T03:00:00Z"
    frozen_at = freeze(gold, "v1", "bob").frozen_at
    assert datetime.strptime(frozen_at, "%Y-%m-%dT%H:%M:%SZ").year >= 2026


def test_freeze_strips_version_and_approver(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    lock = freeze(gold, "  v3 ", " alice\t", now=NOW)
    assert (lock.version, lock.approved_by) == ("v3", "alice")


def test_freezing_again_overwrites_the_lock(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    freeze(gold, "v1", "alice", now=NOW)
    write_jsonl(gold, [*CASES, {"qid": "q4", "question": "New?", "answerable": False}])
    assert verify(gold).status == "changed"

    lock = freeze(gold, "v2", "bob", now=NOW)
    assert read_lock(gold) == lock
    assert (lock.version, lock.approved_by, lock.n_cases) == ("v2", "bob", 4)
    assert verify(gold).status == "ok"


@pytest.mark.parametrize(
    ("version", "approver", "message"),
    [
        ("", "alice", "version is empty"),
        ("   ", "alice", "version is empty"),
        ("v3", "", "approver is empty"),
        ("v3", " \t ", "approver is empty"),
        ("v3\nv4", "alice", "control characters"),
    ],
)
def test_freeze_refuses_an_empty_version_or_approver(tmp_path, version, approver, message):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    with pytest.raises(InputError, match=message) as exc:
        freeze(gold, version, approver, now=NOW)
    assert exc.value.file == str(gold)
    assert "\n" not in str(exc.value)
    assert not lock_path(gold).exists()


def test_freezing_invalid_gold_names_the_line_and_writes_no_lock(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", edited("q2", answerable="yes"))
    with pytest.raises(InputError) as exc:
        freeze(gold, "v3", "alice", now=NOW)
    assert str(exc.value).startswith(f"{gold}:2: id=q2: field 'answerable'")
    assert exc.value.line == 2
    assert not lock_path(gold).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.jsonl"]


def test_freezing_invalid_gold_keeps_the_previous_lock(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    before = freeze(gold, "v1", "alice", now=NOW)
    gold.write_text('{"qid": "q1", "question": "x", "answerable": true}\n{"qid": \n', encoding="utf-8")
    with pytest.raises(InputError, match="malformed JSON") as exc:
        freeze(gold, "v2", "alice", now=NOW)
    assert exc.value.line == 2
    assert read_lock(gold) == before


def test_duplicate_ids_are_rejected_as_the_loader_does(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", [*CASES, {"id": "q1", "q": "again", "answerable": False}])
    with pytest.raises(InputError, match=r"duplicate id \(first on line 1\)") as exc:
        content_hash(gold)
    assert (exc.value.line, exc.value.record_id, exc.value.field) == (4, "q1", "qid")


def test_an_empty_golden_set_cannot_be_hashed(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="no cases"):
        freeze(gold, "v1", "alice", now=NOW)
    assert not lock_path(gold).exists()


def test_a_missing_gold_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        verify(tmp_path / "nope.jsonl")


def test_the_write_is_atomic_and_leaves_no_temporary_file(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    freeze(gold, "v1", "alice", now=NOW)
    freeze(gold, "v2", "alice", now=NOW)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.jsonl", "gold.jsonl.lock"]


def test_a_failed_write_keeps_the_old_lock_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    before = freeze(gold, "v1", "alice", now=NOW)
    replaced = []

    def failing_replace(src, dst):
        replaced.append((os.path.dirname(src), dst))
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.os, "replace", failing_replace)
    with pytest.raises(InputError, match="cannot write the golden lock: Permission denied") as exc:
        freeze(gold, "v2", "bob", now=NOW)
    assert exc.value.file == str(lock_path(gold))
    # the temporary file was in the lock's directory
    assert replaced == [(os.path.realpath(tmp_path), Path(os.path.realpath(lock_path(gold))))]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.jsonl", "gold.jsonl.lock"]
    assert read_lock(gold) == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "lock:1: malformed JSON"),
        ("", "lock:1: malformed JSON"),
        ('["v3"]', "must be a JSON object, got list"),
        ('{"version": "v3", "sha256": "' + "a" * 64 + '"}', "missing n_cases, approved_by, frozen_at"),
        (
            '{"version": "v3", "sha256": "abc", "n_cases": 3, "approved_by": "a", "frozen_at": "t"}',
            "'sha256' must be 64 lowercase hex digits",
        ),
        (
            '{"version": "v3", "sha256": "' + "a" * 64 + '", "n_cases": "3", "approved_by": "a", '
            '"frozen_at": "t"}',
            "'n_cases' must be a count",
        ),
        (
            '{"version": "", "sha256": "'
            + "a" * 64
            + '", "n_cases": 3, "approved_by": "a", "frozen_at": "t"}',
            "'version' must be a non-empty string",
        ),
    ],
)
def test_a_corrupt_lock_is_an_input_error_naming_the_lock_file(tmp_path, text, message):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    lock_path(gold).write_text(text, encoding="utf-8")
    for call in (read_lock, verify):
        with pytest.raises(InputError, match=message) as exc:
            call(gold)
        assert exc.value.file == str(lock_path(gold))
        assert str(exc.value).startswith(f"{lock_path(gold)}:")
        assert "\n" not in str(exc.value)


def test_no_lock_reads_as_none(tmp_path):
    assert read_lock(write_jsonl(tmp_path / "gold.jsonl", CASES)) is None


# -- verify ----------------------------------------------------------------------------------------


def test_verify_is_ok_right_after_freeze(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    lock = freeze(gold, "v3", "alice", now=NOW)
    result = verify(gold)
    assert (result.status, result.lock, result.sha256, result.n_cases) == ("ok", lock, lock.sha256, 3)
    assert result.message(gold).startswith(f"{gold} matches golden version v3 (sha256 {lock.sha256}")


def test_verify_without_a_lock_is_unlocked(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    result = verify(gold)
    assert (result.status, result.lock) == ("unlocked", None)
    assert (result.sha256, result.n_cases) == content_hash(gold)
    assert result.message(gold) == (
        f"{gold} has no golden lock ({gold}.lock): freeze a version with an approver"
    )


# -- what does not change the hash -----------------------------------------------------------------


def test_formatting_does_not_change_the_hash(tmp_path):
    base = hash_of(tmp_path, CASES, "a.jsonl")
    assert hash_of(tmp_path, CASES, "b.jsonl", separators=(",", ":")) == base
    assert hash_of(tmp_path, CASES, "c.jsonl", separators=(" ,  ", " :   ")) == base
    spaced = tmp_path / "d.jsonl"
    spaced.write_text("\n\n".join("  " + json.dumps(r) + "  " for r in CASES) + "\n\n", encoding="utf-8")
    assert content_hash(spaced) == base


def test_key_order_does_not_change_the_hash(tmp_path):
    reversed_keys = [dict(reversed(list(case.items()))) for case in CASES]
    assert list(reversed_keys[0]) != list(CASES[0])
    assert hash_of(tmp_path, reversed_keys, "b.jsonl") == hash_of(tmp_path, CASES, "a.jsonl")


def test_line_order_does_not_change_the_hash(tmp_path):
    assert hash_of(tmp_path, CASES[::-1], "b.jsonl") == hash_of(tmp_path, CASES, "a.jsonl")
    assert hash_of(tmp_path, [CASES[1], CASES[2], CASES[0]], "c.jsonl") == hash_of(tmp_path, CASES, "a.jsonl")


def test_aliases_do_not_change_the_hash(tmp_path):
    base = hash_of(tmp_path, CASES, "a.jsonl")
    aliased = [
        {
            "id"
            if key == "qid"
            else "q"
            if key == "question"
            else "gold_ids"
            if key == "gold_citations"
            else key: v
            for key, v in case.items()
        }
        for case in CASES
    ]
    assert "id" in aliased[0] and "q" in aliased[0] and "gold_ids" in aliased[0]
    assert hash_of(tmp_path, aliased, "b.jsonl") == base


def test_a_json_array_hashes_like_the_jsonl_file(tmp_path):
    array = tmp_path / "qaset.json"
    array.write_text(json.dumps(CASES, indent=4), encoding="utf-8")
    assert content_hash(array) == hash_of(tmp_path, CASES, "gold.jsonl")


def test_verify_stays_ok_after_a_cosmetic_rewrite(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    freeze(gold, "v3", "alice", now=NOW)
    gold.write_text(json.dumps([dict(reversed(list(c.items()))) for c in CASES[::-1]], indent=2), "utf-8")
    assert verify(gold).status == "ok"


# -- what changes the hash -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(edited("q1", question="What was Q4 revenue?"), id="question"),
        pytest.param(edited("q1", gold_citations=["doc-a"]), id="citation removed"),
        pytest.param(edited("q1", gold_citations=["doc-a", "doc-x"]), id="citation changed"),
        pytest.param(edited("q2", answerable=True), id="answerable"),
        pytest.param(edited("q2", tags={"topic": "trap"}), id="tag value"),
        pytest.param(edited("q3", tags={"topic": "finance"}), id="tag added"),
        pytest.param(edited("q1", gold_claim_substr=["4.3"]), id="claim substring"),
        pytest.param(edited("q3", notes="an extra field"), id="extra field"),
        pytest.param(edited("q3", qid="q3b"), id="qid"),
        pytest.param([*CASES, {"qid": "q4", "question": "New?", "answerable": False}], id="case added"),
        pytest.param(CASES[:2], id="case removed"),
    ],
)
def test_a_content_change_fails_verification(tmp_path, records):
    gold = write_jsonl(tmp_path / "gold.jsonl", CASES)
    lock = freeze(gold, "v3", "alice", now=NOW)
    write_jsonl(gold, records)

    result = verify(gold)
    assert result.status == "changed"
    assert result.lock == lock
    assert result.sha256 != lock.sha256
    assert (result.sha256, result.n_cases) == content_hash(gold)
    assert result.n_cases == len(records)
    message = result.message(gold)
    assert message == (
        f"{gold} changed since golden version v3 was frozen "
        f"(frozen sha256 {lock.sha256}, now {result.sha256}): freeze a new version with an approver"
    )
    assert "\n" not in message


def test_the_hash_is_the_sha256_of_the_canonical_lines(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": 2, "q": "b?", "gold_ids": ["d"]}, CASES[1]])
    canonical = [
        {
            "answerable": False,
            "case_type": None,
            "constraints": [],
            "expected": None,
            "gold_citations": [],
            "gold_claim": None,
            "gold_claim_substr": [],
            "qid": "q2",
            "question": "Who is the CEO of Mars?",
            "reference_date": None,
            "required_points": [],
            "tags": {"topic": "trick"},
        },
        {
            "answerable": True,  # inferred from the gold citations
            "case_type": None,
            "constraints": [],
            "expected": None,
            "gold_citations": ["d"],
            "gold_claim": None,
            "gold_claim_substr": [],
            "qid": "2",  # numeric id read as its decimal string; "2" < "q2"
            "question": "b?",
            "reference_date": None,
            "required_points": [],
            "tags": {},
        },
    ]
    canonical.sort(key=lambda case: case["qid"])
    text = "\n".join(json.dumps(c, sort_keys=True, separators=(",", ":")) for c in canonical)
    assert content_hash(gold) == (hashlib.sha256(text.encode("utf-8")).hexdigest(), 2)

"""The judgment cache, in a local folder and on S3 (moto server): what a re-run does not pay for again."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from ragspine_pipeline.judge.cache import (
    MAX_ENTRY_BYTES,
    LocalJudgmentCache,
    S3JudgmentCache,
    open_judgment_cache,
    user_cache_dir,
)
from ragspine_pipeline.judge.client import JudgeClient, JudgeEndpoint
from ragspine_pipeline.judge.prompts import JudgeItem
from ragspine_pipeline.judge.run import JudgeSettings, run_judge
from ragspine_pipeline.sources.errors import SourceError
from tests.conftest import SECRET_KEY

KEY = "ab" + "0" * 62
ENTRY = {
    "model": "m",
    "metric": "faithfulness",
    "prompt_version": "v",
    "scores": [4, 5],
    "reasons": ["a", "b"],
}


@pytest.fixture(params=["local", "s3"])
def cache(request, tmp_path):
    if request.param == "local":
        return LocalJudgmentCache(tmp_path / "cache")
    name, client = request.getfixturevalue("bucket")
    return S3JudgmentCache(name, "judge/cache", client)


def test_round_trip_and_unreadable_entries_are_absent(cache):
    assert cache.get(KEY) is None
    cache.put(KEY, ENTRY)
    assert cache.get(KEY) == ENTRY
    for bad in (
        {**ENTRY, "scores": [4, 9]},
        {**ENTRY, "reasons": ["a"]},
        {**ENTRY, "reasons": [{"a": 1}, None]},
        {"scores": "4"},
    ):
        cache.put(KEY, bad)
        assert cache.get(KEY) is None
    with pytest.raises(ValueError):
        cache.get("../../etc/passwd")


def test_a_rerun_over_unchanged_answers_makes_no_call(cache, fake_judge):
    items = [JudgeItem(f"q{i}", question=f"Q{i}?", answer=f"A{i}.") for i in range(5)]
    client = JudgeClient(JudgeEndpoint(fake_judge.url, ("judge-a",)))
    settings = JudgeSettings(metrics=("answer_relevancy",))
    first = run_judge(items, settings, client, cache)
    assert len(fake_judge.requests) == 5 and first.cache == {"hits": 0, "misses": 5}
    second = run_judge(items, settings, JudgeClient(JudgeEndpoint(fake_judge.url, ("judge-a",))), cache)
    assert len(fake_judge.requests) == 5 and second.cache == {"hits": 5, "misses": 0}
    assert second.scores("answer_relevancy") == first.scores("answer_relevancy") == [4.0] * 5


def test_an_unreachable_s3_cache_is_one_line_without_secrets(s3_endpoint):
    cache = open_judgment_cache("s3://no-such-judge-bucket/cache", endpoint_url=s3_endpoint)
    with pytest.raises(SourceError) as info:
        cache.put(KEY, ENTRY)
    message = str(info.value)
    assert message.startswith(
        "s3://no-such-judge-bucket/cache: cannot write the judgment cache: NoSuchBucket"
    )
    assert "\n" not in message and SECRET_KEY not in message


def test_local_entries_are_plain_json_files(tmp_path):
    LocalJudgmentCache(tmp_path).put(KEY, ENTRY)
    assert json.loads((tmp_path / "ab" / f"{KEY}.json").read_text()) == ENTRY


def store_raw(cache, key: str, data: bytes) -> None:
    """Put bytes where ``cache`` keeps the entry ``key``, bypassing ``put`` (a corrupted or hostile cache)."""
    if isinstance(cache, LocalJudgmentCache):
        path = cache.root / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    else:
        cache.client.put_object(Bucket=cache.bucket, Key=cache._key(key), Body=data)


@pytest.mark.parametrize(
    "data",
    [
        json.dumps(
            {**ENTRY, "reasons": ["x" * MAX_ENTRY_BYTES, "b"]}
        ).encode(),  # larger than an entry can be
        b'{"scores": [4], "reasons": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",  # nested past the input cap
        b'{"scores": [' + b"9" * 5000 + b'], "reasons": ["a"]}',  # a number Python will not convert
        b"\xff\xfe not UTF-8",
    ],
    ids=["oversized", "deep", "huge-number", "not-utf8"],
)
def test_a_hostile_entry_is_a_miss_never_an_error(cache, data):
    store_raw(cache, KEY, data)
    assert cache.get(KEY) is None
    cache.put(KEY, ENTRY)  # and it is replaced by the next judgment
    assert cache.get(KEY) == ENTRY


def test_a_fifo_where_an_entry_should_be_is_a_miss_without_blocking(tmp_path):
    cache = LocalJudgmentCache(tmp_path)
    (tmp_path / KEY[:2]).mkdir()
    os.mkfifo(tmp_path / KEY[:2] / f"{KEY}.json")  # no writer: a blocking open would wait forever
    got: list = []
    reader = threading.Thread(target=lambda: got.append(cache.get(KEY)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive() and got == [None]


def test_the_user_cache_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir({"XDG_CACHE_HOME": "/var/cache/me"}) == Path("/var/cache/me/ragspine-eval/judge")
    for ignored in ({}, {"XDG_CACHE_HOME": ""}, {"XDG_CACHE_HOME": "relative/cache"}):
        assert user_cache_dir(ignored) == tmp_path / "home" / ".cache" / "ragspine-eval" / "judge"

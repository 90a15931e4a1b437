"""The daily partitions start where the production traces start, not on a fixed date."""

from __future__ import annotations

import logging
import time
from datetime import date
from pathlib import Path

import pytest

from ragspine_pipeline.defs.partitions import START_SETTING, daily_partitions, partitions_start
from ragspine_pipeline.defs.resources import TraceStoreResource
from ragspine_pipeline.errors import InputError
from tests.conftest import put_many

TODAY = date(2026, 11, 25)


def store_with_days(root, *days: str):
    for day in days:
        (root / f"dt={day}").mkdir(parents=True)
        (root / f"dt={day}" / "part-0.jsonl").write_text("{}\n")
    return root


def local(path: Path) -> TraceStoreResource:
    return TraceStoreResource(uri=str(path))


def test_the_setting_wins_and_a_bad_one_is_one_line(tmp_path):
    store = local(store_with_days(tmp_path / "traces", "2026-11-19"))
    assert partitions_start(store, {START_SETTING: "2026-03-01"}, TODAY) == date(2026, 3, 1)
    with pytest.raises(InputError, match="RAGSPINE_PARTITIONS_START: not a date YYYY-MM-DD: '2026-13-01'"):
        partitions_start(store, {START_SETTING: "2026-13-01"}, TODAY)


def test_a_local_store_starts_the_partitions_on_its_first_day(tmp_path):
    store = store_with_days(tmp_path / "traces", "2026-11-19", "2026-11-18", "2026-11-24")
    (store / "not-a-day").mkdir()
    assert partitions_start(local(store), {}, TODAY) == date(2026, 11, 18)
    partitions = daily_partitions(local(store), {}, TODAY)
    keys = partitions.get_partition_keys()
    assert keys[0] == "2026-11-18"  # nothing "missing" before the first traces


def test_a_store_that_starts_today_still_offers_yesterday(tmp_path):
    store = store_with_days(tmp_path / "traces", "2026-11-25")
    assert partitions_start(local(store), {}, TODAY) == date(2026, 11, 24)


def test_a_new_deployment_without_traces_starts_yesterday_quietly(tmp_path, caplog):
    store = local(tmp_path / "not-written-yet" / "traces")
    with caplog.at_level(logging.WARNING):
        assert partitions_start(store, {}, TODAY) == date(2026, 11, 24)
    assert caplog.records == []


def test_an_s3_store_is_listed_once(bucket, s3_endpoint):
    name, _client = bucket
    put_many(name, ["traces/dt=2026-10-02/a.jsonl", "traces/dt=2026-10-30/b.jsonl", "other/x"], b"{}\n")
    store = TraceStoreResource(uri=f"s3://{name}/traces", endpoint_url=s3_endpoint)
    assert partitions_start(store, {}, TODAY) == date(2026, 10, 2)


def test_an_unreachable_store_warns_and_does_not_hold_up_loading(closed_port, caplog, aws_env):
    store = TraceStoreResource(uri="s3://bucket/traces", endpoint_url=f"http://127.0.0.1:{closed_port}")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert partitions_start(store, {}, TODAY) == date(2026, 11, 24)
    assert time.monotonic() - started < 10  # one attempt, not botocore's retries with backoff
    [warning] = caplog.records
    assert "set RAGSPINE_PARTITIONS_START" in warning.getMessage()

"""Read–change–write without lost updates, across real OS processes: a local file under flock, and an S3
object through conditional writes on a moto server; a process killed mid-update leaves a whole file."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragspine_pipeline.files import LockedFile
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.versioned import S3VersionedFile, open_versioned

PROCESSES, INCREMENTS = 8, 25


def increment(text: str | None, who: str) -> str:
    """One more count, and who wrote it: a lost update would lose a count."""
    state = json.loads(text) if text else {"count": 0, "by": []}
    return json.dumps({"count": state["count"] + 1, "by": [*state["by"], who]})


def worker(uri: str, who: str, endpoint: str | None) -> None:
    store = open_versioned(uri, "counter", endpoint_url=endpoint)
    for _ in range(INCREMENTS):
        store.update(lambda text: increment(text, who))


def run_workers(uri: str, endpoint: str | None = None) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=worker, args=(uri, f"p{i}", endpoint)) for i in range(PROCESSES)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0


@pytest.mark.system  # eight processes at once
def test_concurrent_processes_never_lose_an_update_to_a_local_file(tmp_path):
    path = tmp_path / "counter.json"
    run_workers(str(path))
    state = json.loads(path.read_text())
    assert state["count"] == PROCESSES * INCREMENTS == len(state["by"])
    assert {who: state["by"].count(who) for who in set(state["by"])} == {
        f"p{i}": INCREMENTS for i in range(8)
    }


@pytest.mark.system  # eight processes at once
def test_concurrent_processes_never_lose_an_update_to_an_s3_object(bucket, s3_endpoint):
    name, client = bucket
    uri = f"s3://{name}/baselines/counter.json"
    run_workers(uri, s3_endpoint)
    state = json.loads(client.get_object(Bucket=name, Key="baselines/counter.json")["Body"].read())
    assert state["count"] == PROCESSES * INCREMENTS == len(state["by"])


def test_an_s3_update_that_changes_nothing_writes_nothing(bucket, s3_endpoint):
    name, client = bucket
    store = S3VersionedFile(f"s3://{name}/b.json", "baseline", endpoint_url=s3_endpoint)
    assert store.read() is None
    assert store.update(lambda text: None) is None
    assert "Contents" not in client.list_objects_v2(Bucket=name)
    assert store.update(lambda text: "{}") == "{}"
    assert store.update(lambda text: text) == "{}" and store.read() == "{}"


def test_s3_errors_are_one_line_without_secrets(s3_endpoint):
    store = S3VersionedFile("s3://no-such-bucket-4242/b.json", "baseline", endpoint_url=s3_endpoint)
    with pytest.raises(SourceError) as raised:
        store.update(lambda text: "{}")
    assert "s3://no-such-bucket-4242/b.json" in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(SourceError, match="must name an object"):
        S3VersionedFile("s3://bucket-x/", "baseline", endpoint_url=s3_endpoint)


HOLD = """
import sys, time
from ragspine_pipeline.files import LockedFile
def slow(text):
    print("holding", flush=True)
    time.sleep(30)
    return "new"
LockedFile(sys.argv[1], "baseline").update(slow)
"""


@pytest.mark.system  # kill -9
def test_a_process_killed_while_holding_the_lock_releases_it_and_leaves_the_file_whole(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text('{"golden": {"metrics": {"precision": 0.9}}}\n')
    before = path.read_text()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert holder.stdout.readline().strip() == "holding"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    assert path.read_text() == before  # killed before its write: the old file, whole
    start = time.monotonic()
    assert LockedFile(path, "baseline").update(lambda text: text + " ") == before + " "
    assert time.monotonic() - start < 5  # the dead process's lock went with it
    assert not list(Path(tmp_path).glob(".baseline.json.*.tmp"))  # no temporary file left behind

"""Trace stores: local and S3 give the same days, objects and lines; failures are one clear line."""

from __future__ import annotations

import gzip
import threading
import time
from collections import Counter
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import parse_s3_uri, s3_client
from ragspine_pipeline.sources.trace_store import (
    LocalTraceStore,
    RawLine,
    S3TraceStore,
    TraceStore,
    block_lines,
    open_trace_store,
)
from tests.conftest import SECRET_KEY, put_many
from tests.loopback import LoopbackServer

# relative path → bytes; the trace store's layout (<root>/dt=YYYY-MM-DD/*.jsonl[.gz]) plus things a
# store must ignore.
LAYOUT: dict[str, bytes] = {
    "dt=2024-05-01/b.jsonl": b'{"request_id": "r1"}\n\n{"request_id": "r2", "q": "caf\xc3\xa9"}\r\n',
    "dt=2024-05-01/a.jsonl.gz": gzip.compress(b'{"request_id": "r3"}\n  \n{"request_id": "r4"}'),
    "dt=2024-05-01/_SUCCESS": b"",
    "dt=2024-05-01/notes.txt": b"not traces\n",
    "dt=2024-05-01/nested/c.jsonl": b'{"request_id": "nested"}\n',
    "dt=2024-05-03/c.jsonl": b'{"request_id": "r5"}\n',
    "dt=2024-05-04/empty.jsonl": b"",
    "dt=not-a-date/x.jsonl": b'{"request_id": "x"}\n',
    "other/y.jsonl": b'{"request_id": "y"}\n',
}


def write_local(root: Path, layout: dict[str, bytes]) -> LocalTraceStore:
    for rel, data in layout.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return LocalTraceStore(root)


def put_s3(client, bucket: str, prefix: str, layout: dict[str, bytes]) -> None:
    for rel, data in layout.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}" if prefix else rel, Body=data)


def relative(store: TraceStore, line: RawLine) -> tuple[str, int, str]:
    base = store.describe() + "/"
    assert line.source.startswith(base)
    return line.source[len(base) :], line.line_no, line.text


def snapshot(store: TraceStore) -> dict:
    return {
        day: (store.objects(day), [relative(store, line) for line in store.iter_lines(day)])
        for day in store.days()
    }


EXPECTED = {
    "2024-05-01": (
        ["a.jsonl.gz", "b.jsonl"],
        [
            ("dt=2024-05-01/a.jsonl.gz", 1, '{"request_id": "r3"}'),
            ("dt=2024-05-01/a.jsonl.gz", 3, '{"request_id": "r4"}'),
            ("dt=2024-05-01/b.jsonl", 1, '{"request_id": "r1"}'),
            ("dt=2024-05-01/b.jsonl", 3, '{"request_id": "r2", "q": "café"}'),
        ],
    ),
    "2024-05-03": (["c.jsonl"], [("dt=2024-05-03/c.jsonl", 1, '{"request_id": "r5"}')]),
    "2024-05-04": (["empty.jsonl"], []),
}


def test_local_store_reads_the_layout(tmp_path):
    store = write_local(tmp_path / "traces", LAYOUT)
    assert isinstance(store, TraceStore)
    assert snapshot(store) == EXPECTED


def test_s3_store_reads_the_same_as_the_local_store(tmp_path, bucket, s3_endpoint):
    name, client = bucket
    put_s3(client, name, "prod/traces", LAYOUT)
    store = open_trace_store(f"s3://{name}/prod/traces/", endpoint_url=s3_endpoint)
    assert isinstance(store, S3TraceStore)
    assert store.describe() == f"s3://{name}/prod/traces"
    assert snapshot(store) == EXPECTED == snapshot(write_local(tmp_path / "local", LAYOUT))


def test_s3_store_at_the_bucket_root(bucket):
    name, client = bucket
    put_s3(client, name, "", LAYOUT)
    assert snapshot(S3TraceStore(name, "", client)) == EXPECTED


def test_a_day_without_objects_yields_nothing(tmp_path, bucket):
    name, client = bucket
    for store in (write_local(tmp_path, LAYOUT), S3TraceStore(name, "p", client)):
        assert store.objects("2024-06-01") == []
        assert list(store.iter_lines("2024-06-01")) == []


def test_a_subset_of_the_days_objects_is_read_in_the_order_given(tmp_path, bucket):
    name, client = bucket
    put_s3(client, name, "p", LAYOUT)
    day, (names, lines) = "2024-05-01", EXPECTED["2024-05-01"]
    for store in (write_local(tmp_path, LAYOUT), S3TraceStore(name, "p", client)):
        blocks = store.iter_blocks(day, ["b.jsonl", "a.jsonl.gz"])
        assert [relative(store, line) for block in blocks for line in block_lines(block)] == lines[
            2:
        ] + lines[:2]
        assert list(store.iter_blocks(day, [])) == []
        assert store.object_sizes(day) == {name: len(LAYOUT[f"dt={day}/{name}"]) for name in names}
        for outside in ("nested/c.jsonl", "../dt=2024-05-03/c.jsonl", "notes.txt"):
            with pytest.raises(ValueError, match="not a trace object name"):
                list(store.iter_blocks(day, [outside]))


def test_s3_listing_of_more_than_a_thousand_objects(bucket):
    name, client = bucket
    names = [f"part-{i:05d}.jsonl" for i in range(2345)]
    put_many(name, [f"p/dt=2024-05-01/{n}" for n in names], b"{}\n")
    client.put_object(Bucket=name, Key="p/dt=2024-05-02/a.jsonl", Body=b"{}\n")  # and one over HTTP
    store = S3TraceStore(name, "p", client)
    assert store.days() == ["2024-05-01", "2024-05-02"]
    assert store.objects("2024-05-01") == names


def test_unreachable_s3_store_fails_fast_with_one_line_without_secrets(aws_env, closed_port):
    client = s3_client(
        endpoint_url=f"http://127.0.0.1:{closed_port}", max_attempts=2, connect_timeout=0.5, read_timeout=0.5
    )
    store = S3TraceStore("bucket", "traces", client)
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        store.days()
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("s3://bucket/traces: cannot list the store:")
    assert SECRET_KEY not in message and SECRET_KEY not in repr(info.value)


def test_missing_bucket_is_a_source_error(s3_endpoint):
    store = open_trace_store("s3://no-such-bucket-here/traces", endpoint_url=s3_endpoint)
    with pytest.raises(
        SourceError, match=r"^s3://no-such-bucket-here/traces: cannot list the store: NoSuchBucket"
    ):
        store.days()


def test_missing_local_root_is_a_source_error(tmp_path):
    store = open_trace_store(str(tmp_path / "nowhere"))
    for call in (
        store.days,
        lambda: store.objects("2024-05-01"),
        lambda: list(store.iter_lines("2024-05-01")),
    ):
        with pytest.raises(SourceError, match="trace store root does not exist"):
            call()


def test_corrupt_gzip_names_the_object(tmp_path):
    data = gzip.compress(b"".join(b'{"n": %d}\n' % (i * 7919 % 10007) for i in range(2000)))
    store = write_local(tmp_path, {"dt=2024-05-01/a.jsonl.gz": data[: len(data) // 2]})
    with pytest.raises(SourceError, match=r"a\.jsonl\.gz: cannot read:"):
        list(store.iter_lines("2024-05-01"))


def test_long_lines_across_chunks_and_undecodable_bytes(tmp_path):
    long_line = b'{"x": "' + b"y" * 200_000 + b'"}'
    store = write_local(tmp_path, {"dt=2024-05-01/a.jsonl": long_line + b"\n\xff\xfe\n" + long_line})
    lines = list(store.iter_lines("2024-05-01"))
    assert [(line.line_no, len(line.text)) for line in lines] == [
        (1, len(long_line)),
        (2, 2),
        (3, len(long_line)),
    ]
    assert lines[1].text.encode("utf-8", "surrogateescape") == b"\xff\xfe"


def test_open_trace_store_uris(tmp_path):
    assert isinstance(open_trace_store(f"file://{tmp_path}"), LocalTraceStore)
    assert open_trace_store(f"file://{tmp_path}").root == tmp_path
    assert open_trace_store(str(tmp_path)).root == tmp_path
    for bad in ("gs://bucket/x", "file://host/x", "s3://", "s3:///key", "s3://a/x"):
        with pytest.raises(InputError):
            open_trace_store(bad)


def test_parse_s3_uri():
    assert parse_s3_uri("s3://bucket/a/b.json") == ("bucket", "a/b.json")
    assert parse_s3_uri("s3://bucket") == ("bucket", "")
    with pytest.raises(InputError, match=r"^s3:/bucket/x: not an S3 URI"):
        parse_s3_uri("s3:/bucket/x")


def test_days_must_be_iso_dates(tmp_path):
    store = write_local(tmp_path, LAYOUT)
    for bad in ("2024-5-1", "../etc", "2024-02-30"):
        with pytest.raises(ValueError, match="ISO date"):
            store.objects(bad)


class BurstProxy(LoopbackServer):
    """A loopback HTTP proxy in front of the moto server that answers S3's ``503 SlowDown`` to the first
    ``burst`` requests for each distinct (method, path) it sees, then forwards: an error burst."""

    def __init__(self, upstream: str, burst: int) -> None:
        self.upstream = urlsplit(upstream)
        self.burst = burst
        self.failed: Counter = Counter()
        self.forwarded: Counter = Counter()
        self._lock = threading.Lock()
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        return self.origin

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = (self.command, unquote(self.path))  # a listing is its path and its query
                with proxy._lock:
                    fail = proxy.failed[key] < proxy.burst
                    (proxy.failed if fail else proxy.forwarded)[key] += 1
                if fail:
                    payload = (
                        b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
                    )
                    status, headers = 503, {"Content-Type": "application/xml"}
                else:
                    upstream = HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=10)
                    upstream.request(self.command, self.path, body or None, dict(self.headers))
                    response = upstream.getresponse()
                    payload = response.read()
                    status = response.status
                    skip = {"content-length", "transfer-encoding", "connection"}
                    headers = {k: v for k, v in response.getheaders() if k.lower() not in skip}
                    upstream.close()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _relay

            def log_message(self, format: str, *args) -> None:
                pass

        return Handler


def describe_request(path: str) -> str:
    """``list <prefix>`` for a listing of the bucket, ``get /<bucket>/<key>`` for an object."""
    parts = urlsplit(path)
    if parts.query:
        return "list " + parse_qs(parts.query)["prefix"][0]
    return "get " + parts.path


def test_an_s3_error_burst_is_retried_and_loses_nothing(tmp_path, bucket, s3_endpoint):
    name, client = bucket
    put_s3(client, name, "p", LAYOUT)
    with BurstProxy(s3_endpoint, burst=2) as proxy:
        store = S3TraceStore(name, "p", s3_client(endpoint_url=proxy.url, max_attempts=4))
        lines = [relative(store, line) for line in store.iter_lines("2024-05-01")]
    assert lines == EXPECTED["2024-05-01"][1]
    # The day's listing and both of its trace objects each failed twice, then succeeded.
    assert {describe_request(path).replace(f"/{name}/", "") for _, path in proxy.failed} == {
        "list p/dt=2024-05-01/",
        "get p/dt=2024-05-01/a.jsonl.gz",
        "get p/dt=2024-05-01/b.jsonl",
    }
    assert all(count == 2 for count in proxy.failed.values())
    assert all(proxy.forwarded[key] == 1 for key in proxy.failed)


def test_an_s3_error_burst_longer_than_the_retries_is_one_line(bucket, s3_endpoint):
    name, client = bucket
    put_s3(client, name, "p", LAYOUT)
    with BurstProxy(s3_endpoint, burst=100) as proxy:
        store = S3TraceStore(name, "p", s3_client(endpoint_url=proxy.url, max_attempts=2))
        with pytest.raises(SourceError) as info:
            store.days()
    message = str(info.value)
    assert message.startswith(f"s3://{name}/p: cannot list the store:") and "SlowDown" in message
    assert "\n" not in message and SECRET_KEY not in message
    assert sum(proxy.failed.values()) == 2  # two attempts in all, as configured

"""Production trace stores: ``<root>/dt=YYYY-MM-DD/*.jsonl`` (or ``*.jsonl.gz``), locally or on S3.

Both stores give the same days, object names and lines for the same content. Lines are streamed: an
object (gzip included) is read and decompressed chunk by chunk, never held whole in memory. A store
that cannot be reached or listed (after botocore's retries) or read raises one :class:`SourceError`.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from contextlib import closing
from datetime import date
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import aws_cause, parse_s3_uri, s3_client

__all__ = ["LocalTraceStore", "RawLine", "S3TraceStore", "TraceStore", "open_trace_store", "split_lines"]

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_SUFFIXES = (".jsonl", ".jsonl.gz")
_CHUNK = 1 << 16


class RawLine(NamedTuple):
    """One non-blank line: ``source`` names its object (file path or ``s3://`` URI), ``line_no`` is
    1-based and counts blank lines, ``text`` is the line without its terminator. Bytes that are not
    UTF-8 are kept as surrogate escapes (``errors="surrogateescape"``) so that the reader decides."""

    source: str
    line_no: int
    text: str


@runtime_checkable
class TraceStore(Protocol):
    """Where production traces land, one ``dt=YYYY-MM-DD`` folder per day."""

    def days(self) -> list[str]:
        """The ISO dates that have a ``dt=`` folder, sorted."""
        ...

    def objects(self, day: str) -> list[str]:
        """The ``*.jsonl`` / ``*.jsonl.gz`` names directly in the day's folder, sorted; [] for none."""
        ...

    def iter_lines(self, day: str) -> Iterator[RawLine]:
        """Every non-blank line of the day's objects, object by object in name order."""
        ...

    def describe(self) -> str:
        """The store's location as a URI or path, without credentials."""
        ...


def open_trace_store(
    uri: str, *, endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 5
) -> TraceStore:
    """A plain path or ``file://`` URI → :class:`LocalTraceStore`; ``s3://bucket/prefix`` → S3.

    Opening touches nothing: an unreachable store or a missing root is reported by the first call.
    """
    if uri.startswith("s3://"):
        bucket, prefix = parse_s3_uri(uri)
        client = s3_client(endpoint_url=endpoint_url, region=region, max_attempts=max_attempts)
        return S3TraceStore(bucket, prefix, client)
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            raise InputError(uri, "a file:// URI must name a local path (file:///path)")
        return LocalTraceStore(Path(unquote(parsed.path)))
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", uri):
        raise InputError(uri, "unsupported trace store: expected a path, file:// or s3:// URI")
    return LocalTraceStore(Path(uri))


def check_day(day: str) -> str:
    """``day`` when it is an ISO date ``YYYY-MM-DD``, else ValueError (it becomes part of a path)."""
    if _DAY.fullmatch(day):
        try:
            date.fromisoformat(day)
            return day
        except ValueError:
            pass
    raise ValueError(f"a day must be an ISO date YYYY-MM-DD, got {day!r}")


def _day_of(folder: str) -> str | None:
    """The date of a ``dt=YYYY-MM-DD`` folder name, None for any other name."""
    if not folder.startswith("dt="):
        return None
    try:
        return check_day(folder[3:])
    except ValueError:
        return None


def _is_trace_object(name: str) -> bool:
    return name.endswith(_SUFFIXES)


def split_lines(stream: BinaryIO, source: str) -> Iterator[RawLine]:
    """Stream ``stream`` chunk by chunk into lines; only the current chunk and line are in memory.

    Splits on ``\\n`` only (a local file and an S3 body then split identically) and drops a trailing
    ``\\r``. Gzip is decompressed by the caller's stream, incrementally.
    """
    partial: list[bytes] = []  # the pieces of a line that spans chunks: joined once, when it ends
    line_no = 0
    while chunk := stream.read(_CHUNK):
        pieces = chunk.split(b"\n")
        if len(pieces) == 1:
            partial.append(chunk)
            continue
        pieces[0] = b"".join([*partial, pieces[0]])
        partial = [pieces.pop()]
        for raw in pieces:
            line_no += 1
            if raw.strip():
                yield RawLine(source, line_no, _text(raw))
    last = b"".join(partial)
    if last.strip():
        yield RawLine(source, line_no + 1, _text(last))


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\r").decode("utf-8", errors="surrogateescape")


class LocalTraceStore:
    """A trace store in a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return str(self.root)

    def _check_root(self) -> None:
        if not self.root.exists():
            raise SourceError(self.describe(), "trace store root does not exist")
        if not self.root.is_dir():
            raise SourceError(self.describe(), "trace store root is not a directory")

    def days(self) -> list[str]:
        self._check_root()
        found = (_day_of(entry.name) for entry in self.root.iterdir() if entry.is_dir())
        return sorted(day for day in found if day is not None)

    def objects(self, day: str) -> list[str]:
        self._check_root()
        folder = self.root / f"dt={check_day(day)}"
        if not folder.is_dir():
            return []
        return sorted(e.name for e in folder.iterdir() if e.is_file() and _is_trace_object(e.name))

    def iter_lines(self, day: str) -> Iterator[RawLine]:
        for name in self.objects(day):
            path = self.root / f"dt={day}" / name
            try:
                opener = gzip.open if name.endswith(".gz") else open
                with opener(path, "rb") as stream:
                    yield from split_lines(stream, str(path))
            except (OSError, EOFError, zlib.error) as exc:
                raise SourceError(str(path), f"cannot read: {exc}") from None


class S3TraceStore:
    """A trace store under ``s3://bucket/prefix``; ``client`` is a boto3 S3 client (see ``s3_client``)."""

    def __init__(self, bucket: str, prefix: str, client) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self._base = f"{self.prefix}/" if self.prefix else ""

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def _list(self, prefix: str) -> tuple[list[str], list[str]]:
        """Keys and common prefixes directly under ``prefix``, over every page of the listing."""
        keys: list[str] = []
        folders: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                keys.extend(item["Key"] for item in page.get("Contents", ()))
                folders.extend(item["Prefix"] for item in page.get("CommonPrefixes", ()))
        except (BotoCoreError, ClientError) as exc:
            raise SourceError(self.describe(), f"cannot list the store: {aws_cause(exc)}") from None
        return keys, folders

    def days(self) -> list[str]:
        _, folders = self._list(self._base)
        found = (_day_of(folder[len(self._base) :].rstrip("/")) for folder in folders)
        return sorted(day for day in found if day is not None)

    def objects(self, day: str) -> list[str]:
        folder = f"{self._base}dt={check_day(day)}/"
        keys, _ = self._list(folder)
        return sorted(name for name in (key[len(folder) :] for key in keys) if _is_trace_object(name))

    def iter_lines(self, day: str) -> Iterator[RawLine]:
        for name in self.objects(day):
            key = f"{self._base}dt={day}/{name}"
            source = f"s3://{self.bucket}/{key}"
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
                with closing(body):
                    if name.endswith(".gz"):
                        # GzipFile only reads forward from its fileobj: the body is decompressed as it
                        # streams in, never downloaded whole.
                        with gzip.GzipFile(fileobj=body, mode="rb") as stream:
                            yield from split_lines(stream, source)
                    else:
                        yield from split_lines(body, source)
            except (BotoCoreError, ClientError) as exc:
                raise SourceError(source, f"cannot read: {aws_cause(exc)}") from None
            except (OSError, EOFError, zlib.error) as exc:
                raise SourceError(source, f"cannot read: {exc}") from None

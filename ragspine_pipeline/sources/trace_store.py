"""Production trace stores: ``<root>/dt=YYYY-MM-DD/*.jsonl`` (or ``*.jsonl.gz``), locally or on S3.

Both stores give the same days, object names, blocks and lines for the same content. Objects are
streamed: an object (gzip included) is read and decompressed block by block (about 4 MiB of whole lines
at a time), never held whole in memory. A store that cannot be reached or listed (after botocore's
retries) or read raises one :class:`SourceError`.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import date
from operator import attrgetter
from pathlib import Path
from queue import Full, Queue
from typing import BinaryIO, NamedTuple, Protocol, TypeVar, runtime_checkable
from urllib.parse import unquote, urlparse

from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import aws_cause, parse_s3_uri, s3_client

log = logging.getLogger(__name__)

__all__ = [
    "LocalTraceStore",
    "RawBlock",
    "RawLine",
    "S3TraceStore",
    "TraceStore",
    "block_lines",
    "line_text",
    "open_trace_store",
    "raw_line",
    "read_ahead",
    "split_blocks",
    "split_lines",
]

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_SUFFIXES = (".jsonl", ".jsonl.gz")
BLOCK_SIZE = 4 << 20  # bytes read (after decompression) per block: a few thousand traces


class RawLine(NamedTuple):
    """One non-blank line: ``source`` names its object (file path or ``s3://`` URI), ``line_no`` is
    1-based and counts blank lines, ``text`` is the line without its terminator. Bytes that are not
    UTF-8 are kept as surrogate escapes (``errors="surrogateescape"``) so that the reader decides.
    ``oversize`` is the full length of a line longer than ``inputs.MAX_LINE_BYTES``, of which ``text``
    holds only the first ``inputs.KEEP_BYTES`` (0 for every other line)."""

    source: str
    line_no: int
    text: str
    oversize: int = 0


class RawBlock(NamedTuple):
    """Consecutive whole lines of one object: ``data`` holds them with their ``\\n`` terminators (the
    object's last line may have none) and ``first_line`` is the 1-based number of the first of them.
    A block with ``oversize`` > 0 is one line longer than ``inputs.MAX_LINE_BYTES``: ``data`` is its
    first ``inputs.KEEP_BYTES`` and ``oversize`` its full length (the rest was read and dropped)."""

    source: str
    first_line: int
    data: bytes
    oversize: int = 0


@runtime_checkable
class TraceStore(Protocol):
    """Where production traces land, one ``dt=YYYY-MM-DD`` folder per day.

    Both stores here also offer ``object_sizes(day) -> dict[str, int]``: the day's objects in
    :meth:`objects` order with their sizes as stored, read from the listing (a local ``stat``, S3's
    ``Size``). It is optional: ``shards.plan_shards`` balances by bytes with it, by count without.
    """

    def days(self) -> list[str]:
        """The ISO dates that have a ``dt=`` folder, sorted."""
        ...

    def objects(self, day: str) -> list[str]:
        """The ``*.jsonl`` / ``*.jsonl.gz`` names directly in the day's folder, sorted; [] for none."""
        ...

    def iter_blocks(self, day: str, objects: Sequence[str] | None = None) -> Iterator[RawBlock]:
        """The day's objects as blocks of whole lines, object by object in name order; with ``objects``
        (names as :meth:`objects` gives them), only those, in the order given."""
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


def _object_names(day: str, objects: Sequence[str]) -> list[str]:
    """``objects`` when each is a trace object's name (no folder part), else ValueError: a name becomes
    part of a path or key, and one naming another folder would read another day's traces. ``day`` is
    checked too (it is part of the path)."""
    check_day(day)
    for name in objects:
        if not isinstance(name, str) or "/" in name or not _is_trace_object(name):
            raise ValueError(f"not a trace object name of the day's folder: {name!r}")
    return list(objects)


def split_blocks(stream: BinaryIO, source: str, size: int | None = None) -> Iterator[RawBlock]:
    """Stream ``stream`` as blocks of whole lines of about ``size`` bytes (default ``BLOCK_SIZE``); only
    the current block (and a line longer than a block, until it ends or reaches the line cap) is in
    memory. A line longer than ``inputs.MAX_LINE_BYTES`` that spans reads becomes a block of its own
    holding its first bytes and its length (``RawBlock.oversize``): a gzip bomb of one endless line
    costs time, never memory.

    Splits on ``\\n`` only, so a local file and an S3 body split identically. Gzip is decompressed by the
    caller's stream, incrementally.
    """
    size = size or BLOCK_SIZE
    partial: list[bytes] = []  # the pieces of a line that spans reads: joined once, when it ends
    held = 0  # bytes in partial
    skipped = 0  # > 0 while dropping the rest of an over-long line: its length so far
    first_line = 1
    while chunk := stream.read(size):
        cut = chunk.find(b"\n") if skipped else chunk.rfind(b"\n")
        if cut < 0:
            if skipped:
                skipped += len(chunk)
                continue
            partial.append(chunk)
            held += len(chunk)
            if held > inputs.MAX_LINE_BYTES:
                partial, skipped = [b"".join(partial)[: inputs.KEEP_BYTES]], held
            continue
        if skipped:  # the over-long line ends here
            yield RawBlock(source, first_line, partial[0], skipped + cut)
            first_line += 1
            partial, held, skipped = [], 0, 0
            chunk = chunk[cut + 1 :]
            cut = chunk.rfind(b"\n")
            if cut < 0:
                if chunk:
                    partial, held = [chunk], len(chunk)
                continue
        data = b"".join([*partial, chunk[: cut + 1]]) if partial else chunk[: cut + 1]
        partial = [chunk[cut + 1 :]] if cut + 1 < len(chunk) else []
        held = len(partial[0]) if partial else 0
        yield RawBlock(source, first_line, data)
        first_line += data.count(b"\n")
    if skipped:
        yield RawBlock(source, first_line, partial[0], skipped)
    elif partial:
        yield RawBlock(source, first_line, b"".join(partial))


Item = TypeVar("Item")


def read_ahead(blocks: Iterator[Item], depth: int = 2) -> Iterator[Item]:
    """``blocks`` (raw blocks, or what is made of them), read (and decompressed, downloaded) by a
    background thread up to ``depth`` items ahead of the consumer: zlib and socket reads release the
    GIL, so decompression overlaps the consumer's parsing on a second core. An error of the reader is
    raised in the consumer, in order; a consumer that stops early stops the reader, which then closes
    its objects."""
    queue: Queue = Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in blocks:
                if not put(block):
                    break
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)
        else:
            put(done)
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=produce, name="trace-read-ahead", daemon=True)
    reader.start()
    try:
        while (item := queue.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


def block_lines(block: RawBlock) -> Iterator[RawLine]:
    """The non-blank lines of ``block``, numbered (blank lines count), a trailing ``\\r`` dropped; a
    line longer than ``inputs.MAX_LINE_BYTES`` keeps only its first bytes (``RawLine.oversize``)."""
    if block.oversize:
        yield RawLine(block.source, block.first_line, line_text(block.data), block.oversize)
        return
    for offset, raw in enumerate(block.data.split(b"\n")):
        if raw.strip():
            yield raw_line(block.source, block.first_line + offset, raw)


def raw_line(source: str, line_no: int, raw: bytes) -> RawLine:
    """A line as read, cut to its first ``inputs.KEEP_BYTES`` when it is longer than the line cap."""
    if len(raw) > inputs.MAX_LINE_BYTES:
        return RawLine(source, line_no, line_text(raw[: inputs.KEEP_BYTES]), len(raw))
    return RawLine(source, line_no, line_text(raw))


def split_lines(stream: BinaryIO, source: str) -> Iterator[RawLine]:
    """Stream ``stream`` line by line (see :func:`split_blocks`)."""
    for block in split_blocks(stream, source):
        yield from block_lines(block)


def line_text(raw: bytes) -> str:
    """A raw line as text, without a trailing ``\\r``; bytes that are not UTF-8 surrogate-escaped."""
    return raw.rstrip(b"\r").decode("utf-8", errors="surrogateescape")


class _LinesFromBlocks:
    def iter_lines(self, day: str) -> Iterator[RawLine]:
        for block in self.iter_blocks(day):  # type: ignore[attr-defined]
            yield from block_lines(block)


class LocalTraceStore(_LinesFromBlocks):
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
        return sorted(entry.name for entry in self._entries(day))

    def object_sizes(self, day: str) -> dict[str, int]:
        return {
            entry.name: entry.stat().st_size for entry in sorted(self._entries(day), key=attrgetter("name"))
        }

    def _entries(self, day: str) -> list[os.DirEntry]:
        self._check_root()
        folder = self.root / f"dt={check_day(day)}"
        if not folder.is_dir():
            return []
        with os.scandir(folder) as entries:
            named = [e for e in entries if _is_trace_object(e.name)]
        skipped = [e.name for e in named if not e.is_file()]  # a directory, a FIFO, a dangling link
        if skipped:
            log.warning(
                "%s: %d trace object(s) skipped, not regular files: %s",
                folder,
                len(skipped),
                ", ".join(sorted(skipped)[:10]),
            )
        return [e for e in named if e.is_file()]

    def iter_blocks(self, day: str, objects: Sequence[str] | None = None) -> Iterator[RawBlock]:
        names = self.objects(day) if objects is None else _object_names(day, objects)
        for name in names:
            path = self.root / f"dt={day}" / name
            try:
                opener = gzip.open if name.endswith(".gz") else open
                with opener(path, "rb") as stream:
                    yield from split_blocks(stream, str(path))
            except (OSError, EOFError, zlib.error) as exc:
                raise SourceError(str(path), f"cannot read: {exc}") from None


class S3TraceStore(_LinesFromBlocks):
    """A trace store under ``s3://bucket/prefix``; ``client`` is a boto3 S3 client (see ``s3_client``)."""

    def __init__(self, bucket: str, prefix: str, client) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self._base = f"{self.prefix}/" if self.prefix else ""

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def _list(self, prefix: str) -> tuple[dict[str, int], list[str]]:
        """Keys (with their sizes) and common prefixes directly under ``prefix``, over every page of
        the listing."""
        keys: dict[str, int] = {}
        folders: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                keys.update((item["Key"], int(item.get("Size", 0))) for item in page.get("Contents", ()))
                folders.extend(item["Prefix"] for item in page.get("CommonPrefixes", ()))
        except (BotoCoreError, ClientError) as exc:
            raise SourceError(self.describe(), f"cannot list the store: {aws_cause(exc)}") from None
        return keys, folders

    def days(self) -> list[str]:
        _, folders = self._list(self._base)
        found = (_day_of(folder[len(self._base) :].rstrip("/")) for folder in folders)
        return sorted(day for day in found if day is not None)

    def objects(self, day: str) -> list[str]:
        return list(self.object_sizes(day))

    def object_sizes(self, day: str) -> dict[str, int]:
        folder = f"{self._base}dt={check_day(day)}/"
        keys, _ = self._list(folder)
        sizes = {key[len(folder) :]: size for key, size in keys.items()}
        return {name: sizes[name] for name in sorted(sizes) if _is_trace_object(name)}

    def iter_blocks(self, day: str, objects: Sequence[str] | None = None) -> Iterator[RawBlock]:
        names = self.objects(day) if objects is None else _object_names(day, objects)
        for name in names:
            key = f"{self._base}dt={day}/{name}"
            source = f"s3://{self.bucket}/{key}"
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
                with closing(body):
                    if name.endswith(".gz"):
                        # GzipFile only reads forward from its fileobj: the body is decompressed as it
                        # streams in, never downloaded whole.
                        with gzip.GzipFile(fileobj=body, mode="rb") as stream:
                            yield from split_blocks(stream, source)
                    else:
                        yield from split_blocks(body, source)
            except (BotoCoreError, ClientError) as exc:
                raise SourceError(source, f"cannot read: {aws_cause(exc)}") from None
            except (OSError, EOFError, zlib.error) as exc:
                raise SourceError(source, f"cannot read: {exc}") from None

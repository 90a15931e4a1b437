"""A trace store of OpenTelemetry spans, as the Collector writes them: no export job before the night.

The Collector's file exporter writes OTLP/JSON lines, its S3 exporter objects under time partitions
(``year=YYYY/month=MM/day=DD/hour=HH/minute=MM/``); a team may also keep a day per ``dt=YYYY-MM-DD/``
folder. Both layouts are read, in a local folder or under an ``s3://`` prefix, and any file of them
that holds spans (``*.json``, ``*.jsonl``, either gzipped, or a Parquet span table) counts.

The spans of one trace may lie in several files of the day (a Collector batches by time), so a day is
one object here: every file of the day is read, the spans are grouped by trace id
(``contracts.spans``), and the day's traces come out as lines of the project's trace dialect, each
with its trace id as its request id — the sampler, its quarantine and the nightly summary read them as
they read any trace store. The day's spans are grouped in memory (DuckDB); the trace lines are spooled
to a temporary file and streamed from there in blocks.

A trace of spans that is not one (no root span, no answer) is a line the sampler quarantines, naming the
trace id and why (:data:`trace_lines.NOT_A_TRACE`); a file of the day that is not spans is one such line
naming the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path

import pyarrow as pa
from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline.contracts.spans import SpanSettings, iter_traces, read_spans
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import aws_cause
from ragspine_pipeline.sources.trace_lines import NOT_A_TRACE
from ragspine_pipeline.sources.trace_store import (
    LocalTraceStore,
    RawBlock,
    S3TraceStore,
    TraceStore,
    _LinesFromBlocks,
    check_day,
    open_trace_store,
    split_blocks,
)

__all__ = ["SpanTraceStore", "open_store"]

_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", ".parquet")
_PARTS = re.compile(r"year=(\d{4})/month=(\d{2})/day=(\d{2})/")


def _is_span_object(name: str) -> bool:
    return name.endswith(_SUFFIXES)


def _partition(day: str) -> str:
    year, month, dom = check_day(day).split("-")
    return f"year={year}/month={month}/day={dom}/"


class SpanTraceStore(_LinesFromBlocks):
    """The traces of the spans under a local folder or an S3 prefix (``inner``: the store of the same
    location, whose listing and reads this one uses), one object per day."""

    def __init__(self, inner: LocalTraceStore | S3TraceStore, settings: SpanSettings) -> None:
        self.inner = inner
        self.settings = settings

    def describe(self) -> str:
        return self.inner.describe()

    # -- listing ---------------------------------------------------------------------------------

    def _keys(self, folder: str = "") -> list[str]:
        """The span files under ``folder`` (a path relative to the root, ending in ``/``; every folder
        below it included), as paths relative to the root."""
        if isinstance(self.inner, LocalTraceStore):
            root = self.inner.root
            if not root.is_dir():
                raise SourceError(self.describe(), "trace store root does not exist or is not a directory")
            found = []
            for here, _dirs, files in os.walk(root / folder):
                relative = Path(here).relative_to(root).as_posix()
                # Regular files only: a FIFO or a device named *.json would block or never end.
                found += [
                    f"{relative}/{f}".removeprefix("./")
                    for f in files
                    if _is_span_object(f) and os.path.isfile(os.path.join(here, f))
                ]
            return sorted(found)
        keys, _ = self._s3_list(folder, delimiter=False)
        return sorted(key for key in keys if _is_span_object(key))

    def _s3_list(self, folder: str, delimiter: bool) -> tuple[list[str], list[str]]:
        """Keys and (with ``delimiter``) sub-folders under ``folder``, relative to the root."""
        store = self.inner
        assert isinstance(store, S3TraceStore)
        keys: list[str] = []
        folders: list[str] = []
        options = {"Delimiter": "/"} if delimiter else {}
        pages = store.client.get_paginator("list_objects_v2")
        try:
            for page in pages.paginate(Bucket=store.bucket, Prefix=store._base + folder, **options):
                keys += [item["Key"][len(store._base) :] for item in page.get("Contents", ())]
                folders += [item["Prefix"][len(store._base) :] for item in page.get("CommonPrefixes", ())]
        except (BotoCoreError, ClientError) as exc:
            raise SourceError(self.describe(), f"cannot list the store: {aws_cause(exc)}") from None
        return keys, folders

    def _folders(self, folder: str) -> list[str]:
        """The folders directly under ``folder`` (relative to the root, each ending in ``/``)."""
        if isinstance(self.inner, LocalTraceStore):
            here = self.inner.root / folder
            if not here.is_dir():
                if not folder:
                    raise SourceError(
                        self.describe(), "trace store root does not exist or is not a directory"
                    )
                return []
            return sorted(f"{folder}{entry.name}/" for entry in here.iterdir() if entry.is_dir())
        return sorted(self._s3_list(folder, delimiter=True)[1])

    def _day_keys(self, day: str) -> list[str]:
        """The day's span files: its ``dt=`` folder and its Collector partition, every hour and minute."""
        return [key for folder in (f"dt={check_day(day)}/", _partition(day)) for key in self._keys(folder)]

    def days(self) -> list[str]:
        """The days with a ``dt=`` folder or a ``year=/month=/day=`` partition (listed level by level,
        never file by file)."""
        found = set()
        for top in self._folders(""):
            if top.startswith("dt="):
                found.add(top[3:-1])
            elif top.startswith("year="):
                for month in self._folders(top):
                    for day in self._folders(month):
                        if parts := _PARTS.fullmatch(day):
                            found.add("-".join(parts.groups()))
        return sorted(day for day in found if _valid(day))

    def objects(self, day: str) -> list[str]:
        """One name for the whole day (``<day>.spans``) when it has span files, else none: the day is
        grouped as one."""
        return _day_object(day, self._day_keys(day))

    def object_sizes(self, day: str) -> dict[str, int]:
        return dict.fromkeys(self.objects(day), 1)

    # -- reading ---------------------------------------------------------------------------------

    def iter_blocks(self, day: str, objects: Sequence[str] | None = None) -> Iterator[RawBlock]:
        keys = self._day_keys(day)  # listed once: the day's object is derived from them
        if objects is not None and list(objects) not in ([], _day_object(day, keys)):
            raise ValueError(f"not the day's span object: {list(objects)!r}")
        if objects == []:
            return
        source = f"{self.describe()} {day} (OpenTelemetry spans)"
        with tempfile.TemporaryDirectory(prefix="ragspine-spans-") as folder:
            spans, bad = [], []
            for key in keys:
                path = self._local(key, Path(folder))
                try:
                    spans.append(read_spans(path, self.settings))
                except InputError as exc:
                    bad.append(f"{NOT_A_TRACE}{json.dumps({'file': key, 'error': exc.message})}")
                if path.parent == Path(folder):
                    path.unlink()
            lines = Path(folder) / "traces.jsonl"
            with lines.open("w", encoding="utf-8") as out:
                for entry in bad:
                    out.write(entry + "\n")
                if spans:
                    traces = iter_traces(pa.concat_tables(spans), self.settings, request_ids=True)
                    for trace_id, error, line in traces:
                        if error is None:
                            out.write(line + "\n")
                        else:
                            entry = {"trace_id": trace_id, "error": error}
                            out.write(f"{NOT_A_TRACE}{json.dumps(entry)}\n")
            with lines.open("rb") as stream:
                yield from split_blocks(stream, source)

    def _local(self, key: str, folder: Path) -> Path:
        """The span file ``key`` as a local path: the file itself, or an S3 object downloaded into
        ``folder`` (its name kept: the reader tells gzip and Parquet by their bytes)."""
        if isinstance(self.inner, LocalTraceStore):
            return self.inner.root / key
        store = self.inner
        target = folder / re.sub(r"[^A-Za-z0-9._-]", "_", key)
        try:
            body = store.client.get_object(Bucket=store.bucket, Key=store._base + key)["Body"]
            with closing(body), target.open("wb") as out:
                shutil.copyfileobj(body, out, 1 << 20)
        except (BotoCoreError, ClientError) as exc:
            raise SourceError(
                f"s3://{store.bucket}/{store._base}{key}", f"cannot read: {aws_cause(exc)}"
            ) from None
        return target


def _day_object(day: str, keys: list[str]) -> list[str]:
    return [f"{check_day(day)}.spans"] if keys else []


def _valid(day: str) -> bool:
    try:
        check_day(day)
        return True
    except ValueError:
        return False


def open_store(
    uri: str,
    *,
    spans: SpanSettings | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int = 5,
) -> TraceStore:
    """The trace store at ``uri`` (``trace_store.open_trace_store``); with ``spans``, the location holds
    OpenTelemetry spans, read with those settings (:class:`SpanTraceStore`)."""
    store = open_trace_store(uri, endpoint_url=endpoint_url, region=region, max_attempts=max_attempts)
    return store if spans is None else SpanTraceStore(store, spans)  # type: ignore[arg-type]

"""Judgments cached by content: a re-evaluation only pays for answers that changed.

A judgment is stored under ``prompts.judgment_key`` — model, prompt version, metric and a hash of the
inputs the judge saw — as one small JSON object: ``{"model", "metric", "prompt_version", "scores",
"reasons"}`` (one score and one reason per repeat, in the order they were obtained). A run asking for
more repeats than an entry holds judges only the missing ones and stores the longer list. Only parsed
judgments are stored: errors are never cached, so they are retried by the next run.

Two stores with the same layout ``<root>/<key[:2]>/<key>.json``: a local directory (atomic writes) or
``s3://bucket/prefix`` (boto3 through ``sources.s3``). ``ragspine-eval judge`` uses a per-user
directory unless told otherwise (:func:`user_cache_dir`). A cache that cannot be read or written is a
:class:`SourceError`. An entry is read like any input (``inputs``): a regular file or an object of at
most :data:`MAX_ENTRY_BYTES`, its JSON nested no deeper than the input cap; an entry that is not what
this module writes (too large, not a file, torn, of another shape) is treated as absent (and replaced).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import aws_cause, is_not_found, parse_s3_uri, s3_client

__all__ = [
    "MAX_ENTRY_BYTES",
    "JudgmentCache",
    "LocalJudgmentCache",
    "S3JudgmentCache",
    "open_judgment_cache",
    "user_cache_dir",
]

MAX_ENTRY_BYTES = 1 << 20
"""The largest entry read (1 MiB): one score and a one-line reason per repeat need a few hundred bytes."""


class JudgmentCache(Protocol):
    def get(self, key: str) -> dict | None:
        """The entry stored under ``key``, None when there is none (or it is unreadable as an entry)."""
        ...

    def put(self, key: str, entry: dict) -> None: ...

    def describe(self) -> str: ...


def open_judgment_cache(uri: str, *, endpoint_url: str | None = None) -> JudgmentCache:
    """A local directory path, or ``s3://bucket/prefix``."""
    if uri.startswith("s3://"):
        bucket, prefix = parse_s3_uri(uri)
        return S3JudgmentCache(bucket, prefix, s3_client(endpoint_url=endpoint_url))
    return LocalJudgmentCache(Path(uri))


def user_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The command line's cache when it is given none: ``$XDG_CACHE_HOME/ragspine-eval/judge``, else
    ``~/.cache/ragspine-eval/judge``. An unset, empty or relative ``XDG_CACHE_HOME`` is ignored, as the XDG
    base directory specification asks. Raises RuntimeError when there is no home directory either."""
    base = env.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "ragspine-eval" / "judge"


def _entry(data: bytes | str) -> dict | None:
    """A stored entry, or None when it is not one: unreadable (torn, not UTF-8, nested too deep, a huge
    number) or of the wrong shape. A bad entry is a cache miss, never an error."""
    try:
        entry = inputs.loads(data, "judgment cache entry")
    except (InputError, ValueError):
        return None
    ok = (
        isinstance(entry, dict)
        and isinstance(entry.get("scores"), list)
        and all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 5 for s in entry["scores"])
        and isinstance(entry.get("reasons"), list)
        and len(entry["reasons"]) == len(entry["scores"])
        and all(isinstance(r, str) for r in entry["reasons"])
    )
    return entry if ok else None


def _relative(key: str) -> str:
    if len(key) < 3 or not key.isalnum():
        raise ValueError(f"not a judgment key: {key!r}")
    return f"{key[:2]}/{key}.json"


class LocalJudgmentCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return str(self.root)

    def get(self, key: str) -> dict | None:
        path = self.root / _relative(key)
        if not os.path.lexists(path):
            return None
        try:  # a regular file of bounded size; anything else (a FIFO, a directory) is a miss
            return _entry(inputs.read_document(path, "judgment cache entry", MAX_ENTRY_BYTES))
        except InputError:
            return None

    def put(self, key: str, entry: dict) -> None:
        path = self.root / _relative(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_writer(path, "judgment cache entry") as fh:
                json.dump(entry, fh, ensure_ascii=False, sort_keys=True)
        except OSError as exc:
            raise SourceError(str(path), f"cannot write the judgment cache: {exc.strerror or exc}") from None


class S3JudgmentCache:
    def __init__(self, bucket: str, prefix: str, client) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{_relative(key)}" if self.prefix else _relative(key)

    def get(self, key: str) -> dict | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            with body:
                data = body.read(MAX_ENTRY_BYTES + 1)  # never more than an entry can be
            return _entry(data) if len(data) <= MAX_ENTRY_BYTES else None
        except ClientError as exc:
            if is_not_found(exc):
                return None
            raise SourceError(self.describe(), f"cannot read the judgment cache: {aws_cause(exc)}") from None
        except BotoCoreError as exc:
            raise SourceError(self.describe(), f"cannot read the judgment cache: {aws_cause(exc)}") from None

    def put(self, key: str, entry: dict) -> None:
        body = json.dumps(entry, ensure_ascii=False, sort_keys=True).encode("utf-8")
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=body, ContentType="application/json"
            )
        except (BotoCoreError, ClientError) as exc:
            raise SourceError(self.describe(), f"cannot write the judgment cache: {aws_cause(exc)}") from None

"""Folders of files on the local disk or in S3 (and S3-compatible stores), through ``pyarrow.fs``.

What one step writes and another step, a later run or a person reads — reports, the daily production
summaries, replayed traces and quarantined lines, asset values — goes to an :class:`ObjectFolder`: a
local path for the embedded set-up, ``s3://bucket/prefix`` when steps run on several hosts, so that no
step depends on another step's disk.

Every write is whole or absent: a local file is the one atomic write of ``files.replacing`` (beside its
target, fsynced, renamed over it, the folder fsynced); an S3 object is staged locally (in memory up to
8 MiB) and uploaded only once the writer has finished, and becomes visible when its upload completes.
Reads go through the same caps as every other input (``inputs.MAX_DOCUMENT_BYTES``, nesting depth for
JSON). Credentials come from the environment (the AWS SDK's default chain), never from arguments; errors
are one line naming the location.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import replacing
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import parse_s3_uri

__all__ = ["ObjectFolder", "is_remote", "s3_filesystem"]


def is_remote(uri: str | os.PathLike) -> bool:
    """Whether ``uri`` names an object store (``s3://``) rather than a local path."""
    return str(uri).startswith("s3://")


def s3_filesystem(endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 5):
    """A pyarrow S3 filesystem: AWS itself, or the S3-compatible store at ``endpoint_url``
    (``http://host:port``), retrying throttled and failed requests (standard retry strategy)."""
    options: dict[str, Any] = {
        "region": region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=max_attempts),
        "connect_timeout": 5,
        "request_timeout": 60,
    }
    if endpoint_url:
        parts = urlsplit(endpoint_url if "://" in endpoint_url else f"https://{endpoint_url}")
        options.update(endpoint_override=parts.netloc, scheme=parts.scheme or "https")
    return pafs.S3FileSystem(**{key: value for key, value in options.items() if value is not None})


class ObjectFolder:
    """A folder — ``/local/path`` or ``s3://bucket/prefix`` — and the files under it, named by relative
    ``/``-separated names."""

    def __init__(
        self,
        uri: str | os.PathLike,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        _fs: pafs.FileSystem | None = None,
    ) -> None:
        text = str(uri)
        self.endpoint_url, self.region = endpoint_url, region
        if is_remote(text):
            bucket, key = parse_s3_uri(text)
            self.uri = f"s3://{bucket}/{key.strip('/')}".rstrip("/")
            self._root = f"{bucket}/{key.strip('/')}".rstrip("/")
            self._fs = _fs or s3_filesystem(endpoint_url, region)
        else:
            self.uri = self._root = str(Path(text).absolute())
            self._fs = _fs or pafs.LocalFileSystem()

    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    def __repr__(self) -> str:
        return f"ObjectFolder({self.uri!r})"

    def child(self, *parts: str) -> ObjectFolder:
        """The sub-folder ``parts`` (nothing is created until a file is written under it)."""
        return ObjectFolder(
            self.join(*parts), endpoint_url=self.endpoint_url, region=self.region, _fs=self._fs
        )

    def join(self, *parts: str) -> str:
        """The URI (or absolute path) of ``parts`` under this folder."""
        return posixpath.join(self.uri, *(_safe(part) for part in parts))

    def _path(self, name: str) -> str:
        return posixpath.join(self._root, *(_safe(part) for part in name.split("/")))

    # -- writing ---------------------------------------------------------------------------------

    @contextmanager
    def open_output(self, name: str, what: str) -> Iterator[IO[bytes]]:
        """A binary stream whose bytes become file ``name`` when the block ends without an error; the
        file is then either the old one or the new one, never half of one."""
        path = self._path(name)
        try:
            if self.remote:
                # Staged first: an S3 upload completes whenever its stream is closed, so a writer that
                # fails half-way must never have written to it. Only a finished file is uploaded.
                with tempfile.SpooledTemporaryFile(max_size=8 << 20) as staged:
                    yield staged
                    staged.seek(0)
                    with self._fs.open_output_stream(path) as out:
                        shutil.copyfileobj(staged, out, 8 << 20)
                return
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            with replacing(path) as out:  # the one atomic write (files.py)
                yield out
        except OSError as exc:
            raise SourceError(self.join(name), f"cannot write the {what}: {_reason(exc)}") from None

    def write_bytes(self, name: str, data: bytes, what: str) -> str:
        """Write ``data`` as file ``name``; return its URI."""
        with self.open_output(name, what) as out:
            out.write(data)
        return self.join(name)

    def write_text(self, name: str, text: str, what: str) -> str:
        return self.write_bytes(name, text.encode("utf-8"), what)

    def upload(self, name: str, local: Path, what: str) -> str:
        """Copy the local file ``local`` to ``name``, in blocks; return its URI."""
        with self.open_output(name, what) as out, open(local, "rb") as source:
            while block := source.read(8 << 20):
                out.write(block)
        return self.join(name)

    # -- reading ---------------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        return self._info(name).type == pafs.FileType.File

    def read_bytes(self, name: str, what: str, limit: int | None = None) -> bytes:
        """The bytes of file ``name``; a missing file or one above ``limit`` (default
        ``inputs.MAX_DOCUMENT_BYTES``) is a one-line InputError, an unreachable store a SourceError."""
        limit = inputs.MAX_DOCUMENT_BYTES if limit is None else limit
        info = self._info(name)
        if info.type != pafs.FileType.File:
            raise InputError(self.join(name), f"no {what} here")
        if info.size is not None and info.size > limit:
            raise InputError(
                self.join(name), f"the {what} is {info.size:,} bytes; at most {limit:,} are read"
            )
        try:
            with self._fs.open_input_stream(self._path(name)) as stream:
                data = stream.read()  # the size was checked above; a file grown since is refused below
        except OSError as exc:
            raise SourceError(self.join(name), f"cannot read the {what}: {_reason(exc)}") from None
        if len(data) > limit:
            raise InputError(self.join(name), f"the {what} is over {limit:,} bytes; at most that is read")
        return data

    def read_json(self, name: str, what: str) -> Any:
        """File ``name`` parsed as JSON, through the input caps (size, nesting)."""
        return inputs.loads(self.read_bytes(name, what), self.join(name))

    def open_input_file(self, name: str, what: str):
        """A random-access file (what Parquet readers want) on file ``name``."""
        try:
            return self._fs.open_input_file(self._path(name))
        except OSError as exc:
            raise SourceError(self.join(name), f"cannot read the {what}: {_reason(exc)}") from None

    def names(self, suffix: str = "") -> list[str]:
        """The names of the files directly in this folder ending with ``suffix``, sorted; none when the
        folder does not exist."""
        selector = pafs.FileSelector(self._root, allow_not_found=True, recursive=False)
        try:
            infos = self._fs.get_file_info(selector)
        except OSError as exc:
            raise SourceError(self.uri, f"cannot list: {_reason(exc)}") from None
        return sorted(
            info.base_name
            for info in infos
            if info.type == pafs.FileType.File and info.base_name.endswith(suffix)
        )

    def delete(self, name: str) -> None:
        """Remove file ``name`` if it exists."""
        try:
            if self.exists(name):
                self._fs.delete_file(self._path(name))
        except OSError as exc:
            raise SourceError(self.join(name), f"cannot delete: {_reason(exc)}") from None

    def _info(self, name: str) -> pafs.FileInfo:
        try:
            return self._fs.get_file_info(self._path(name))
        except OSError as exc:
            raise SourceError(self.join(name), f"cannot read: {_reason(exc)}") from None


def _safe(part: str) -> str:
    """A path component as given, refused when it could climb out of the folder."""
    if part in ("", ".", "..") or "\\" in part or "\x00" in part:
        raise InputError(part or "(empty)", "not a usable file name")
    return part


def _reason(exc: OSError) -> str:
    """One line of a pyarrow or OS error (AWS errors carry codes and messages, never credentials)."""
    text = exc.strerror if isinstance(exc.strerror, str) and exc.strerror else str(exc)
    return " ".join(text.split())[:500]

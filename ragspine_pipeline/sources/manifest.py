"""The index manifest that the rebuild sensor watches.

A JSON object at a local path, ``file://`` URI or ``s3://bucket/key``: ``{"index_version": str,
"built_at": ISO, "corpus_hash": str, ...}``. A new ``index_version`` means one re-evaluation run.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from pydantic import ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.manifest import IndexManifest
from ragspine_pipeline.contracts.records import explain_validation_error
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.jsonvalues import json_type
from ragspine_pipeline.sources.errors import ManifestMissing
from ragspine_pipeline.sources.s3 import object_body, s3_client

__all__ = ["IndexManifest", "ManifestMissing", "read_manifest"]

# A manifest is a few hundred bytes; anything far larger is not a manifest, and is not read into memory.
_MAX_BYTES = 1 << 20


def read_manifest(
    uri: str, *, endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 5
) -> IndexManifest:
    """Read and validate the manifest at ``uri`` (a path, ``file://`` or ``s3://bucket/key``).

    ``endpoint_url``, ``region`` and ``max_attempts`` (botocore's retries) apply to ``s3://`` only.

    Raises :class:`ManifestMissing` when the file or object does not exist, :class:`InputError` (file and
    field) when it is not a JSON object with an ``index_version``, :class:`SourceError` when the store
    cannot be reached or read.
    """
    if uri.startswith("s3://"):
        data = _read_s3(uri, s3_client(endpoint_url=endpoint_url, region=region, max_attempts=max_attempts))
    else:
        data = _read_local(uri)
    raw = inputs.loads(data, uri)
    if not isinstance(raw, dict):
        raise InputError(uri, f"expected a JSON object, got {json_type(raw)}")
    try:
        return IndexManifest.model_validate(raw)
    except ValidationError as exc:
        # The contracts' explanation of a validation error: the field, the reason and the value given.
        raise explain_validation_error(exc, uri, None, raw, ()) from None


def _local_path(uri: str) -> Path:
    if not uri.startswith("file://"):
        return Path(uri)
    parsed = urlparse(uri)
    if parsed.netloc not in ("", "localhost"):
        raise InputError(uri, "a file:// URI must name a local path (file:///path)")
    return Path(unquote(parsed.path))


def _read_local(uri: str) -> bytes:
    path = _local_path(uri)
    if not path.exists() and not path.is_symlink():
        raise _no_manifest(uri)
    try:
        return inputs.read_document(path, "index manifest", _MAX_BYTES)
    except InputError as exc:
        raise InputError(uri, exc.message) from None


def _read_s3(uri: str, client) -> bytes:
    with object_body(client, uri, "index manifest", _no_manifest) as body:
        return _bounded(uri, body.read(_MAX_BYTES + 1))


def _no_manifest(uri: str) -> ManifestMissing:
    return ManifestMissing(uri, "no index manifest at this location")


def _bounded(uri: str, data: bytes) -> bytes:
    if len(data) > _MAX_BYTES:
        raise InputError(uri, f"not an index manifest: larger than {_MAX_BYTES} bytes")
    return data

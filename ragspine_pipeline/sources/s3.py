"""S3 access shared by the trace store and the index manifest: one client recipe, one URI syntax.

Credentials come only from the environment / botocore's standard chain (environment variables, shared
config, instance roles); they are never arguments, and nothing here logs or formats them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError

if TYPE_CHECKING:
    import botocore.session

__all__ = ["aws_cause", "is_not_found", "object_body", "parse_s3_uri", "s3_client"]

# Bucket names as S3 accepts them, including legacy names with upper case and underscores.
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{2,254}")
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})

_loader_lock = threading.Lock()
_loader = None  # botocore's model loader, shared by every client: it only caches read-only models


def s3_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int = 5,
    connect_timeout: float = 5,
    read_timeout: float = 30,
):
    """A boto3 S3 client whose calls botocore retries (standard mode, ``max_attempts`` in all).

    ``endpoint_url`` points at an S3-compatible store (MinIO, moto); ``region`` None means the
    environment's default. Each call builds its own session (sessions are not thread-safe, and a
    session caches the credentials it resolved), sharing only botocore's loader of the service models,
    which is most of the cost of a client.
    """
    # Imported here, not at the top: boto3 costs a tenth of a second to every importer of this module
    # (a local baseline, a local trace store), and only a client needs it.
    import boto3
    from botocore.config import Config

    config = Config(
        # total_max_attempts counts the first try; botocore's "max_attempts" key would count retries only.
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )
    session = boto3.session.Session(botocore_session=_botocore_session())
    return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _botocore_session() -> botocore.session.Session:
    import botocore.session

    global _loader
    session = botocore.session.Session()
    with _loader_lock:
        if _loader is None:
            _loader = session.get_component("data_loader")  # honours AWS_DATA_PATH, like any session
        else:
            session.register_component("data_loader", _loader)
    return session


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` → ``(bucket, key)``; the key may be empty (``s3://bucket``) or a prefix.

    Anything else (another scheme, no bucket, an invalid bucket name) is an InputError naming the URI.
    """
    if not uri.startswith("s3://"):
        raise InputError(uri, "not an S3 URI: expected s3://bucket/key")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise InputError(uri, f"not an S3 URI: invalid bucket name {bucket!r}")
    return bucket, key


def aws_cause(exc: BotoCoreError | ClientError) -> str:
    """A one-line cause for an AWS error: the error code and message, or botocore's own description.

    Neither carries credentials: botocore never puts keys or signatures in its messages.
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code") or "error"
        message = error.get("Message") or exc.operation_name
        return f"{code}: {message}"
    return str(exc)


def is_not_found(exc: ClientError) -> bool:
    """The object (not the bucket) does not exist."""
    return exc.response.get("Error", {}).get("Code") in _NOT_FOUND


@contextmanager
def object_body(client, uri: str, what: str, missing: Callable[[str], Exception]) -> Iterator:
    """The streaming body of the object ``uri`` names (``s3://bucket/key``), closed afterwards.

    A URI naming no object is an InputError; a missing object raises ``missing(uri)``; any other AWS
    error, while opening or while the caller reads the body, is a :class:`SourceError` about ``what``.
    """
    bucket, key = parse_s3_uri(uri)
    if not key or key.endswith("/"):
        raise InputError(uri, f"an {what} URI must name an object: s3://bucket/key")
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            yield body
        finally:
            body.close()
    except ClientError as exc:
        if is_not_found(exc):
            raise missing(uri) from None
        raise SourceError(uri, f"cannot read the {what}: {aws_cause(exc)}") from None
    except BotoCoreError as exc:
        raise SourceError(uri, f"cannot read the {what}: {aws_cause(exc)}") from None

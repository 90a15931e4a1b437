"""Small files that several runs update at once — baselines, extraction thresholds — on a local disk or S3.

Both kinds implement ``files.VersionedFile``: an update is a read–change–write that no other update
can interleave with, so a ratchet compares against, and writes on top of, the value that is current at
that moment.

* A local path: an exclusive ``flock`` held from the read to the atomic replace (``files.LockedFile``);
  processes on one host queue behind each other.
* ``s3://bucket/key``: optimistic concurrency with S3's conditional writes. The object is read with its
  ETag and written back with ``If-Match: <etag>`` (``If-None-Match: *`` when it did not exist); when
  another host wrote in between, S3 answers 412 Precondition Failed (or 409 ConditionalRequestConflict
  for two writes in flight), and the whole read–change–write runs again on the new text. Any number of
  hosts can promote at once and none overwrites another's tighter value.
"""

from __future__ import annotations

import os
import random
import time

from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline.files import Change, LockedFile, VersionedFile
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.s3 import aws_cause, is_not_found, parse_s3_uri, s3_client

CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
MAX_CONFLICTS = 50


def s3_endpoint() -> str | None:
    """The S3-compatible endpoint the command line uses for ``s3://`` files (``RAGSPINE_S3_ENDPOINT_URL``,
    as the code location does); None: AWS itself."""
    return os.environ.get("RAGSPINE_S3_ENDPOINT_URL") or None


def open_versioned(
    uri: str, what: str, *, endpoint_url: str | None = None, region: str | None = None
) -> VersionedFile:
    """The versioned file at ``uri``: ``s3://bucket/key`` or a local path."""
    if uri.startswith("s3://"):
        return S3VersionedFile(uri, what, endpoint_url=endpoint_url, region=region)
    return LockedFile(uri, what)


class S3VersionedFile:
    """A :class:`files.VersionedFile` in S3, updated with conditional writes (see the module docstring)."""

    def __init__(
        self,
        uri: str,
        what: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        max_conflicts: int = MAX_CONFLICTS,
        client=None,
    ) -> None:
        self.bucket, self.key = parse_s3_uri(uri)
        if not self.key or self.key.endswith("/"):
            raise SourceError(uri, f"a {what} URI must name an object: s3://bucket/key")
        self.name, self.what, self.max_conflicts = uri, what, max_conflicts
        self.client = client or s3_client(endpoint_url=endpoint_url, region=region)

    def read(self) -> str | None:
        return self._get()[0]

    def update(self, change: Change) -> str | None:
        for conflicts in range(self.max_conflicts):
            current, etag = self._get()
            new = change(current)
            if new is None or new == current:
                return current
            condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
            try:
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self.key,
                    Body=new.encode("utf-8"),
                    ContentType="application/json",
                    **condition,
                )
                return new
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in CONFLICT_CODES:
                    raise SourceError(self.name, f"cannot write the {self.what}: {aws_cause(exc)}") from None
            except BotoCoreError as exc:
                raise SourceError(self.name, f"cannot write the {self.what}: {aws_cause(exc)}") from None
            # Another writer won the race: back off a little (jittered), then redo the whole update.
            time.sleep(random.uniform(0, min(1.0, 0.02 * 2**conflicts)))
        raise SourceError(
            self.name, f"cannot write the {self.what}: {self.max_conflicts} conflicting writes in a row"
        )

    def _get(self) -> tuple[str | None, str | None]:
        """The object's text and ETag; ``(None, None)`` when it does not exist."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.key)
            data = response["Body"].read()
        except ClientError as exc:
            if is_not_found(exc):
                return None, None
            raise SourceError(self.name, f"cannot read the {self.what}: {aws_cause(exc)}") from None
        except BotoCoreError as exc:
            raise SourceError(self.name, f"cannot read the {self.what}: {aws_cause(exc)}") from None
        try:
            return data.decode("utf-8"), response["ETag"]
        except UnicodeDecodeError as exc:
            raise SourceError(self.name, f"not UTF-8 text: {exc.reason}") from None

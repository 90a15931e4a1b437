"""Where extraction facts come from: a local JSONL file or an object of an S3(-compatible) store.

The facts loader (``contracts.extraction.parse_facts``) quarantines unusable lines with their line
number either way; the S3 body is streamed line by line, never held whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from ragspine_pipeline.contracts.extraction import FactsLoad, load_facts, parse_facts
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.s3 import object_body, s3_client
from ragspine_pipeline.sources.trace_store import split_lines


def read_facts(
    uri: str, *, endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 5
) -> FactsLoad:
    """The facts at ``uri`` (a path or ``s3://bucket/key``); ``endpoint_url``/``region`` for S3 only.

    A missing file or object is an :class:`InputError`; an unreachable store a :class:`SourceError`
    after botocore's retries.
    """
    if not uri.startswith("s3://"):
        return load_facts(uri)
    client = s3_client(endpoint_url=endpoint_url, region=region, max_attempts=max_attempts)
    with object_body(client, uri, "extraction facts", _no_facts) as body:
        return parse_facts(_all_lines(body, uri), uri)


def _no_facts(uri: str) -> InputError:
    return InputError(uri, "no extraction facts at this location")


def _all_lines(body: BinaryIO, uri: str) -> Iterator[bytes]:
    """Every line of the body as bytes, blank ones included, so that line numbers match the object's
    (split on ``\\n`` only, as a local file is)."""
    line_no = 0
    for line in split_lines(body, uri):
        while line_no + 1 < line.line_no:
            line_no += 1
            yield b""
        line_no += 1
        yield line.text.encode("utf-8", errors="surrogateescape")

"""The record a command-line replay leaves beside its traces: which replay wrote them, for which release
and index, the cases it could not ask, and which answers it reused from earlier replays.

``ragspine-eval replay --out traces.jsonl`` writes ``traces.replay.json``; ``ragspine-eval score --trace
traces.jsonl`` reads it and names each reuse (and each case that could not be asked) in the decision's
warnings, so a verdict built on answers the service gave earlier says so. The record holds the sha256
of the traces as written: a record of other traces (the file rewritten since, by hand or by another
tool) is said to be so and not believed. Traces without a record are taken as they are.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from ragspine_pipeline.files import ATOMIC, output_kind, write_text_atomically
from ragspine_pipeline.sources.answer_store import Stamp, reuse_warnings
from ragspine_pipeline.sources.replay import Replay, failure_warnings

SUFFIX = ".replay.json"


def record_path(traces: str | Path) -> Path:
    """Where the record of ``traces`` is: ``traces.jsonl`` → ``traces.replay.json``."""
    traces = Path(traces)
    return traces.with_name(traces.stem + SUFFIX)


def write_replay_record(result: Replay, stamp: Stamp, *, sut: str, index_version: str | None) -> Path | None:
    """Write the record of ``result`` beside its traces and return its path; None when the traces went
    to a stream (a device or FIFO has no place beside it, nor traces to read back)."""
    if output_kind(result.traces_path) != ATOMIC:
        return None
    record = {
        "traces": result.traces_path.name,
        "traces_sha256": result.traces_sha256,
        **asdict(stamp),
        "index_version": index_version,
        "sut": sut,
        "asked": result.asked,
        "answered": result.answered,
        "reused": [asdict(reuse) for reuse in result.reused_from],
        "failed": dict(sorted(result.failed.items())),
    }
    path = record_path(result.traces_path)
    write_text_atomically(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n", "replay record")
    return path


def record_warnings(traces: str | Path) -> list[str]:
    """What a decision on ``traces`` says of how they were replayed: every reuse, named by the replay
    that stored the answers, and the cases that could not be asked. A record that is unreadable or
    not of these traces is one warning saying so; no record (or traces that are not a file), none."""
    record = record_path(traces)
    if not Path(traces).is_file() or not record.is_file():
        return []
    unknown = "whether its answers were reused from earlier replays is not known"
    try:
        content, matches = _read(traces)
        warnings = [*reuse_warnings(content["reused"]), *failure_warnings(content["failed"])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [f"{record} is not a readable replay record of {traces}: {unknown}"]
    if not matches:
        return [f"{record} was written for other traces than {traces} holds now: {unknown}"]
    return warnings


def record_release(traces: str | Path) -> str | None:
    """The release the replay record of ``traces`` names (``replay --release`` or the SUT file's
    ``release:``); None when there is no record, it cannot be read, it is of other traces (what
    :func:`record_warnings` names) or it names no release."""
    if not Path(traces).is_file() or not record_path(traces).is_file():
        return None
    try:
        content, matches = _read(traces)
        release = content.get("release")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return release if matches and isinstance(release, str) and release.strip() else None


def _read(traces: str | Path) -> tuple[dict, bool]:
    """The record of ``traces`` and whether it was written for the traces the file holds now."""
    with open(traces, "rb") as written:
        digest = hashlib.file_digest(written, "sha256").hexdigest()
    content = json.loads(record_path(traces).read_text(encoding="utf-8"))
    return content, content["traces_sha256"] == digest

"""One trace line through the record reader, and the quarantine of the lines it refuses.

The record reader (``json.loads`` and the pydantic ``Trace``) alone decides whether a line the columnar
reader (``sample_blocks``) could not vouch for is a valid trace, and if not, why: ``invalid_json``,
``invalid_trace`` or ``missing_request_id``. A refused line becomes a quarantine entry (one ASCII JSON
line naming its source and line number); entries are kept in line order up to a byte cap, and the
first entry that does not fit closes the quarantine: it and every later bad line are only counted.
That rule composes: the entries kept from consecutive parts of a day, concatenated and capped again,
are the entries one pass over the whole day keeps (see :class:`QuarantineCap`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.records import explain_validation_error
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Trace
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.sources.trace_store import RawLine

__all__ = [
    "NOT_A_TRACE",
    "QUARANTINE_MAX_BYTES",
    "QUARANTINE_REASONS",
    "Bad",
    "QuarantineCap",
    "QuarantineFile",
    "check_quarantine_path",
    "parse_line",
    "quarantine_entry",
    "reject_constant",
]

QUARANTINE_REASONS = ("invalid_json", "invalid_trace", "missing_request_id")
NOT_A_TRACE = "#not-a-trace "
"""How a store of spans (``span_store``) writes, in place of a trace line, spans that are not a trace
(``{"trace_id", "error"}``) or a file that is not spans (``{"file", "error"}``): never JSON, so no reader
vouches for it, and the record reader quarantines it as ``invalid_trace`` with that error."""
QUARANTINE_MAX_BYTES = 64 << 20
"""Bytes of quarantine entries kept per day; beyond it bad lines are counted, not kept."""


@dataclass(frozen=True)
class Bad:
    reason: str
    error: str
    field: str | None = None


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_line(line: RawLine) -> tuple[str, bytes, bytes, dict[str, str] | None] | Bad:
    """``(request_id, content_hash, text, tags)`` of a valid trace line — ``text`` the stripped line as
    UTF-8 bytes, which ``json.loads`` turns back into the same object — or why it is quarantined."""
    if line.oversize:
        return Bad("invalid_json", inputs.too_long_message(line.oversize))
    text = line.text.strip()
    if text.startswith(NOT_A_TRACE):
        said = json.loads(text[len(NOT_A_TRACE) :])
        field = "trace_id" if "trace_id" in said else "file"
        return Bad("invalid_trace", f"{field} {said[field]}: {said['error']}", field)
    if line.line_no == 1:  # a byte-order mark opening the file is skipped, as the scorer's reader does
        text = text.removeprefix("\ufeff")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes, surrogate-escaped by the store
        return Bad("invalid_json", f"not UTF-8 text: {exc.reason}")
    depth = inputs.nesting_depth(data)
    if depth > inputs.MAX_DEPTH:
        return Bad("invalid_json", inputs.too_deep_message(depth))
    past_a_double = _OutOfRange()
    try:
        raw = json.loads(text, parse_constant=reject_constant, parse_float=past_a_double.parse)
    except json.JSONDecodeError as exc:
        return Bad("invalid_json", f"malformed JSON: {exc.msg} (column {exc.colno})")
    except ValueError as exc:  # NaN / Infinity: not JSON, and never a silent NaN downstream
        if "digits" in str(exc):  # an integer longer than Python converts
            return Bad("invalid_json", "malformed JSON: a number has too many digits (at most 4,300)")
        return Bad("invalid_json", f"malformed JSON: {exc}")
    except RecursionError:
        return Bad("invalid_json", "malformed JSON: nested too deeply")
    if not isinstance(raw, dict):
        return Bad("invalid_json", f"expected a JSON object, got {type(raw).__name__}")
    try:
        trace = Trace.model_validate(raw)
    except ValidationError as exc:
        # The contracts' own explanation of a validation error: the field, the reason, the value given.
        explained = explain_validation_error(exc, line.source, line.line_no, raw, TRACE_QID_ALIASES)
        return Bad("invalid_trace", explained.message, explained.field)
    if past_a_double.literals:  # in a field the contract does not know: kept, it would be written as Infinity
        number = past_a_double.literals[0][:40]
        return Bad("invalid_json", f"a number out of range of a double ({number}): JSON has no infinity")
    if trace.qid is None or not trace.qid.strip():
        return Bad("missing_request_id", "a production trace needs a request id (request_id or qid)", "qid")
    return trace.qid, hashlib.blake2b(data, digest_size=16).digest(), data, trace.tags


class _OutOfRange:
    """A ``parse_float`` that reads numbers as ``json`` does and remembers those past a double
    (``1e999``, read as infinity)."""

    def __init__(self) -> None:
        self.literals: list[str] = []

    def parse(self, literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            self.literals.append(literal)
        return value


def quarantine_entry(line: RawLine, bad: Bad, redact_text: Callable[[str], str] | None = None) -> str:
    """One quarantine line (ASCII JSON): where the line was, why it was set aside, and what it held.

    ``raw_base64`` keeps the line's first ``inputs.KEEP_BYTES`` bytes losslessly (after redaction:
    free text in a bad line is as private as in a good one); ``raw`` is the same bytes as text when
    they are UTF-8 (else null), and ``raw_bytes`` the full length of the line.
    """
    text = line.text if redact_text is None else redact_text(line.text)
    data = text.encode("utf-8", "surrogateescape")
    length = line.oversize or len(line.text.encode("utf-8", "surrogateescape"))
    kept = data[: inputs.KEEP_BYTES]
    try:
        readable: str | None = kept.decode("utf-8")
    except UnicodeDecodeError:
        readable = None
    entry = {
        "source": line.source,
        "line": line.line_no,
        "reason": bad.reason,
        "field": bad.field,
        "error": bad.error,
        "raw": readable,
        "raw_base64": base64.b64encode(kept).decode("ascii"),
        "raw_bytes": length,
    }
    # ASCII (not files.jsonl_line): the cap counts an entry's characters as its bytes, in every shard.
    return json.dumps(entry)


class QuarantineCap:
    """How many entries (in order) fit in ``max_bytes``, each taking its length and a newline; the first
    that does not fit closes the cap, and it and every later entry are omitted.

    Because a closed cap stays closed, capping composes over consecutive parts of a day: a part capped
    on its own keeps a prefix of its entries; capped again after the earlier parts (less room, never
    more), it keeps a prefix of that prefix; and a part that had to omit something closes the cap for
    every later part, as one pass would.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.kept = 0
        self.omitted = 0
        self.closed = False

    def admit(self, length: int) -> bool:
        """Whether an entry of ``length`` characters (ASCII) is kept; counts it either way."""
        if not self.closed and self.size + length + 1 <= self.max_bytes:
            self.size += length + 1
            self.kept += 1
            return True
        self.closed = True
        self.omitted += 1
        return False

    def skip(self, count: int) -> None:
        """``count`` later entries omitted elsewhere (by a part's own cap): the cap closes."""
        if count:
            self.closed = True
            self.omitted += count


def check_quarantine_path(path: Path | None) -> None:
    """InputError when ``path`` exists and is not a regular file (checked before a pass, not after)."""
    if path is not None and (path.is_symlink() or path.exists()) and not path.is_file():
        raise InputError(str(path), "cannot write the quarantine: not a regular file")


class QuarantineFile:
    """Entries written through a :class:`QuarantineCap` to an atomic write of ``path``
    (``files.atomic_writer``, opened on the first entry) that replaces ``path`` when the ``with`` block
    completes: removed when nothing was kept, left as it was when the block fails. With no path,
    nothing is written or counted."""

    def __init__(self, path: Path | None, max_bytes: int) -> None:
        check_quarantine_path(path)
        self.path = path
        self.cap = QuarantineCap(max_bytes)
        self._writing = ExitStack()
        self._out: TextIO | None = None

    def extend(self, entries: list[str], omitted: int = 0) -> None:
        """Append a part's kept ``entries`` and count the ``omitted`` ones that followed them."""
        if self.path is None:
            return
        for entry in entries:
            if self.cap.admit(len(entry)):
                self._write(entry)
        self.cap.skip(omitted)

    def _write(self, entry: str) -> None:
        assert self.path is not None
        try:
            if self._out is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._out = self._writing.enter_context(atomic_writer(self.path, "quarantine"))
            self._out.write(entry + "\n")
        except OSError as exc:
            raise self._cannot_write(exc) from None

    def __enter__(self) -> QuarantineFile:
        return self

    def __exit__(self, exc_type: Any, error: Any, tb: Any) -> None:
        if self.path is None:
            return
        if self._out is not None:
            self._writing.__exit__(exc_type, error, tb)  # the file replaced, or after an error left as it was
            return
        target = Path(os.path.realpath(self.path))  # a link's target, never the link itself
        if exc_type is None and target.is_file():
            try:
                target.unlink()  # this day had nothing bad: no stale file from an earlier pass
            except OSError as exc:
                raise self._cannot_write(exc) from None

    def _cannot_write(self, exc: OSError) -> InputError:
        return InputError(str(self.path), f"cannot write the quarantine: {exc.strerror or exc}")

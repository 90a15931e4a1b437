"""Record-by-record reading of JSON Lines and JSON-array files, with exact 1-based line numbers.

This is the authoritative (slow) reader: it is used for small files, for JSON arrays, and to name the
exact line of an error that the columnar reader in ``contracts.columns`` only detected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError

_WS = " \t\r\n"


def check_readable(path: str | Path) -> Path:
    """Return ``path`` as a Path, or raise an InputError when it is not a readable regular file
    (a FIFO, a device, a directory or a symbolic-link loop is refused before anything is read)."""
    return inputs.check_regular(path)


def read_bytes(path: str | Path, stream: IO[bytes], size: int, *, line: bool = False) -> bytes:
    """The one place this reader takes bytes from an open file (``stream``, opened from ``path``): at
    most ``size`` bytes, or with ``line`` one line of at most ``size`` bytes. An OSError (EIO, ENODEV)
    is left to :class:`Reading`, which names ``path``."""
    return stream.readline(size) if line else stream.read(size)


def cannot_read(exc: OSError) -> str:
    """An OSError met while reading a file, as the message of its one line: ``cannot read: [Errno 5]
    Input/output error``."""
    if exc.errno is None:
        return f"cannot read: {exc}"
    return f"cannot read: [Errno {exc.errno}] {exc.strerror or exc}"


@contextmanager
def read_errors(path: str | Path) -> Iterator[None]:
    """An OSError raised in the block (a disk's EIO, a vanished device's ENODEV) as one InputError line
    naming ``path`` and the OS error: what every reader of an input file raises, never a traceback."""
    try:
        yield
    except OSError as exc:
        raise InputError(str(path), cannot_read(exc)) from None


class Reading:
    """An open input file whose every read goes through :func:`read_bytes` and whose every OSError is
    one InputError line naming the file (:func:`read_errors`); ``read`` and ``readline`` as a binary
    stream's, so that ``inputs.iter_lines`` reads it as any stream."""

    def __init__(self, stream: IO[bytes], path: str | Path) -> None:
        self._stream = stream
        self.path = path

    def read(self, size: int = -1) -> bytes:
        with read_errors(self.path):
            return read_bytes(self.path, self._stream, size)

    def readline(self, size: int = -1) -> bytes:
        with read_errors(self.path):
            return read_bytes(self.path, self._stream, size, line=True)


@contextmanager
def reading(path: str | Path, what: str = "file") -> Iterator[Reading]:
    """``path`` opened as ``inputs.open_regular`` opens it (a regular file only, never blocking), as a
    :class:`Reading`: every error, opening or reading, is one InputError line naming the file."""
    with inputs.open_regular(path, what) as fh:
        yield Reading(fh, path)


def first_char(path: Path) -> str:
    """The first non-whitespace character of the file ('' for an empty file): '[' means a JSON array."""
    with reading(path) as fh:
        while chunk := fh.read(65536):
            stripped = chunk.lstrip()
            if stripped:
                return chr(stripped[0])
    return ""


def read_text(path: Path) -> str:
    """The whole file as strict UTF-8 text, at most ``inputs.MAX_DOCUMENT_BYTES`` (a JSON array is read
    whole); the errors are ``inputs.read_text``'s, a read error one line as everywhere here."""
    limit = inputs.MAX_DOCUMENT_BYTES
    with reading(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputError(str(path), f"the file is larger than {limit:,} bytes; refusing to read it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(str(path), f"not UTF-8 text: {exc.reason}", line) from None


class KeyCountingDict(dict):
    """A JSON object that remembers the keys it was given more than once (JSON keeps only the last)."""

    repeated: list[str]

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> KeyCountingDict:
        obj = cls(pairs)
        seen: set[str] = set()
        obj.repeated = []
        for key, _ in pairs:
            if key in seen:
                obj.repeated.append(key)
            seen.add(key)
        return obj


def iter_records(path: str | Path, object_pairs_hook=None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every record; blank lines are skipped.

    A JSON array file yields its elements, each with the line on which it starts.
    Malformed JSON raises an InputError naming the line.
    """
    p = check_readable(path)
    decoder = json.JSONDecoder(object_pairs_hook=object_pairs_hook)
    if first_char(p) == "[":
        yield from _iter_array(p, decoder)
    else:
        yield from _iter_lines(p, decoder)


def _iter_lines(path: Path, decoder: json.JSONDecoder) -> Iterator[tuple[int, Any]]:
    hook = decoder.object_pairs_hook
    with reading(path) as fh:
        for line in inputs.iter_lines(fh):
            if line.too_long:
                raise InputError(str(path), inputs.too_long_message(line.length), line.number)
            if not line.data.strip():
                continue
            value = inputs.loads(line.data, str(path), line.number, object_pairs_hook=hook)
            if _SURROGATE_ESCAPE_BYTES.search(line.data):
                _refuse_lone_surrogates(value, path, line.number)
            yield line.number, value


def _iter_array(path: Path, decoder: json.JSONDecoder) -> Iterator[tuple[int, Any]]:
    text = read_text(path)
    depth = inputs.nesting_depth(text)
    if depth > inputs.MAX_DEPTH + 1:  # the array itself is one level
        raise InputError(str(path), inputs.too_deep_message(depth - 1))
    pos = len(text) - len(text.lstrip(_WS)) + 1  # just past '['
    line, counted_to = 1, 0

    def line_at(offset: int) -> int:
        nonlocal line, counted_to
        line += text.count("\n", counted_to, offset)
        counted_to = offset
        return line

    def skip_ws(offset: int) -> int:
        while offset < len(text) and text[offset] in _WS:
            offset += 1
        return offset

    pos = skip_ws(pos)
    if pos < len(text) and text[pos] == "]":
        _expect_end(path, text, skip_ws(pos + 1), line_at)
        return
    while True:
        start = skip_ws(pos)
        try:
            value, pos = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            raise InputError(
                str(path), f"malformed JSON: {exc.msg} (column {exc.colno})", exc.lineno
            ) from None
        except ValueError:  # an integer of more than 4,300 digits
            message = "a number has too many digits (at most 4,300)"
            raise InputError(str(path), message, line_at(start)) from None
        if _SURROGATE_ESCAPE.search(text, start, pos):
            _refuse_lone_surrogates(value, path, line_at(start))
        yield line_at(start), value
        pos = skip_ws(pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == "]":
            _expect_end(path, text, skip_ws(pos + 1), line_at)
            return
        raise InputError(str(path), "malformed JSON array: expected ',' or ']'", line_at(min(pos, len(text))))


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_lone_surrogates(value: Any, path: Path, line: int) -> None:
    """A ``\\ud800`` escape without its pair decodes to a lone surrogate, which is not text (no UTF-8
    encodes it): refused with the line and the field, as any other value that is not what it claims."""
    found = lone_surrogate(value)
    if found is not None:
        field, code = found
        raise InputError(str(path), f"a lone surrogate ({code}) is not text", line, None, field or None)


def lone_surrogate(value: Any) -> tuple[str, str] | None:
    """The first key or string in ``value`` that holds a lone surrogate, as ``(field, code)`` (the
    field's dotted path, ``""`` for ``value`` itself; the surrogate as ``\\udXXX``); None when every
    string is text."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        current, where = stack.pop()
        if isinstance(current, dict):
            for key, item in current.items():
                name = f"{where}.{key}" if where else str(key)
                if (code := _surrogate_in(key)) is not None:
                    return name, code
                stack.append((item, name))
        elif isinstance(current, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(current))
        elif isinstance(current, str) and (code := _surrogate_in(current)) is not None:
            return where, code
    return None


def _surrogate_in(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(text[exc.start]):04x}"
    return None


def _expect_end(path: Path, text: str, pos: int, line_at) -> None:
    if pos < len(text):
        raise InputError(str(path), "unexpected content after the JSON array", line_at(pos))

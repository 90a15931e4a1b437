"""Record-by-record reading of JSON Lines and JSON-array files, with exact 1-based line numbers.

This is the authoritative (slow) reader: it is used for small files, for JSON arrays, and to name the
exact line of an error that the columnar reader in ``contracts.columns`` only detected.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragspine_pipeline.errors import InputError

_WS = " \t\r\n"


def check_readable(path: str | Path) -> Path:
    """Return ``path`` as a Path, or raise an InputError when it is not a readable file."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(path), "file not found")
    if not p.is_file():
        raise InputError(str(path), "not a regular file")
    return p


def first_char(path: Path) -> str:
    """The first non-whitespace character of the file ('' for an empty file): '[' means a JSON array."""
    with path.open("rb") as fh:
        while chunk := fh.read(65536):
            stripped = chunk.lstrip()
            if stripped:
                return chr(stripped[0])
    return ""


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
    with path.open("r", encoding="utf-8", errors="strict") as fh:
        line_no = 0
        try:
            for line_no, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield line_no, decoder.decode(line)
                except json.JSONDecodeError as exc:
                    raise InputError(
                        str(path), f"malformed JSON: {exc.msg} (column {exc.colno})", line_no
                    ) from None
        except UnicodeDecodeError as exc:
            raise InputError(str(path), f"not UTF-8 text: {exc.reason}", line_no + 1) from None


def _iter_array(path: Path, decoder: json.JSONDecoder) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text: {exc.reason}") from None
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
        yield line_at(start), value
        pos = skip_ws(pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == "]":
            _expect_end(path, text, skip_ws(pos + 1), line_at)
            return
        raise InputError(str(path), "malformed JSON array: expected ',' or ']'", line_at(min(pos, len(text))))


def _expect_end(path: Path, text: str, pos: int, line_at) -> None:
    if pos < len(text):
        raise InputError(str(path), "unexpected content after the JSON array", line_at(pos))

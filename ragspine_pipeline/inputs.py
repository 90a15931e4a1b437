"""What every reader does before a parser sees a byte.

One discipline for everything the project reads (JSON Lines, JSON and YAML files, gzip members, the
alert outbox, state and lock files), so that no input can crash the process, make it hang or make it
grow without bound:

* **Regular files only.** A FIFO, a device (``/dev/zero``), a directory, a socket or a symbolic-link
  loop is refused before it is read; opening never blocks (``O_NONBLOCK``) and a permission error is
  a one-line error, not a traceback.
* **Bounded size.** A line longer than :data:`MAX_LINE_BYTES` (JSON Lines) and a document larger than
  :data:`MAX_DOCUMENT_BYTES` (a whole JSON or YAML file) are rejected without reading them into one
  string; a line's rejection keeps its first bytes for the quarantine.
* **Bounded nesting.** A JSON value nested deeper than :data:`MAX_DEPTH` is rejected by a scan of its
  brackets (strings skipped) *before* any parser sees it: recursive parsers (Python's, pyarrow's)
  otherwise overflow their stack or, when inferring a schema, slow down with the cube of the depth.
* **Every parser failure is an** :class:`InputError`, including integers longer than Python converts
  (4,300 digits) and a recursion limit reached anyway.

The caps can be raised for one process with ``RAGSPINE_MAX_LINE_BYTES``, ``RAGSPINE_MAX_DOCUMENT_BYTES``
and ``RAGSPINE_MAX_DEPTH``; they cost a scan of the bytes that is far cheaper than parsing them.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from ragspine_pipeline.errors import InputError


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(name, f"expected a positive whole number, got {raw[:40]!r}") from None
    if value < 1:
        raise InputError(name, f"expected a positive whole number, got {value}")
    return value


MAX_LINE_BYTES = _env_int("RAGSPINE_MAX_LINE_BYTES", 8 << 20)
"""The longest JSON Lines record accepted, in bytes (8 MiB): far beyond any real trace or case."""

MAX_DOCUMENT_BYTES = _env_int("RAGSPINE_MAX_DOCUMENT_BYTES", 64 << 20)
"""The largest whole JSON or YAML document read at once (configs, baselines, locks, manifests)."""

MAX_DEPTH = _env_int("RAGSPINE_MAX_DEPTH", 64)
"""The deepest nesting of arrays and objects accepted in one JSON value (a trace needs about 5)."""

KEEP_BYTES = 64 << 10
"""How much of a rejected line is kept for the quarantine (the rest is counted, not stored)."""


# -- files -------------------------------------------------------------------------------------------


def open_regular(path: str | Path, what: str = "file") -> IO[bytes]:
    """Open ``path`` for binary reading if it is a regular file; otherwise one-line :class:`InputError`.

    Never blocks on a FIFO (opened non-blocking, then refused) and follows symbolic links only to a
    regular file (a loop is ELOOP, reported as such).
    """
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(name, _os_reason(exc, f"cannot read the {what}")) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(name, f"cannot read the {what}: not a regular file ({file_kind(mode)})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | Path, what: str = "file") -> Path:
    """``path`` as a Path after checking it can be opened as a regular file (opened and closed again)."""
    with open_regular(path, what):
        pass
    return Path(path)


def read_document(path: str | Path, what: str = "file", limit: int | None = None) -> bytes:
    """The whole content of a regular file no larger than ``limit`` bytes (default MAX_DOCUMENT_BYTES)."""
    limit = MAX_DOCUMENT_BYTES if limit is None else limit
    with open_regular(path, what) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(str(path), _os_reason(exc, f"cannot read the {what}")) from None
    if len(data) > limit:
        raise InputError(str(path), f"the {what} is larger than {limit:,} bytes; refusing to read it")
    return data


def read_text(path: str | Path, what: str = "file", limit: int | None = None) -> str:
    """:func:`read_document` decoded as strict UTF-8 (an optional BOM is not accepted either)."""
    data = read_document(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(str(path), f"not UTF-8 text: {exc.reason}", line) from None


def _os_reason(exc: OSError, doing: str) -> str:
    if exc.errno == errno.ENOENT:
        return "file not found"
    if exc.errno == errno.ELOOP:
        return f"{doing}: too many levels of symbolic links"
    return f"{doing}: {exc.strerror or exc}"


def file_kind(mode: int) -> str:
    """What a file is, by its ``st_mode``, for a message: "a directory", "a FIFO", "a file", …"""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a file"),
    ):
        if test(mode):
            return name
    return "not a file"


# -- lines -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One line of a JSON Lines stream: its 1-based number and bytes (without the newline).

    ``length`` is the line's full length; when it exceeds the cap, ``too_long`` is True and ``data``
    holds only its first :data:`KEEP_BYTES`.
    """

    number: int
    data: bytes
    length: int
    too_long: bool = False


def iter_lines(stream: IO[bytes], cap: int | None = None) -> Iterator[Line]:
    """The lines of a binary stream without ever holding more than ``cap`` bytes of one line.

    Works the same on files, gzip members and sockets; a final line without a newline is a line.
    """
    cap = MAX_LINE_BYTES if cap is None else cap
    number = 0
    while True:
        chunk = stream.readline(cap + 1)
        if not chunk:
            return
        number += 1
        if len(chunk) <= cap or chunk.endswith(b"\n"):
            yield Line(number, chunk.removesuffix(b"\n"), len(chunk) - chunk.endswith(b"\n"))
            continue
        kept, length = chunk[:KEEP_BYTES], len(chunk)
        while chunk and not chunk.endswith(b"\n"):  # skip the rest of the line in bounded pieces
            chunk = stream.readline(1 << 20)
            length += len(chunk)
        yield Line(number, kept, length - chunk.endswith(b"\n"), too_long=True)


def too_long_message(length: int) -> str:
    return f"line of {length:,} bytes is longer than the {MAX_LINE_BYTES:,}-byte limit"


# -- nesting -------------------------------------------------------------------------------------------

_ESCAPES = re.compile(rb"\\.", re.DOTALL)
_STRINGS = re.compile(rb'"[^"\n]*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = frozenset(b"[{")


def nesting_depth(data: bytes | str) -> int:
    """How deep arrays and objects nest in the JSON text ``data``; brackets inside strings don't count.

    When the text has no more opening brackets than :data:`MAX_DEPTH`, that count is returned (an
    upper bound, and all a caller needs: the text is within the cap). Otherwise the depth is exact for
    valid JSON and never below what a parser would recurse into for invalid JSON (the scan pairs
    quotes left to right, as a parser does).
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    opens = raw.count(b"[") + raw.count(b"{")
    if opens <= MAX_DEPTH:
        return opens
    bare = _STRINGS.sub(b"", _ESCAPES.sub(b"", raw) if b"\\" in raw else raw)
    brackets = bare.translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        if byte in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def load_json_file(path: str | Path, what: str = "file", **kwargs: Any) -> Any:
    """The JSON document in the regular file ``path``, read and parsed behind every cap."""
    return loads(read_text(path, what), str(path), **kwargs)


def too_deep_message(depth: int) -> str:
    return f"JSON nested {depth} levels deep; at most {MAX_DEPTH} are accepted"


def check_json_text(data: bytes | str, file: str, line: int | None = None) -> None:
    """Raise an InputError when ``data`` is too long for a line or nested too deeply."""
    length = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if line is not None and length > MAX_LINE_BYTES:
        raise InputError(file, too_long_message(length), line)
    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        raise InputError(file, too_deep_message(depth), line)


def loads(data: bytes | str, file: str, line: int | None = None, **kwargs: Any) -> Any:
    """``json.loads`` behind the caps: every way the text can fail is an InputError naming file and line.

    ``kwargs`` go to :func:`json.loads` (object hooks, ``parse_constant``); an exception an object
    hook raises on purpose (e.g. a duplicate key) is passed through for the caller to word.
    """
    check_json_text(data, file, line)
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise InputError(file, f"not UTF-8 text: {exc.reason}", line) from None
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        raise InputError(file, f"malformed JSON: {exc.msg} (column {exc.colno})", where) from None
    except RecursionError:
        raise InputError(file, "JSON nested too deeply to parse", line) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        if "integer string conversion" in str(exc) or "digits" in str(exc):
            raise InputError(file, "a number has too many digits (at most 4,300)", line) from None
        raise


class BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that refuses aliases (no alias bombs) and nesting beyond :data:`MAX_DEPTH`."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, file: str, loader: type[BoundedLoader] = BoundedLoader) -> Any:
    """One YAML document read with ``loader``; every failure is one InputError line naming the file
    and, when the YAML is at fault, the line. An error class with ``plain = True`` is shown as is,
    other YAML errors as "malformed YAML: ..."."""
    try:
        return yaml.load(text, Loader=loader)  # a SafeLoader subclass: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        problem = getattr(exc, "problem", None) or exc
        prefix = "" if getattr(exc, "plain", False) else "malformed YAML: "
        raise InputError(file, f"{prefix}{problem}", line) from None
    except RecursionError:
        raise InputError(file, "malformed YAML: nested too deeply to parse") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(file, f"malformed YAML: {' '.join(str(exc).split())[:120]}") from None


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A YAML mapping names the same key twice (raised by :class:`StrictLoader`)."""

    plain = True  # the message says it all: no "malformed YAML" prefix


class StrictLoader(BoundedLoader):
    """A bounded ``yaml.SafeLoader`` (no aliases, capped nesting) that also refuses a key repeated in
    one mapping, at any depth, naming its line (PyYAML would keep the last value silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first is not None:
                raise DuplicateKeyError(
                    None, None, f"duplicate key '{key}' (first on line {first})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

"""The sampler's fast path: a block of trace lines read and checked as columns by DuckDB.

A day holds millions of lines; validating each with ``json.loads`` and the pydantic ``Trace`` model
costs several times the decompression. Here every line of a block is read by DuckDB into the structure
the ``Trace`` model derives and tested against the model's field types (``contracts.shape``), one
verdict per line. The record reader (``trace_lines.parse_line``) stays the authority: a line this path
cannot vouch for is handed back as a *leftover*, and the record reader judges it exactly as if the
fast path did not exist. A leftover costs time, never correctness.

A line is vouched for only when, stripped of ASCII whitespace, it starts with ``{`` and ends with
``}``; it is no longer than the line cap; it is UTF-8; DuckDB reads it as one object without a
repeated key; nothing in it may read as a number that is not finite (``NaN``, ``Infinity``,
``1e999``, which the sampler's JSON refuses anywhere: the test is on the bytes), and no comma may come
before a closing bracket (DuckDB reads ``{"a": 1, }``; JSON does not); it cannot nest too
deep or hold an over-long number (``line_guards.suspect_lines``); every field conforms; and it names a
request id that is not blank.

Two ways to test the fields, the first tried first:

* the loader's typed fast read (``contracts.fast``) over the block's lines that pass the byte tests and
  parse as JSON: it vouches for all of them at once, or for none (a value of another type, a repeated
  key), and is cheap to plan;
* one SQL verdict per line, from a predicate the model derives (``shape.conforms``): what a block the
  typed read cannot vouch for falls back to, so that one bad line costs its block time, not the other
  lines their verdict.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import duck, inputs, line_guards
from ragspine_pipeline.contracts import fast, shape
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, UNICODE_WHITESPACE, Trace
from ragspine_pipeline.sources.trace_store import RawBlock, RawLine, block_lines, raw_line

__all__ = ["BlockReader", "BlockTraces"]

_OPEN, _CLOSE, _NEWLINE = ord("{"), ord("}"), ord("\n")
_BATCH_LINES = 2048
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[list(b" \t\n\r\x0b\x0c")] = True


@dataclass
class BlockTraces:
    """What a block holds: the traces vouched for as columns, and the lines left to the record reader.

    ``lines[i]`` (the stripped line) is a valid trace with request id ``request_ids[i]`` and, when
    stratifying, tag value ``strata[i]`` (null: the trace has no such tag). ``leftovers`` are in line
    order.
    """

    source: str
    lines: Sequence[bytes] = ()
    request_ids: list[str] = field(default_factory=list)
    strata: pa.Array | None = None
    leftovers: list[RawLine] = field(default_factory=list)


class _Spans(Sequence):
    """The lines of a block as slices of its bytes, made only when asked for (a few per block)."""

    def __init__(self, data: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self.data, self.starts, self.ends = data, starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):  # type: ignore[override]
        return self.data[self.starts[i] : self.ends[i]]


_KEYS = "SELECT DISTINCT unnest(try(json_keys(try(decode(line))))) AS key FROM lines"
"""The top-level keys the lines of a block use (a line that does not parse has none)."""
_INPUT_NAMES = frozenset(shape.structure(Trace))


_BLANK = "^[" + "".join(f"\\x{{{ord(c):x}}}" for c in UNICODE_WHITESPACE) + "]*$"
"""A request id of whitespace only (Unicode's), as a regular expression DuckDB and Arrow both read."""
_PARSES = "SELECT coalesce(json_valid(try(decode(line))), false) AS parses FROM lines"
"""Per line: DuckDB parses it as JSON (one line that does not would make it refuse the whole block)."""


def _verdicts_sql(dimension: str | None, given: frozenset[str]) -> str:
    """Per line of ``lines``: whether it is a trace the fast path vouches for, its request id and its
    stratifying tag. ``given``: the trace fields the block's lines use (the others need no test)."""
    structure = shape.flat_structure(Trace, given)
    ids = ", ".join(f'"{alias}"' for alias in TRACE_QID_ALIASES if alias in given) or "NULL::JSON"
    path = duck.literal(f"$.{_key(dimension or '')}")
    stratum = "NULL" if dimension is None or "tags" not in given else f"json_extract_string(tags, {path})"
    others = ", ".join(duck.literal(name) for name in sorted(_INPUT_NAMES - given))
    # A line is one object (it starts with "{" and ends with "}", and parses), with no key given twice,
    # and uses no trace field but those the test was made for (a line that does is the record reader's).
    return f"""
    WITH text AS (
        SELECT try(decode(line)) AS line FROM lines
    ), read AS (
        SELECT
            try(from_json(line, {duck.literal(structure)})) AS trace,
            [len(k) = len(list_distinct(k)) AND NOT list_has_any(k, [{others}]::VARCHAR[])
                FOR k IN [try(json_keys(line))]][1] AS known_keys
        FROM text
    ), traces AS (
        SELECT
            trace IS NOT NULL AND known_keys
                AND ({shape.conforms(Trace, flat=True, given=given)}) AS conforms,
            coalesce({ids}) ->> '$' AS request_id,
            {stratum} AS stratum
        FROM (SELECT unnest(trace), known_keys, trace FROM read)
    )
    SELECT
        coalesce(conforms AND NOT regexp_matches(request_id, {duck.literal(_BLANK)}), false) AS vouched,
        request_id,
        stratum
    FROM traces
    """


def _key(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class BlockReader:
    """Reads the blocks of one day, stratifying by the tag ``dimension`` (None: not stratifying)."""

    def __init__(self, dimension: str | None) -> None:
        self.dimension = dimension
        self._sql: str | None = None
        self._seen: dict | None = None
        self._pool = ThreadPoolExecutor(max_workers=1)

    def read(self, block: RawBlock) -> BlockTraces:
        if block.oversize:  # one line beyond the line cap: only the record reader names it
            return BlockTraces(block.source, leftovers=list(block_lines(block)))
        data = block.data
        buf = np.frombuffer(data, dtype=np.uint8)
        breaks = np.flatnonzero(buf == _NEWLINE)
        line_starts, line_ends = np.concatenate(([0], breaks + 1)), np.concatenate((breaks, [len(buf)]))
        starts, ends = _stripped(buf, line_starts, line_ends)
        present = np.flatnonzero(ends > starts)  # blank lines are not lines
        line_no = block.first_line + present
        within_cap = (line_ends - line_starts)[present] <= inputs.MAX_LINE_BYTES
        starts, ends = starts[present], ends[present]
        if not len(starts):
            return BlockTraces(
                block.source, strata=None if self.dimension is None else pa.array([], pa.string())
            )
        vouched = (buf[starts] == _OPEN) & (buf[ends - 1] == _CLOSE) & within_cap
        # Every line in place, as the block's bytes from its start to the next line's (what lies between
        # is whitespace, which JSON ignores): no copy of the block.
        offsets = np.append(starts, len(buf)).astype(np.int32)
        lines = pa.BinaryArray.from_buffers(
            pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        # The byte scans run beside DuckDB's reading (neither holds the GIL for long).
        scanned = self._pool.submit(lambda: ~line_guards.suspect_lines(data)[present] & _read_alike(lines))
        tried = vouched.copy()
        verdicts = self._typed_verdicts(data, starts, ends, tried)
        vouched &= scanned.result()
        if verdicts is None:
            # The lines as a table for DuckDB's per-line statements, in batches so that it reads them
            # on every core: only a block the typed read refused needs them.
            table = pa.Table.from_batches(
                [
                    pa.record_batch([lines.slice(i, _BATCH_LINES)], ["line"])
                    for i in range(0, len(lines), _BATCH_LINES)
                ]
            )
            # A line that is not JSON makes DuckDB refuse the block: read it again without such lines.
            try:
                parses = np.asarray(duck.column(_PARSES, lines=table), dtype=bool)
            except duck.REFUSED:
                parses = np.zeros(len(starts), dtype=bool)
            if (tried & ~(vouched & parses)).any():  # only if it leaves a line out
                verdicts = self._typed_verdicts(data, starts, ends, vouched & parses)
            if verdicts is None:
                try:
                    verdicts = self._verdicts(table)
                except duck.REFUSED:  # every line's test is guarded (try): a refusal leaves the block whole
                    verdicts = _none_vouched(len(starts))
        vouched &= np.asarray(verdicts.column("vouched"), dtype=bool)
        kept = pa.array(vouched)
        strata = None if self.dimension is None else verdicts.column("stratum").filter(kept).combine_chunks()
        leftovers = [
            raw_line(block.source, int(line_no[i]), _raw_line(data, i, starts, ends))
            for i in np.flatnonzero(~vouched).tolist()
        ]
        keep = np.flatnonzero(vouched)
        request_ids = verdicts.column("request_id").filter(kept).to_pylist()
        return BlockTraces(
            block.source, _Spans(data, starts[keep], ends[keep]), request_ids, strata, leftovers
        )

    def _typed_verdicts(
        self, data: bytes, starts: np.ndarray, ends: np.ndarray, candidates: np.ndarray
    ) -> pa.Table | None:
        """The verdicts of the typed fast read over the ``candidates`` lines (the others are not
        vouched), or None when it cannot vouch for all of them."""
        rows = np.flatnonzero(candidates)
        if not len(rows):
            return _none_vouched(len(starts))
        # The block as it is, each other line blanked out as an empty object, so that the read's rows
        # are the block's lines (DuckDB skips a line of whitespace, as this module does).
        base = int(starts[0])
        text: bytes | bytearray = data[base : int(ends[-1])]
        if len(rows) < len(starts):
            text = bytearray(text)
            for i in np.flatnonzero(~candidates)[::-1].tolist():  # from the last: offsets stay put
                text[int(starts[i]) - base : int(ends[i]) - base] = b"{}"
        try:  # DuckDB reads JSON Lines from a file: the block is one, in the temporary folder
            with tempfile.NamedTemporaryFile(prefix="ragspine-block-", suffix=".jsonl") as fh:
                fh.write(text)
                fh.flush()
                path = Path(fh.name)
                if self._seen is None:  # the day's dialect, from the first block the typed read tries
                    self._seen = fast.sniff(path)
                typed = None if self._seen is None else fast.read_typed(path, Trace, seen=self._seen)
        except OSError:  # no room there: the per-line statement needs none
            return None
        n = len(starts)
        if typed is None or typed.num_rows != n:
            return None
        ids = [typed.column(alias) for alias in TRACE_QID_ALIASES if alias in typed.column_names]
        request_id = pc.coalesce(*ids) if ids else pa.nulls(n, pa.string())
        named = pc.invert(pc.fill_null(pc.match_substring_regex(request_id, _BLANK), True))
        if self.dimension is not None and "tags" in typed.column_names:
            stratum = pc.map_lookup(typed.column("tags"), self.dimension, "first")
        else:
            stratum = pa.nulls(n, pa.string())
        vouched = candidates & np.asarray(named, dtype=bool)  # a blanked line has no id
        return pa.table({"vouched": vouched, "request_id": request_id, "stratum": stratum})

    def _verdicts(self, lines: pa.Table) -> pa.Table:
        # The test is made for the trace fields the first block uses (a day's lines share them); a line
        # of a later block that uses another is left to the record reader.
        if self._sql is None:
            given = _INPUT_NAMES & frozenset(duck.column(_KEYS, lines=lines).drop_null().to_pylist())
            self._sql = _verdicts_sql(self.dimension, given or frozenset({"request_id"}))
        return duck.query(self._sql, lines=lines)


def _none_vouched(n: int) -> pa.Table:
    """Verdicts that leave all ``n`` lines to the record reader."""
    return pa.table(
        {
            "vouched": np.zeros(n, dtype=bool),
            "request_id": pa.nulls(n, pa.string()),
            "stratum": pa.nulls(n, pa.string()),
        }
    )


def _stripped(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each line's bounds without its leading and trailing ASCII whitespace (most lines have none: the
    few that do are trimmed one by one)."""
    starts, ends = starts.copy(), ends.copy()
    present = ends > starts
    padded = present & (_ASCII_SPACE[buf[np.minimum(starts, len(buf) - 1)]] | _ASCII_SPACE[buf[ends - 1]])
    for i in np.flatnonzero(padded).tolist():
        while starts[i] < ends[i] and _ASCII_SPACE[buf[starts[i]]]:
            starts[i] += 1
        while ends[i] > starts[i] and _ASCII_SPACE[buf[ends[i] - 1]]:
            ends[i] -= 1
    return starts, ends


# What json.loads reads as a number that is not finite, where a value may start (after ":", "," or "["):
# the constants, and a number past a double (an exponent of three digits or more, or 309 digits and
# more); or a comma before a closing bracket, which json.loads refuses and DuckDB takes. Matched on the
# bytes, strings included: a false alarm sends the line to the record reader, which quarantines only
# what it reads as such. RE2 (Arrow's): linear, per line, outside the GIL.
_NOT_FINITE = r"[:,\[][ \t\r]*-?(?:NaN|Infinity|[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]{3}|[0-9]{309})"
_READ_OTHERWISE = f"{_NOT_FINITE}|{line_guards.TRAILING_COMMA}"


def _read_alike(lines: pa.Array) -> np.ndarray:
    """Per line: nothing in it that json.loads reads otherwise than DuckDB (:data:`_READ_OTHERWISE`)."""
    return ~np.asarray(pc.match_substring_regex(lines, _READ_OTHERWISE), dtype=bool)


def _raw_line(data: bytes, i: int, starts: np.ndarray, ends: np.ndarray) -> bytes:
    """A leftover's line as read: the stripped span widened back to its whole line."""
    begin = data.rfind(b"\n", 0, int(starts[i])) + 1
    end = data.find(b"\n", int(ends[i]))
    return data[begin : len(data) if end < 0 else end]

"""The sampler's fast path: a block of trace lines parsed and checked as columns.

A day holds millions of lines; parsing and validating each with ``json.loads`` and the pydantic
``Trace`` model costs several times the decompression. Here a block of lines is parsed by pyarrow's JSON
reader and its columns are checked against the same model by ``contracts.conformance``. The record
reader (``trace_lines.parse_line``) stays the authority: a line this path cannot vouch for is handed
back as a *leftover*, and the record reader judges it exactly as if the fast path did not exist. A
leftover costs time, never correctness; when a block fails, its halves are tried again so that one bad
line sends only a few dozen neighbours to the record reader, not the whole block.

A line is read here only when, after stripping ASCII whitespace, it starts with ``{`` and ends with
``}``, and only when the parsed lines give exactly one row each (pyarrow would read ``{..}{..}`` on one
line as two rows) with no NaN or infinity anywhere (pyarrow reads ``NaN`` and ``Infinity``; JSON does
not). Of a parsed block, rows with no request id (or a blank one) are leftovers too: the record reader
names the reason. The common case — every line a plain ``{…}`` — is checked on the raw bytes with numpy
and the block is parsed as it came, without splitting it into Python lines.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.canonical import aliased_column
from ragspine_pipeline.contracts.columns import all_finite, as_strings, explicit_schema
from ragspine_pipeline.contracts.conformance import table_conforms
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Trace
from ragspine_pipeline.sources.trace_store import RawBlock, RawLine, block_lines, line_text, raw_line

__all__ = ["BlockReader", "BlockTraces"]

# Below this many lines a failing group goes to the record reader whole: halving further costs more
# parses than the record reader spends on the lines.
_SMALLEST_GROUP = 32
_OPEN, _CLOSE, _NEWLINE = ord("{"), ord("}"), ord("\n")


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


@dataclass
class _Collected:
    """What the line-by-line path gathers from one block."""

    source: str
    lines: list[bytes] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    strata: list[pa.Array] = field(default_factory=list)
    leftovers: list[RawLine] = field(default_factory=list)


class _Spans(Sequence):
    """The lines of a block as slices of its bytes, made only when asked for (a few per block)."""

    def __init__(self, data: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self.data, self.starts, self.ends = data, starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):  # type: ignore[override]
        return self.data[self.starts[i] : self.ends[i]]


class BlockReader:
    """Reads blocks of one day; remembers the last schema that conformed so that the next block is
    parsed against it (ISO-looking strings stay strings, and the parser skips most type inference)."""

    def __init__(self, dimension: str | None) -> None:
        self.dimension = dimension
        self._schema: pa.Schema | None = None

    def read(self, block: RawBlock) -> BlockTraces:
        if block.oversize:  # one line beyond the line cap: only the record reader names it
            return BlockTraces(block.source, leftovers=list(block_lines(block)))
        return self._read_plain(block) or self._read_lines(block)

    def _read_plain(self, block: RawBlock) -> BlockTraces | None:
        """The whole block as one table when every non-empty line is a bare ``{…}``; else None."""
        data = block.data
        buf = np.frombuffer(data, dtype=np.uint8)
        breaks = np.flatnonzero(buf == _NEWLINE)
        starts = np.concatenate(([0], breaks + 1))
        ends = np.concatenate((breaks, [len(buf)]))
        present = np.flatnonzero(ends > starts)
        starts, ends = starts[present], ends[present]
        if not len(starts) or not (np.all(buf[starts] == _OPEN) and np.all(buf[ends - 1] == _CLOSE)):
            return None
        if not inputs.arrow_safe(data):
            return None  # a line too long or possibly too deep for the parser: line by line
        table = self._conforming_table(data, len(starts))
        if table is None:
            return None
        request_ids, keep, strata = self._usable_rows(table)
        leftovers = []
        if not all(keep):
            leftovers = [
                RawLine(
                    block.source, block.first_line + int(present[i]), line_text(data[starts[i] : ends[i]])
                )
                for i, usable in enumerate(keep)
                if not usable
            ]
            request_ids = [rid for rid, usable in zip(request_ids, keep, strict=True) if usable]
            starts, ends = starts[keep], ends[keep]
        return BlockTraces(block.source, _Spans(data, starts, ends), request_ids, strata, leftovers)

    def _read_lines(self, block: RawBlock) -> BlockTraces:
        """Line by line: bare ``{…}`` lines are parsed in groups (halved on failure), the rest left over."""
        out = _Collected(block.source)
        candidates: list[tuple[int, bytes, bytes]] = []  # (line number, stripped line, line as read)
        for offset, raw in enumerate(block.data.split(b"\n")):
            line = raw.strip()
            if not line:
                continue
            line_no = block.first_line + offset
            if line[:1] == b"{" and line[-1:] == b"}" and inputs.arrow_safe_line(line):
                candidates.append((line_no, line, raw))
            else:
                out.leftovers.append(raw_line(block.source, line_no, raw))
        self._vouch(candidates, out)
        out.leftovers.sort(key=lambda line: line.line_no)
        strata = None
        if self.dimension is not None:
            strata = pa.concat_arrays(out.strata) if out.strata else pa.array([], pa.string())
        return BlockTraces(block.source, out.lines, out.request_ids, strata, out.leftovers)

    def _vouch(self, group: list[tuple[int, bytes, bytes]], out: _Collected) -> None:
        # A method, not a closure calling itself: such a closure is a reference cycle that keeps every
        # block's lines alive until the cyclic collector happens to run (memory grew with the day).
        if not group:
            return
        table = self._conforming_table(b"\n".join(line for _, line, _ in group), len(group))
        if table is None:
            if len(group) <= _SMALLEST_GROUP:
                out.leftovers.extend(RawLine(out.source, no, line_text(raw)) for no, _, raw in group)
                return
            self._vouch(group[: len(group) // 2], out)
            self._vouch(group[len(group) // 2 :], out)
            return
        ids, keep, strata = self._usable_rows(table)
        for (line_no, line, raw), rid, usable in zip(group, ids, keep, strict=True):
            if usable:
                out.lines.append(line)
                out.request_ids.append(rid)
            else:
                out.leftovers.append(RawLine(out.source, line_no, line_text(raw)))
        if strata is not None:
            out.strata.append(strata)

    def _conforming_table(self, data: bytes, rows: int) -> pa.Table | None:
        """The lines as a table whose every known column validates as ``Trace``; None if not sure."""
        attempts = [self._schema, None] if self._schema is not None else [None]
        for schema in attempts:
            table = _parse(data, schema)
            if table is not None and as_strings(table.schema) != table.schema:
                # pyarrow read ISO-looking strings as timestamps; the contract wants the text.
                table = _parse(data, as_strings(table.schema))
            if table is None or table.num_rows != rows or not all_finite(table):
                continue
            if table_conforms(table, Trace):
                self._schema = table.schema
                return table
        return None

    def _usable_rows(self, table: pa.Table) -> tuple[list[str | None], list[bool], pa.Array | None]:
        """Each row's request id; whether it is usable (a missing or blank id is the record reader's to
        name); and the stratifying tag of the usable rows (None when not stratifying)."""
        ids = aliased_column(table, TRACE_QID_ALIASES, pa.string()).to_pylist()
        keep = [rid is not None and bool(rid.strip()) for rid in ids]
        strata = self._strata(table)
        if strata is not None and not all(keep):
            strata = strata.filter(pa.array(keep))
        return ids, keep, strata

    def _strata(self, table: pa.Table) -> pa.Array | None:
        """The stratifying tag of each row (string, null where absent); None when not stratifying."""
        if self.dimension is None:
            return None
        tags = table.column("tags").combine_chunks() if "tags" in table.column_names else None
        if tags is None or not pa.types.is_struct(tags.type) or tags.type.get_field_index(self.dimension) < 0:
            return pa.nulls(table.num_rows, pa.string())
        # struct_field honours the parent's nulls (a trace whose tags are null has no stratum value).
        return pc.struct_field(tags, self.dimension).cast(pa.string())


def _parse(data: bytes, schema: pa.Schema | None) -> pa.Table | None:
    options = None if schema is None else explicit_schema(schema)
    try:
        table = pj.read_json(
            io.BytesIO(data), read_options=pj.ReadOptions(block_size=1 << 20), parse_options=options
        )
        if not inputs.arrow_schema_usable(table.schema):
            return (
                None  # a line nests beyond the cap or has a key that is not UTF-8: the record reader names it
            )
        table.validate(full=True)  # e.g. invalid UTF-8 in a value, which the parser lets through
    except pa.ArrowInvalid:
        return None
    return table

"""The sampler's fast path: a block of trace lines parsed and checked as columns.

A day holds millions of lines; parsing and validating each with ``json.loads`` and the pydantic
``Trace`` model costs several times the decompression. Here a block of lines is parsed by pyarrow's JSON
reader and its columns are checked against the same model by ``contracts.conformance``. The record
reader (``sampling._parse``) stays the authority: a line this path cannot vouch for is handed back as a
*leftover*, and the record reader judges it exactly as if the fast path did not exist. A leftover costs
time, never correctness; when a block fails, its halves are tried again so that one bad line sends
only a few dozen neighbours to the record reader, not the whole block.

A line is read here only when, after stripping ASCII whitespace, it starts with ``{`` and ends with ``}``
and holds no ``NaN`` / ``Infinity`` (pyarrow reads them; JSON does not), and only when the parsed block
has exactly one row per such line (pyarrow would read ``{..}{..}`` on one line as two rows). Of a parsed
block, rows with no request id (or a blank one) are leftovers too: the record reader names the reason.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ragspine_pipeline.contracts.canonical import aliased_column
from ragspine_pipeline.contracts.columns import as_strings, explicit_schema
from ragspine_pipeline.contracts.conformance import table_conforms
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Trace
from ragspine_pipeline.sources.trace_store import RawBlock, RawLine, line_text

__all__ = ["BlockReader", "BlockTraces"]

# Below this many lines a failing group goes to the record reader whole: halving further costs more
# parses than the record reader spends on the lines.
_SMALLEST_GROUP = 32
_NOT_JSON_NUMBERS = (b"NaN", b"Infinity")


@dataclass
class BlockTraces:
    """What a block holds: the traces vouched for as columns, and the lines left to the record reader.

    ``lines[i]`` (stripped bytes, on line ``line_nos[i]``) is a valid trace with request id
    ``request_ids[i]`` and, when stratifying, tag value ``strata[i]`` (None: the tag is absent).
    ``leftovers`` are in line order.
    """

    source: str
    line_nos: list[int] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    strata: list[str | None] = field(default_factory=list)
    leftovers: list[RawLine] = field(default_factory=list)


class BlockReader:
    """Reads blocks of one day; remembers the last schema that conformed so that the next block is
    parsed against it (ISO-looking strings stay strings, and the parser skips most type inference)."""

    def __init__(self, dimension: str | None) -> None:
        self.dimension = dimension
        self._schema: pa.Schema | None = None

    def read(self, block: RawBlock) -> BlockTraces:
        out = BlockTraces(block.source)
        suspect = any(token in block.data for token in _NOT_JSON_NUMBERS)
        candidates: list[tuple[int, bytes, bytes]] = []  # (line number, stripped line, line as read)
        for offset, raw in enumerate(block.data.split(b"\n")):
            line = raw.strip()
            if not line:
                continue
            line_no = block.first_line + offset
            if line[:1] == b"{" and line[-1:] == b"}" and not (suspect and _has_non_json_number(line)):
                candidates.append((line_no, line, raw))
            else:
                out.leftovers.append(RawLine(block.source, line_no, line_text(raw)))
        self._vouch(candidates, out)
        out.leftovers.sort(key=lambda line: line.line_no)
        return out

    def _vouch(self, group: list[tuple[int, bytes, bytes]], out: BlockTraces) -> None:
        if not group:
            return
        table = self._conforming_table(b"\n".join(line for _, line, _ in group), len(group))
        if table is None:
            if len(group) <= _SMALLEST_GROUP:
                out.leftovers.extend(RawLine(out.source, no, line_text(raw)) for no, _, raw in group)
                return
            half = len(group) // 2
            self._vouch(group[:half], out)
            self._vouch(group[half:], out)
            return
        request_ids = aliased_column(table, TRACE_QID_ALIASES, pa.string()).to_pylist()
        strata = self._strata(table)
        for i, (line_no, line, raw) in enumerate(group):
            request_id = request_ids[i]
            if request_id is None or not request_id.strip():
                out.leftovers.append(RawLine(out.source, line_no, line_text(raw)))
                continue
            out.line_nos.append(line_no)
            out.lines.append(line)
            out.request_ids.append(request_id)
            if strata is not None:
                out.strata.append(strata[i])

    def _conforming_table(self, data: bytes, rows: int) -> pa.Table | None:
        """The lines as a table whose every known column validates as ``Trace``; None if not sure."""
        attempts = [self._schema, None] if self._schema is not None else [None]
        for schema in attempts:
            table = _parse(data, schema)
            if table is not None and as_strings(table.schema) != table.schema:
                # pyarrow read ISO-looking strings as timestamps; the contract wants the text.
                table = _parse(data, as_strings(table.schema))
            if table is None or table.num_rows != rows:
                continue
            if table_conforms(table, Trace):
                self._schema = table.schema
                return table
        return None

    def _strata(self, table: pa.Table) -> list[str | None] | None:
        if self.dimension is None:
            return None
        tags = table.column("tags").combine_chunks() if "tags" in table.column_names else None
        if tags is None or not pa.types.is_struct(tags.type) or tags.type.get_field_index(self.dimension) < 0:
            return [None] * table.num_rows
        # struct_field honours the parent's nulls (a trace whose tags are null has no stratum value).
        return pc.struct_field(tags, self.dimension).cast(pa.string()).to_pylist()


def _has_non_json_number(line: bytes) -> bool:
    return any(token in line for token in _NOT_JSON_NUMBERS)


def _parse(data: bytes, schema: pa.Schema | None) -> pa.Table | None:
    options = None if schema is None else explicit_schema(schema)
    try:
        table = pj.read_json(
            io.BytesIO(data), read_options=pj.ReadOptions(block_size=1 << 20), parse_options=options
        )
        table.validate(full=True)  # e.g. invalid UTF-8, which the parser lets through
    except pa.ArrowInvalid:
        return None
    return table

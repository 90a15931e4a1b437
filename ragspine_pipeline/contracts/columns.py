"""One loader from any gold, trace or evidence dialect to canonical Arrow columns, ready for scoring.

Two readers produce the columns, through the same canonical statement (``contracts.canonical``):

* the **columnar reader**: the typed fast read (``contracts.fast``): DuckDB reads the columns the
  file's dialect has, each value's JSON type is checked against the model's field and converted to its
  type, column by column, and the canonical statement maps the typed columns;
* the **record reader** (``contracts.records``): the pydantic models validate the file record by record.

The columnar reader is tried first. Whenever it cannot vouch for a file — a JSON array, a line DuckDB
does not parse as the contract's JSON (a repeated key, a lone surrogate, invalid UTF-8), a value whose
type the model may read otherwise, a rule only the model states — the record reader runs instead: it is
the authority, and it either loads the file or raises an :class:`InputError` naming the file, line, id
and field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from ragspine_pipeline import duck, line_guards
from ragspine_pipeline.contracts import canonical, fast, shape
from ragspine_pipeline.contracts.evidence import EvidenceChunk
from ragspine_pipeline.contracts.gold import GoldCase
from ragspine_pipeline.contracts.jsonl import check_readable, first_char, read_errors
from ragspine_pipeline.contracts.records import plain_records
from ragspine_pipeline.contracts.schemas import EVIDENCE_SCHEMA, GOLD_SCHEMA, TRACE_SCHEMA
from ragspine_pipeline.contracts.spans import SpanSettings, span_format, typed_traces
from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.errors import InputError

__all__ = [
    "EVIDENCE_SCHEMA",
    "GOLD_SCHEMA",
    "TRACE_SCHEMA",
    "Loaded",
    "load_evidence",
    "load_gold",
    "load_traces",
]


@dataclass(frozen=True)
class Loaded:
    """Canonical columns of one input file and how they were read."""

    path: str
    table: pa.Table
    reader: str  # "columnar" or "record"; spans: "otlp" or "span_table"
    notes: tuple[str, ...] = ()  # what the run's warnings say of the file (traces of spans left out)


@dataclass(frozen=True)
class _Kind:
    """How one record type is read: its model, canonical statement and columns, and what the columnar
    reader leaves to the record reader."""

    name: str
    model: type[BaseModel]
    sql: Callable[..., str]  # (source relation, extra columns) -> the canonical statement
    schema: pa.Schema
    unique: str | None = None  # a canonical column whose values may not repeat
    unusable: str = ""  # the message for a row the canonical statement finds unusable
    record_only: tuple[str, ...] = ()  # fields whose rules only the model states (the record reader's)
    derived: tuple[str, ...] = ()  # required fields the canonical statement may derive


_GOLD = _Kind(
    "gold",
    GoldCase,
    canonical.gold_sql,
    GOLD_SCHEMA,
    unique="qid",
    # What a QA-gate case must state of its expectations (``gold.NEEDS``): only the model says it.
    record_only=("case_type", "expected"),
    derived=("answerable",),
)
_TRACE = _Kind(
    "trace",
    Trace,
    canonical.trace_sql,
    TRACE_SCHEMA,
    unusable="missing: a trace needs a qid (or a question to join on)",
)
_EVIDENCE = _Kind("evidence", EvidenceChunk, canonical.evidence_sql, EVIDENCE_SCHEMA, unique="chunk_id")


# -- public entry points ---------------------------------------------------------------------------


def load_gold(path: str | Path) -> Loaded:
    """Load a golden set in any of its dialects (``contracts.gold``) into :data:`GOLD_SCHEMA` columns.

    Raises InputError for a malformed line, a wrong type, a missing required field, a duplicate id or an
    empty set, naming file, line, id and field.
    """
    loaded = _load(path, _GOLD)
    if loaded.table.num_rows == 0:
        raise InputError(str(path), "the golden set has no cases")
    return loaded


def load_traces(path: str | Path, spans: SpanSettings | None = None) -> Loaded:
    """Load traces in any of their dialects (``contracts.trace``) into :data:`TRACE_SCHEMA` columns (file
    order kept).

    A file of OpenTelemetry spans (OTLP/JSON, or the flat span table: ``contracts.spans``) is grouped
    into one trace per trace id first, as ``spans`` says (default settings without it), ordered by the
    root span's start; a trace of spans that is not one (no root span, no answer) is left out and named
    in ``notes``."""
    form = span_format(check_readable(path))
    if form is None:
        return _load(path, _TRACE)
    # The spans' traces are typed by the statement that groups them: the canonical statement reads them
    # as it reads the fast read's columns.
    typed, unusable = typed_traces(path, spans or SpanSettings(), form)
    table = duck.query(_TRACE.sql(_source(typed.schema, Trace, "typed")), typed=typed)
    notes = (unusable_note(unusable),) if unusable else ()
    return Loaded(str(path), _canonical(table, _TRACE), form, notes)


def unusable_note(unusable: list[tuple[str, str]]) -> str:
    """One warning for the traces of spans that are not traces: how many, and the first few with why."""
    shown = "; ".join(f"trace {trace_id}: {why}" for trace_id, why in unusable[:3])
    more = f"; and {len(unusable) - 3} more" if len(unusable) > 3 else ""
    return f"{len(unusable)} trace(s) of the spans left out, not a trace: {shown}{more}"


def load_evidence(path: str | Path) -> Loaded:
    """Load an evidence registry into :data:`EVIDENCE_SCHEMA` columns; chunk ids are unique."""
    return _load(path, _EVIDENCE)


def _load(path: str | Path, kind: _Kind) -> Loaded:
    p = check_readable(path)
    head = first_char(p)
    if head == "":
        return Loaded(str(p), kind.schema.empty_table(), "columnar")
    table = None if head == "[" else _columnar(p, kind)
    if table is not None:
        return Loaded(str(p), table, "columnar")
    return Loaded(str(p), _by_records(p, kind), "record")


# -- the columnar reader ---------------------------------------------------------------------------


def _columnar(path: Path, kind: _Kind) -> pa.Table | None:
    """The file's canonical columns from the typed fast read, or None when only the record reader may
    read it. The canonical statement reads the typed batches as the fast read streams them."""

    def canonical_of(typed: pa.RecordBatchReader) -> pa.Table:
        return duck.query(kind.sql(_source(typed.schema, kind.model, "typed")), typed=typed)

    # The guard reads the file beside DuckDB (both run outside the GIL for the most part): a line too
    # long, nested or numbered beyond the caps, in any field (those the fast read skips included), is
    # the record reader's to name.
    with read_errors(path), ThreadPoolExecutor(max_workers=1) as pool:  # EIO: one line, as everywhere
        plain = pool.submit(line_guards.plain_json_lines, path)
        table = fast.read_typed(path, kind.model, kind.record_only, kind.derived, canonical_of)
        if not plain.result() or table is None:
            return None
    usable = pc.all(pc.fill_null(table.column("_usable"), False)).as_py()
    if not usable or (kind.unique and not _all_distinct(table.column(kind.unique))):
        return None  # the record reader names the line (a duplicate: both lines)
    return _canonical(table, kind)


def _source(schema: pa.Schema, model: type[BaseModel], name: str) -> str:
    """SQL: the relation ``name`` (of ``schema``) with the typed columns it lacks added as nulls."""
    absent = [
        f'NULL::{shape.duck_type(type_)} AS "{key}"'
        for key, type_ in shape.typed_structure(model).items()
        if key not in schema.names
    ]
    return f"(SELECT {', '.join(['*', *absent])} FROM {name})"


def _canonical(table: pa.Table, kind: _Kind) -> pa.Table:
    return table.select(kind.schema.names).cast(kind.schema)


def _all_distinct(values: pa.ChunkedArray) -> bool:
    return pc.count_distinct(values).as_py() == len(values)


# -- the record reader -----------------------------------------------------------------------------


def _by_records(path: Path, kind: _Kind) -> pa.Table:
    """The canonical columns of the records the model validated (the first invalid one raises)."""
    lines, texts = plain_records(path, kind.name)
    if not texts:
        return kind.schema.empty_table()
    structure = duck.literal(json.dumps(shape.typed_structure(kind.model)))
    source = f"(SELECT unnest(from_json(record, {structure})) FROM records)"
    table = duck.query(kind.sql(source), records=pa.table({"record": pa.array(texts, pa.string())}))
    usable = table.column("_usable").to_pylist()
    if not all(usable):
        raise InputError(str(path), kind.unusable, lines[usable.index(False)], None, "qid")
    return _canonical(table, kind)

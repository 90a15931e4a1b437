"""One loader from any gold or trace dialect to canonical Arrow columns, ready for vectorised scoring.

Two readers produce the same columns:

* the **columnar reader** parses the file block by block into Arrow columns with pyarrow's streaming
  JSON reader, against the schema inferred from the first block, checks every known field against
  the contract models (``contracts.conformance``) and canonicalises whole columns at once;
* the **record reader** validates line by line with the pydantic models (``GoldCase``, ``Trace``).

The columnar reader is tried first. Whenever it cannot vouch for a file (a JSON array, a type it is not
sure of, a value only a record can explain) the record reader runs instead: it is the authority, and
it either loads the file or raises an :class:`InputError` naming the file, line, id and field.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import BaseModel, ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.columnar import one_array
from ragspine_pipeline.contracts.canonical import (
    STAGES,
    NotSure,
    evidence_columns,
    gold_columns,
    trace_columns,
)
from ragspine_pipeline.contracts.evidence import EvidenceChunk
from ragspine_pipeline.contracts.gold import QID_ALIASES, GoldCase
from ragspine_pipeline.contracts.jsonl import KeyCountingDict, check_readable, first_char, iter_records
from ragspine_pipeline.contracts.schemas import EVIDENCE_SCHEMA, GOLD_SCHEMA, TRACE_SCHEMA
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Outcome, Trace
from ragspine_pipeline.errors import InputError

__all__ = [
    "EVIDENCE_SCHEMA",
    "GOLD_SCHEMA",
    "TRACE_SCHEMA",
    "Loaded",
    "as_strings",
    "explicit_schema",
    "load_evidence",
    "load_gold",
    "load_traces",
]

# 4 MiB blocks: the streaming reader's sweet spot on this machine (bench/RESULTS.md)
_OPTIONS = pj.ReadOptions(block_size=4 << 20)


@dataclass(frozen=True)
class Loaded:
    """Canonical columns of one input file and how they were read."""

    path: str
    table: pa.Table
    reader: str  # "columnar" or "record"


# -- public entry points ---------------------------------------------------------------------------


def load_gold(path: str | Path) -> Loaded:
    """Load a golden set in any of its dialects (``contracts.gold``) into :data:`GOLD_SCHEMA` columns.

    Raises InputError for a malformed line, a wrong type, a missing required field, a duplicate id or an
    empty set, naming file, line, id and field.
    """
    p = check_readable(path)
    loaded = _load(p, GOLD_SCHEMA, gold_columns, _gold_records)
    if loaded.reader == "columnar" and not _all_distinct(loaded.table.column("qid")):
        # A duplicate id: the record reader names both lines.
        loaded = Loaded(str(p), pa.Table.from_pylist(list(_gold_records(p)), schema=GOLD_SCHEMA), "record")
    if loaded.table.num_rows == 0:
        raise InputError(str(path), "the golden set has no cases")
    return loaded


def load_traces(path: str | Path) -> Loaded:
    """Load traces in any of their dialects (``contracts.trace``) into :data:`TRACE_SCHEMA` columns (file
    order kept)."""
    p = check_readable(path)
    return _load(p, TRACE_SCHEMA, trace_columns, _trace_records)


def load_evidence(path: str | Path) -> Loaded:
    """Load an evidence registry into :data:`EVIDENCE_SCHEMA` columns; chunk ids are unique."""
    p = check_readable(path)
    loaded = _load(p, EVIDENCE_SCHEMA, evidence_columns, _evidence_records)
    if loaded.reader == "columnar" and not _all_distinct(loaded.table.column("chunk_id")):
        # A duplicate chunk id: the record reader names both lines.
        loaded = Loaded(
            str(p), pa.Table.from_pylist(list(_evidence_records(p)), schema=EVIDENCE_SCHEMA), "record"
        )
    return loaded


def _load(path: Path, schema: pa.Schema, columnar, records) -> Loaded:
    try:
        parts = _canonical_blocks(path, schema, columnar)
        # The blocks stay where the parser put them: a copy into one contiguous table would hold the
        # file twice at the peak. A reader that gathers rows chunk by chunk joins the few columns it
        # gathers first (a chunked column concatenates itself on every take of a few rows).
        table = pa.concat_tables(parts) if parts else schema.empty_table()
        return Loaded(str(path), table, "columnar")
    except NotSure:
        pass
    return Loaded(str(path), pa.Table.from_pylist(list(records(path)), schema=schema), "record")


def _canonical_blocks(path: Path, schema: pa.Schema, columnar) -> list[pa.Table]:
    """The file's canonical columns, a block at a time (each raw block is freed once canonicalised).

    Read with pyarrow's streaming reader against the schema of the first block; where a field appears
    after the first block, with pyarrow's reader over the whole file. NotSure when only the record
    reader can read it.
    """
    if (head := first_char(path)) == "":
        return []
    if head == "[" or not inputs.arrow_safe_file(path):
        raise NotSure  # an array, or a line only the record reader may see (too long or deep)
    first_block = _first_block_schema(path)
    try:
        return [columnar(block).cast(schema) for block in _arrow_blocks(path, first_block, False)]
    except _FieldAppearsLate:
        return [columnar(block).cast(schema) for block in _arrow_blocks(path, first_block, True)]


def _first_block_schema(path: Path) -> pa.Schema:
    """The schema pyarrow infers from the file's first block, timestamps read back as text; NotSure
    when that block does not parse, nests too deep or has a key that is not UTF-8."""
    try:
        return as_strings(_usable(pj.open_json(path, read_options=_OPTIONS).schema))
    except pa.ArrowInvalid:
        raise NotSure from None


class _FieldAppearsLate(Exception):
    """The streaming reader met a field after its first block (it infers the schema from that block)."""


def _arrow_blocks(path: Path, first_block: pa.Schema, whole_file: bool) -> Iterator[pa.Table]:
    """Parse a JSON Lines file block by block against ``first_block`` (the schema of its first block),
    or with ``whole_file`` against the schema inferred from all of it. Raise NotSure when only the record
    reader can read it."""
    try:
        if whole_file:  # infers across all blocks, at the cost of holding the whole file's columns
            table = pj.read_json(path, read_options=_OPTIONS)
            as_read = as_strings(_usable(table.schema))
            if as_read != table.schema:
                table = pj.read_json(path, read_options=_OPTIONS, parse_options=explicit_schema(as_read))
            batches = iter(table.to_batches())
        else:
            # The first block fixes the schema; parsing the rest against it skips per-block inference.
            batches = pj.open_json(path, read_options=_OPTIONS, parse_options=explicit_schema(first_block))
        for batch in batches:
            _usable(batch.schema)  # a later block may add unexpected fields, deeper or not UTF-8
            batch.validate(full=True)  # e.g. invalid UTF-8, which the parser lets through
            if not all_finite(pa.Table.from_batches([batch])):
                raise NotSure  # NaN, Infinity or a number too large for JSON: the record reader names it
            yield pa.Table.from_batches([batch])
    except pa.ArrowInvalid as exc:
        if not whole_file and "unexpected field" in str(exc):
            raise _FieldAppearsLate from None
        raise NotSure from None


def _usable(schema: pa.Schema) -> pa.Schema:
    """``schema``, unless some line nests beyond the cap or has a key that is not UTF-8: then NotSure
    (the record reader names it)."""
    if not inputs.arrow_schema_usable(schema):
        raise NotSure
    return schema


def all_finite(table: pa.Table) -> bool:
    """No NaN or infinity in any floating-point value, however deeply nested (extra fields included)."""
    return all(_finite(one_array(column)) for column in table.columns if _has_floats(column.type))


def _has_floats(type_: pa.DataType) -> bool:
    if pa.types.is_floating(type_):
        return True
    if pa.types.is_struct(type_):
        return any(_has_floats(field.type) for field in type_)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _has_floats(type_.value_type)
    return False


def _finite(arr: pa.Array) -> bool:
    if pa.types.is_floating(arr.type):
        return pc.all(pc.is_finite(arr)).as_py() is not False
    if pa.types.is_struct(arr.type):
        return all(_finite(arr.field(i)) for i in range(arr.type.num_fields))
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        return _finite(arr.flatten())
    return True


def explicit_schema(schema: pa.Schema) -> pj.ParseOptions:
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")


def as_strings(schema: pa.Schema) -> pa.Schema:
    """The schema with every inferred timestamp read back as the string it was in the file.

    pyarrow turns ISO-looking strings ("2026-11-20") into timestamps; the contracts want the text.
    """
    return pa.schema([field.with_type(_timestamps_as_strings(field.type)) for field in schema])


def _timestamps_as_strings(type_: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(type_):
        return pa.string()
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(_timestamps_as_strings(f.type)) for f in type_])
    if pa.types.is_list(type_):
        return pa.list_(type_.value_field.with_type(_timestamps_as_strings(type_.value_type)))
    return type_


# -- record reader (authoritative) -----------------------------------------------------------------


def _validate(model: type[BaseModel], path: Path, line: int, raw: Any, id_aliases: tuple[str, ...]):
    if not isinstance(raw, dict):
        raise InputError(str(path), f"expected a JSON object, got {type(raw).__name__}", line)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise explain_validation_error(exc, path, line, raw, id_aliases) from None


def explain_validation_error(
    exc: ValidationError, path: Path | str, line: int | None, raw: dict, id_aliases: tuple[str, ...]
) -> InputError:
    """A pydantic error as one ``InputError`` line: file, line, record id, field, message, bad value."""
    error = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in error["loc"]) or (error.get("ctx") or {}).get("field")
    record_id = next((raw[a] for a in id_aliases if isinstance(raw.get(a), (str, int))), None)
    message = error["msg"]
    if error["type"] not in ("missing", "answerable_missing"):
        shown = repr(error.get("input"))
        message += f" (got {shown[:60]}{'…' if len(shown) > 60 else ''})"
    return InputError(str(path), message, line, None if record_id is None else str(record_id), loc)


def unique_records(
    path: str | Path, model: type[BaseModel], id_aliases: tuple[str, ...], key: str
) -> Iterator[Any]:
    """Every record of ``path`` validated by ``model``; a repeated ``key`` is rejected naming both lines."""
    path = Path(path)
    first_line: dict[str, int] = {}
    for line, raw in iter_records(path):
        record = _validate(model, path, line, raw, id_aliases)
        value = getattr(record, key)
        if value in first_line:
            raise InputError(str(path), f"duplicate id (first on line {first_line[value]})", line, value, key)
        first_line[value] = line
        yield record


def gold_cases(path: str | Path) -> Iterator[GoldCase]:
    """Every gold case of ``path``, fully validated, ids unique (the authoritative reading)."""
    return unique_records(path, GoldCase, QID_ALIASES, "qid")


def _gold_records(path: Path):
    for case in gold_cases(path):
        expected = case.expected
        source = None if expected is None else expected.source
        yield {
            **{name: getattr(case, name) for name in GOLD_SCHEMA.names if not name.startswith("expected_")},
            "reference_date": None if case.reference_date is None else case.reference_date.isoformat(),
            "expected_clarification": None if expected is None else expected.clarification,
            "expected_refuse": None if expected is None else expected.refuse,
            "expected_value": None if expected is None else expected.value,
            "expected_unit": None if expected is None else expected.unit,
            "expected_source_doc": None if source is None else source.doc,
            "expected_source_locator": None if source is None else source.locator,
            "expected_narrative_doc": None if expected is None else expected.narrative_doc,
        }


def _evidence_records(path: Path):
    for chunk in unique_records(path, EvidenceChunk, ("chunk_id",), "chunk_id"):
        yield {name: getattr(chunk, name) for name in EVIDENCE_SCHEMA.names}


def _version_keys(raw_versions: Any, trace: Trace) -> list[str] | None:
    if isinstance(raw_versions, list):  # [key, value] pairs: the keys as written, a repeated one twice
        return [key for key, value in raw_versions if value is not None]
    if trace.versions is None:
        return None
    repeated = getattr(raw_versions, "repeated", [])
    return [*trace.versions, *repeated]


def _trace_records(path: Path):
    for line, raw in iter_records(path, object_pairs_hook=KeyCountingDict.from_pairs):
        trace = _validate(Trace, path, line, raw, TRACE_QID_ALIASES)
        if trace.qid is None and trace.question is None:
            raise InputError(
                str(path), "missing: a trace needs a qid (or a question to join on)", line, None, "qid"
            )
        yield {
            "qid": trace.qid,
            "question": trace.question,
            "claim": trace.canonical_claim,
            "citations": trace.canonical_citations,
            "retrieved_ids": trace.canonical_retrieved_ids,
            **{stage: getattr(trace, stage) for stage in STAGES},
            "claims": None if trace.ledger is None else [claim.model_dump() for claim in trace.ledger],
            "version_keys": _version_keys(raw.get("versions"), trace),
            "index_version": None if trace.versions is None else trace.versions.get("index"),
            "ts": trace.canonical_ts,
            "tags": trace.canonical_tags,
            "latency_ms": trace.latency_ms,
            "prompt_tokens": None if trace.token_usage is None else trace.token_usage.prompt_tokens,
            "completion_tokens": None if trace.token_usage is None else trace.token_usage.completion_tokens,
            "outcome_refused": trace.outcome_refused,
            **_outcome_fields(trace.outcome),
        }


def _outcome_fields(outcome: Outcome | None) -> dict[str, Any]:
    found = None if outcome is None else outcome.found_source
    sources = None if outcome is None else outcome.sources
    return {
        "outcome_clarification": None if outcome is None else outcome.clarification_mode,
        "outcome_found_value": None if outcome is None else outcome.found_value,
        "outcome_found_unit": None if outcome is None else outcome.found_unit,
        "outcome_found_doc": None if found is None else found.doc,
        "outcome_found_locator": None if found is None else found.locator,
        "outcome_source_docs": None if sources is None else [source.doc for source in sources],
        "outcome_narrative": None if outcome is None else outcome.narrative_answer,
        "outcome_context": None if outcome is None else outcome.context_texts,
    }


def _all_distinct(values: pa.ChunkedArray) -> bool:
    """No value repeats. Golden sets are usually sorted by id, which a linear scan proves; else hash."""
    values = values.combine_chunks()
    if len(values) < 2 or pc.all(pc.less(values[:-1], values[1:])).as_py():
        return True
    return pc.count_distinct(values).as_py() == len(values)

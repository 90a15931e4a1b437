"""One loader from any gold or trace dialect to canonical Arrow columns, ready for vectorised scoring.

Two readers produce the same columns:

* the **columnar reader** parses the file with pyarrow's streaming JSON reader, checks every known field
  against the contract models (``contracts.conformance``) and canonicalises whole columns at once;
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import BaseModel, ValidationError

from ragspine_pipeline.contracts.conformance import table_conforms
from ragspine_pipeline.contracts.evidence import EvidenceChunk
from ragspine_pipeline.contracts.gold import GOLD_CITATION_ALIASES, QID_ALIASES, GoldCase
from ragspine_pipeline.contracts.jsonl import KeyCountingDict, check_readable, first_char, iter_records
from ragspine_pipeline.contracts.trace import (
    EMBEDDED_CITATIONS,
    EMBEDDED_SEPARATORS,
    RETRIEVED_ALIASES,
    TRACE_QID_ALIASES,
    Trace,
)
from ragspine_pipeline.contracts.types import QUESTION_ALIASES
from ragspine_pipeline.errors import InputError

STR_LIST = pa.list_(pa.string())
TAGS = pa.map_(pa.string(), pa.string())
LEDGER = pa.list_(
    pa.struct(
        [
            pa.field("text", pa.string()),
            pa.field("citation_id", pa.string()),
            pa.field("support_phrases", STR_LIST),
            pa.field("answer_point", pa.string()),
        ]
    )
)

GOLD_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("answerable", pa.bool_(), nullable=False),
        pa.field("gold_claim_substr", STR_LIST, nullable=False),
        pa.field("gold_claim", pa.string()),
        pa.field("gold_citations", STR_LIST, nullable=False),
        pa.field("required_points", STR_LIST, nullable=False),
        pa.field("tags", TAGS, nullable=False),
    ]
)
"""Canonical gold columns. Lists and tags are never null (absent means empty)."""

TRACE_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.string()),
        pa.field("question", pa.string()),
        pa.field("claim", pa.string()),
        pa.field("citations", STR_LIST),
        pa.field("retrieved_ids", STR_LIST),
        pa.field("rerank_input_ids", STR_LIST),
        pa.field("reranked_ids", STR_LIST),
        pa.field("selected_context_ids", STR_LIST),
        pa.field("selected_versions", STR_LIST),
        pa.field("claims", LEDGER),
        pa.field("version_keys", STR_LIST),
        pa.field("index_version", pa.string()),
    ]
)
"""Canonical trace columns. Null means "not in the trace": a null ``citations`` is an answer that carries
no citation list (non-compliant), a null stage is a stage the trace does not carry (skipped).
``claims`` is the claim ledger (null without one); ``version_keys`` the keys of ``versions`` as written
(a repeated key appears twice), ``index_version`` its ``index`` entry."""

EVIDENCE_SCHEMA = pa.schema(
    [
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("document_id", pa.string()),
        pa.field("parent_id", pa.string()),
        pa.field("version", pa.string(), nullable=False),
        pa.field("permitted", pa.bool_(), nullable=False),
        pa.field("current", pa.bool_(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ]
)
"""Canonical evidence registry columns (SPEC §2.3)."""

_STAGES = ("rerank_input_ids", "reranked_ids", "selected_context_ids", "selected_versions")
_BLOCK_SIZE = 4 << 20  # 4 MiB blocks: the streaming reader's sweet spot on this machine (bench/RESULTS.md)


@dataclass(frozen=True)
class Loaded:
    """Canonical columns of one input file and how they were read."""

    path: str
    table: pa.Table
    reader: str  # "columnar" or "record"


class _NotSure(Exception):
    """The columnar reader cannot vouch for this file; the record reader decides."""


# -- public entry points ---------------------------------------------------------------------------


def load_gold(path: str | Path) -> Loaded:
    """Load a golden set in any dialect of SPEC §2.1 into :data:`GOLD_SCHEMA` columns.

    Raises InputError for a malformed line, a wrong type, a missing required field, a duplicate id or an
    empty set, naming file, line, id and field.
    """
    p = check_readable(path)
    loaded = _load(p, GOLD_SCHEMA, _gold_columns, _gold_records)
    if loaded.reader == "columnar" and not _all_distinct(loaded.table.column("qid")):
        # A duplicate id: the record reader names both lines.
        loaded = Loaded(str(p), pa.Table.from_pylist(list(_gold_records(p)), schema=GOLD_SCHEMA), "record")
    if loaded.table.num_rows == 0:
        raise InputError(str(path), "the golden set has no cases")
    return loaded


def load_traces(path: str | Path) -> Loaded:
    """Load traces in any dialect of SPEC §2.2 into :data:`TRACE_SCHEMA` columns (file order kept)."""
    p = check_readable(path)
    return _load(p, TRACE_SCHEMA, _trace_columns, _trace_records)


def load_evidence(path: str | Path) -> Loaded:
    """Load an evidence registry (SPEC §2.3) into :data:`EVIDENCE_SCHEMA` columns; chunk ids are unique."""
    p = check_readable(path)
    loaded = _load(p, EVIDENCE_SCHEMA, _evidence_columns, _evidence_records)
    if loaded.reader == "columnar" and not _all_distinct(loaded.table.column("chunk_id")):
        # A duplicate chunk id: the record reader names both lines.
        loaded = Loaded(
            str(p), pa.Table.from_pylist(list(_evidence_records(p)), schema=EVIDENCE_SCHEMA), "record"
        )
    return loaded


def _load(path: Path, schema: pa.Schema, columnar, records) -> Loaded:
    try:
        # Canonicalise block by block: only canonical columns are kept, each raw block is freed.
        try:
            parts = [columnar(block).cast(schema) for block in _arrow_blocks(path, whole_file=False)]
        except _FieldAppearsLate:
            parts = [columnar(block).cast(schema) for block in _arrow_blocks(path, whole_file=True)]
        # One contiguous table: scoring gathers rows at random (joins), which chunked columns make slow.
        table = pa.concat_tables(parts).combine_chunks() if parts else schema.empty_table()
        return Loaded(str(path), table, "columnar")
    except _NotSure:
        pass
    return Loaded(str(path), pa.Table.from_pylist(list(records(path)), schema=schema), "record")


class _FieldAppearsLate(Exception):
    """The streaming reader met a field after its first block (it infers the schema from that block)."""


def _arrow_blocks(path: Path, whole_file: bool) -> Iterator[pa.Table]:
    """Parse a JSON Lines file block by block; raise _NotSure when only the record reader can read it."""
    head = first_char(path)
    if head == "":
        return
    if head == "[":
        raise _NotSure
    options = pj.ReadOptions(block_size=_BLOCK_SIZE)
    try:
        if whole_file:  # infers across all blocks, at the cost of holding the whole file's columns
            table = pj.read_json(path, read_options=options)
            as_read = _as_strings(table.schema)
            if as_read != table.schema:
                table = pj.read_json(path, read_options=options, parse_options=_explicit(as_read))
            batches = iter(table.to_batches())
        else:
            # The first block fixes the schema; parsing the rest against it skips per-block inference.
            as_read = _as_strings(pj.open_json(path, read_options=options).schema)
            batches = pj.open_json(path, read_options=options, parse_options=_explicit(as_read))
        for batch in batches:
            batch.validate(full=True)  # e.g. invalid UTF-8, which the parser lets through
            yield pa.Table.from_batches([batch])
    except pa.ArrowInvalid as exc:
        if not whole_file and "unexpected field" in str(exc):
            raise _FieldAppearsLate from None
        raise _NotSure from None


def _explicit(schema: pa.Schema) -> pj.ParseOptions:
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")


def _as_strings(schema: pa.Schema) -> pa.Schema:
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
        raise _explain(exc, path, line, raw, id_aliases) from None


def _explain(
    exc: ValidationError, path: Path, line: int, raw: dict, id_aliases: tuple[str, ...]
) -> InputError:
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
        yield {name: getattr(case, name) for name in GOLD_SCHEMA.names}


def _evidence_records(path: Path):
    for chunk in unique_records(path, EvidenceChunk, ("chunk_id",), "chunk_id"):
        yield {name: getattr(chunk, name) for name in EVIDENCE_SCHEMA.names}


def _version_keys(raw_versions: Any, trace: Trace) -> list[str] | None:
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
            **{stage: getattr(trace, stage) for stage in _STAGES},
            "claims": None if trace.ledger is None else [claim.model_dump() for claim in trace.ledger],
            "version_keys": _version_keys(raw.get("versions"), trace),
            "index_version": None if trace.versions is None else trace.versions.get("index"),
        }


# -- columnar reader -------------------------------------------------------------------------------


def _gold_columns(table: pa.Table) -> pa.Table:
    if not table_conforms(table, GoldCase):
        raise _NotSure
    n = table.num_rows
    qid = _aliased(table, QID_ALIASES, pa.string())
    question = _aliased(table, QUESTION_ALIASES, pa.string())
    if qid.null_count or question.null_count:
        raise _NotSure  # a missing id or question: the record reader names the line
    citations = _non_null_lists(_aliased(table, GOLD_CITATION_ALIASES, STR_LIST), n)
    answerable = _column(table, "answerable", pa.bool_(), n)
    if answerable.null_count:  # SPEC §2.1: not expected.refuse, else true when gold citations are given
        refuse = _child(_column(table, "expected"), "refuse")
        by_citations = pc.if_else(
            pc.greater(pc.list_value_length(citations), 0), True, pa.scalar(None, pa.bool_())
        )
        answerable = _coalesce(
            pa.bool_(), n, answerable, None if refuse is None else pc.invert(refuse), by_citations
        )
        if answerable.null_count:
            raise _NotSure  # answerability cannot be inferred on some line
    return pa.table(
        {
            "qid": qid,
            "question": question,
            "answerable": answerable,
            "gold_claim_substr": _non_null_lists(_column(table, "gold_claim_substr"), n),
            "gold_claim": _column(table, "gold_claim", pa.string(), n),
            "gold_citations": citations,
            "required_points": _non_null_lists(_column(table, "required_points"), n),
            "tags": _struct_to_map(_column(table, "tags"), n),
        }
    )


def _trace_columns(table: pa.Table) -> pa.Table:
    if not table_conforms(table, Trace):
        raise _NotSure
    n = table.num_rows
    qid = _aliased(table, TRACE_QID_ALIASES, pa.string())
    question = _aliased(table, QUESTION_ALIASES, pa.string())
    if pc.any(pc.and_(qid.is_null(), question.is_null())).as_py():
        raise _NotSure  # a trace with nothing to join on: the record reader names the line

    answer = _column(table, "answer")
    answer_text = answer if answer is not None and pa.types.is_string(answer.type) else None
    objects = [
        a for a in (answer if answer_text is None else None, _column(table, "answer_json")) if a is not None
    ]
    ledgers = [_child(obj, "claims") for obj in objects]
    ledgers = [ledger for ledger in ledgers if ledger is not None and not pa.types.is_null(ledger.type)]

    claim = _coalesce(
        pa.string(),
        n,
        *[_child(obj, "claim") for obj in objects],
        answer_text,
        _ledger_text(_coalesce_ledger(ledgers)) if ledgers else None,
    )
    citations = _coalesce(
        STR_LIST,
        n,
        *[_child(obj, "citations") for obj in objects],
        _column(table, "citations"),
        _embedded_citations(answer_text) if answer_text is not None else None,
        _ledger_citations(ledgers, n) if ledgers else None,
    )
    chunks = _column(table, "chunks")
    chunk_ids = None if chunks is None else _list_child(chunks, "id")
    retrieved = _coalesce(STR_LIST, n, _aliased(table, RETRIEVED_ALIASES, STR_LIST), chunk_ids)
    return pa.table(
        {
            "qid": qid,
            "question": question,
            "claim": claim,
            "citations": citations,
            "retrieved_ids": retrieved,
            **{stage: _column(table, stage, STR_LIST, n) for stage in _STAGES},
            "claims": _canonical_ledger(ledgers, n),
            "version_keys": _struct_keys(_column(table, "versions"), n),
            "index_version": _cast_or_nulls(_child(_column(table, "versions"), "index"), pa.string(), n),
        }
    )


def _evidence_columns(table: pa.Table) -> pa.Table:
    if not table_conforms(table, EvidenceChunk):
        raise _NotSure
    n = table.num_rows
    columns = {
        name: _cast_or_nulls(_column(table, name), field.type, n)
        for name, field in zip(EVIDENCE_SCHEMA.names, EVIDENCE_SCHEMA, strict=True)
    }
    if any(columns[f.name].null_count for f in EVIDENCE_SCHEMA if not f.nullable):
        raise _NotSure  # a required field is missing: the record reader names the line
    return pa.table(columns)


def _canonical_ledger(ledgers: list[pa.Array], n: int) -> pa.Array:
    """The first non-null ledger per row, its entries reduced to the canonical claim fields."""
    canonical = []
    for ledger in ledgers:
        values = ledger.values
        m = len(values)
        phrases = _cast_or_nulls(_child(values, "support_phrases"), STR_LIST, m)
        entries = pa.StructArray.from_arrays(
            [
                _cast_or_nulls(_child(values, "text"), pa.string(), m),
                _cast_or_nulls(_child(values, "citation_id"), pa.string(), m),
                pc.coalesce(phrases, _empty_lists(m)),
                _cast_or_nulls(_child(values, "answer_point"), pa.string(), m),
            ],
            fields=list(LEDGER.value_type),
        )
        canonical.append(pa.ListArray.from_arrays(ledger.offsets, entries, mask=ledger.is_null()))
    return _coalesce(LEDGER, n, *canonical)


def _struct_to_map(struct: pa.Array | None, n: int) -> pa.Array:
    """A JSON object read as a struct (one child per key seen in the file) as a map of its non-null keys."""
    if struct is None or not pa.types.is_struct(struct.type) or struct.type.num_fields == 0:
        return pa.MapArray.from_arrays(
            np.zeros(n + 1, dtype=np.int32), pa.array([], pa.string()), pa.array([], pa.string())
        )
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    children = [_cast(pc.struct_field(struct, [i]), pa.string()) for i in range(len(names))]
    present = np.stack([np.asarray(child.is_valid()) for child in children], axis=1)  # rows × keys
    rows, keys = np.nonzero(present)  # row-major: entries grouped by row, keys in file order
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    flat_values = pa.concat_arrays(children).take(pa.array(keys * n + rows))
    return pa.MapArray.from_arrays(
        offsets, pa.array(np.asarray(names, dtype=object)[keys], pa.string()), flat_values
    )


def _struct_keys(struct: pa.Array | None, n: int) -> pa.Array:
    """The keys of a JSON object column per row (null where the object is absent)."""
    if struct is None or not pa.types.is_struct(struct.type):
        return pa.nulls(n, STR_LIST)
    as_map = _struct_to_map(struct, n)
    return pa.ListArray.from_arrays(as_map.offsets, as_map.keys, mask=struct.is_null())


def _cast_or_nulls(arr: pa.Array | None, type_: pa.DataType, n: int) -> pa.Array:
    return pa.nulls(n, type_) if arr is None else _cast(arr, type_)


# -- column helpers --------------------------------------------------------------------------------


def _all_distinct(values: pa.ChunkedArray) -> bool:
    """No value repeats. Golden sets are usually sorted by id, which a linear scan proves; else hash."""
    values = values.combine_chunks()
    if len(values) < 2 or pc.all(pc.less(values[:-1], values[1:])).as_py():
        return True
    return pc.count_distinct(values).as_py() == len(values)


def _column(table: pa.Table, name: str, type_: pa.DataType | None = None, n: int | None = None):
    """The named column as one array (cast to ``type_``), or None / all-null when absent."""
    if name not in table.column_names:
        return None if type_ is None else pa.nulls(n, type_)
    column = table.column(name)
    arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return arr if type_ is None else _cast(arr, type_)


def _cast(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), type_)
    return arr.cast(type_)


def _aliased(table: pa.Table, names: tuple[str, ...], type_: pa.DataType) -> pa.Array:
    """Per row, the first non-null of the alias columns ``names`` (SPEC alias precedence); all null
    when none is present."""
    return _coalesce(type_, table.num_rows, *[_column(table, name) for name in names])


def _coalesce(type_: pa.DataType, n: int, *arrays: pa.Array | None) -> pa.Array:
    present = [_cast(arr, type_) for arr in arrays if arr is not None]
    if not present:
        return pa.nulls(n, type_)
    return present[0] if len(present) == 1 else pc.coalesce(*present)


def _child(struct: pa.Array | None, name: str) -> pa.Array | None:
    if struct is None or not pa.types.is_struct(struct.type) or struct.type.get_field_index(name) < 0:
        return None
    return pc.struct_field(struct, name)


def _list_child(lists: pa.Array, name: str) -> pa.Array | None:
    """``lists[].name`` as a list of strings (e.g. ``chunks[].id``), keeping each row's validity.

    A child that no element has (e.g. every list is empty) reads as nulls, one per element.
    """
    if pa.types.is_null(lists.type):
        return None
    values = _child(lists.values, name)
    values = pa.nulls(len(lists.values), pa.string()) if values is None else _cast(values, pa.string())
    return pa.ListArray.from_arrays(lists.offsets, values, mask=lists.is_null())


def _non_null_lists(arr: pa.Array | None, n: int) -> pa.Array:
    if arr is None:
        return _empty_lists(n)
    arr = _cast(arr, STR_LIST)
    return arr if arr.null_count == 0 else pc.coalesce(arr, _empty_lists(n))


def _empty_lists(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()))


def _lists_from_parents(values: pa.Array, parents: np.ndarray, n: int, valid: pa.Array) -> pa.Array:
    """Rebuild a list column from flat values sorted by their (row) parent index."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents, minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pc.invert(valid))


def _embedded_citations(text: pa.Array) -> pa.Array:
    """``citations: [a, b]`` inside text answers, as lists; null where the text has none."""
    pattern = EMBEDDED_CITATIONS.replace("(?i)", "(?i)", 1).replace(r"\[(", r"\[(?P<ids>", 1)
    found = pc.struct_field(pc.extract_regex(text, pattern), "ids")
    tokens = pc.split_pattern_regex(found, EMBEDDED_SEPARATORS)
    flat = pc.list_flatten(tokens)
    parents = np.asarray(pc.list_parent_indices(tokens))
    keep = np.asarray(pc.greater(pc.utf8_length(flat), 0))
    return _lists_from_parents(flat.filter(pa.array(keep)), parents[keep], len(text), tokens.is_valid())


def _coalesce_ledger(ledgers: list[pa.Array]) -> pa.Array:
    """Texts of the first non-null ledger per row (ledger structs may differ, so project first)."""
    texts = [_list_child(ledger, "text") for ledger in ledgers]
    return pc.coalesce(*[t for t in texts if t is not None])


def _ledger_text(texts: pa.Array) -> pa.Array:
    return pc.binary_join(texts, " ")


def _ledger_citations(ledgers: list[pa.Array], n: int) -> pa.Array:
    """Distinct ``citation_id``s of the first non-null ledger per row, in order of first appearance."""
    ids = [_list_child(ledger, "citation_id") for ledger in ledgers]
    ids = pc.coalesce(*[i for i in ids if i is not None])
    flat = pc.list_flatten(ids)
    parents = np.asarray(pc.list_parent_indices(ids))
    keep = np.asarray(flat.is_valid())
    flat, parents = flat.filter(pa.array(keep)), parents[keep]
    firsts = (
        pa.table({"p": parents, "id": flat, "pos": np.arange(len(flat))})
        .group_by(["p", "id"], use_threads=False)
        .aggregate([("pos", "min")])
        .sort_by("pos_min")
    )
    order = np.asarray(firsts.column("pos_min"))
    return _lists_from_parents(flat.take(pa.array(order)), parents[order], n, ids.is_valid())

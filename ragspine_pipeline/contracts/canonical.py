"""Columnar canonicalisation: whole pyarrow columns of any dialect to the canonical schemas.

Each function takes one parsed block (a table whose columns are the JSON keys as pyarrow inferred them)
and returns the canonical columns, or raises :class:`NotSure` when it cannot vouch for the block — a type
it does not know, a value only a record can explain — so that the record reader decides. The pydantic
models (``GoldCase``, ``Trace``, ``EvidenceChunk``) define the same mapping record by record; a
property-based test keeps the two equal.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import distinct, empty_lists, flat, lists_from_rows, offsets_of, one_array
from ragspine_pipeline.contracts.conformance import table_conforms
from ragspine_pipeline.contracts.evidence import EvidenceChunk
from ragspine_pipeline.contracts.gold import GOLD_CITATION_ALIASES, QID_ALIASES, GoldCase
from ragspine_pipeline.contracts.schemas import EVIDENCE_SCHEMA, LEDGER, STR_LIST, TAGS
from ragspine_pipeline.contracts.trace import (
    COMPLETION_TOKEN_ALIASES,
    EMBEDDED_CITATIONS,
    EMBEDDED_SEPARATORS,
    EXACT_FLOAT_INTEGERS,
    PROMPT_TOKEN_ALIASES,
    RETRIEVED_ALIASES,
    TRACE_QID_ALIASES,
    Trace,
)
from ragspine_pipeline.contracts.types import QUESTION_ALIASES

STAGES = ("rerank_input_ids", "reranked_ids", "selected_context_ids", "selected_versions")


class NotSure(Exception):
    """The columnar reader cannot vouch for this block; the record reader decides."""


# -- columnar reader -------------------------------------------------------------------------------


def gold_columns(table: pa.Table) -> pa.Table:
    if not table_conforms(table, GoldCase):
        raise NotSure
    n = table.num_rows
    qid = aliased_column(table, QID_ALIASES, pa.string())
    question = aliased_column(table, QUESTION_ALIASES, pa.string())
    if qid.null_count or question.null_count:
        raise NotSure  # a missing id or question: the record reader names the line
    citations = _non_null_lists(aliased_column(table, GOLD_CITATION_ALIASES, STR_LIST), n)
    answerable = _column(table, "answerable", pa.bool_(), n)
    if answerable.null_count:  # inferred: not expected.refuse, else true when gold citations are given
        refuse = _child(_column(table, "expected"), "refuse")
        by_citations = pc.if_else(
            pc.greater(pc.list_value_length(citations), 0), True, pa.scalar(None, pa.bool_())
        )
        answerable = _coalesce(
            pa.bool_(), n, answerable, None if refuse is None else pc.invert(refuse), by_citations
        )
        if answerable.null_count:
            raise NotSure  # answerability cannot be inferred on some line
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
            **_expected_columns(table, n),
            "expect": _cast_or_nulls(_column(table, "expect"), pa.string(), n),
        }
    )


def _expected_columns(table: pa.Table, n: int) -> dict[str, pa.Array]:
    """``case_type`` and ``expected.*`` as columns; the rules of ``gold.qa_expectation_problem``
    checked column-wise (a line that breaks one goes to the record reader, which names it)."""
    expected = _column(table, "expected")
    source = _child(expected, "source")
    out = {
        "reference_date": _cast_or_nulls(_column(table, "reference_date"), pa.string(), n),
        "case_type": _cast_or_nulls(_column(table, "case_type"), pa.string(), n),
        "expected_clarification": _cast_or_nulls(_child(expected, "clarification"), pa.string(), n),
        "expected_refuse": _cast_or_nulls(_child(expected, "refuse"), pa.bool_(), n),
        "expected_value": _cast_or_nulls(_child(expected, "value"), pa.float64(), n),
        "expected_unit": _cast_or_nulls(_child(expected, "unit"), pa.string(), n),
        "expected_source_doc": _cast_or_nulls(_child(source, "doc"), pa.string(), n),
        "expected_source_locator": _cast_or_nulls(_child(source, "locator"), pa.string(), n),
        "expected_narrative_doc": _cast_or_nulls(_child(expected, "narrative_doc"), pa.string(), n),
    }
    case_type = out["case_type"]

    def is_type(*names: str) -> pa.Array:
        return pc.fill_null(pc.is_in(case_type, pa.array(names)), False)

    def missing(name: str) -> pa.Array:
        return out[name].is_null()

    broken = [
        pc.and_(case_type.is_valid(), expected.is_null() if expected is not None else nulls(n).is_null()),
        pc.and_(is_type("refusal"), pc.invert(pc.fill_null(out["expected_refuse"], False))),
        pc.and_(
            is_type("clarification"),
            pc.fill_null(pc.equal(out["expected_clarification"], "none"), True),
        ),
        pc.and_(
            is_type("numeric", "composite"),
            pc.or_(
                missing("expected_value"), pc.or_(missing("expected_unit"), missing("expected_source_doc"))
            ),
        ),
        pc.and_(is_type("narrative", "composite"), missing("expected_narrative_doc")),
    ]
    if any(pc.any(rule).as_py() for rule in broken):
        raise NotSure
    return out


def trace_columns(table: pa.Table) -> pa.Table:
    if not table_conforms(table, Trace):
        raise NotSure
    n = table.num_rows
    qid = aliased_column(table, TRACE_QID_ALIASES, pa.string())
    question = aliased_column(table, QUESTION_ALIASES, pa.string())
    if pc.any(pc.and_(qid.is_null(), question.is_null())).as_py():
        raise NotSure  # a trace with nothing to join on: the record reader names the line

    answer = _column(table, "answer")
    answer_text = answer if answer is not None and pa.types.is_string(answer.type) else None
    objects = [
        a for a in (answer if answer_text is None else None, _column(table, "answer_json")) if a is not None
    ]
    ledgers = [_child(obj, "claims") for obj in objects]
    ledgers = [ledger for ledger in ledgers if ledger is not None and not pa.types.is_null(ledger.type)]
    ledger = _canonical_ledger(ledgers, n)

    claim = _coalesce(
        pa.string(),
        n,
        *[_child(obj, "claim") for obj in objects],
        answer_text,
        pc.binary_join(_ledger_field(ledger, "text"), " "),  # the claims' texts joined by a space
    )
    citations = _coalesce(
        STR_LIST,
        n,
        *[_child(obj, "citations") for obj in objects],
        _column(table, "citations"),
        _embedded_citations(answer_text) if answer_text is not None else None,
        distinct(_ledger_field(ledger, "citation_id"), drop_nulls=True),  # first appearance order
    )
    chunks = _column(table, "chunks")
    chunk_ids = None if chunks is None else _list_child(chunks, "id")
    retrieved = _coalesce(STR_LIST, n, aliased_column(table, RETRIEVED_ALIASES, STR_LIST), chunk_ids)
    usage = _column(table, "token_usage")
    # An integer latency beyond 2**53 rounds to the nearest float, as float() does in the model.
    latency = _column(table, "latency_ms")
    latency = nulls(n, pa.float64()) if latency is None else _cast(latency, pa.float64(), safe=False)
    return pa.table(
        {
            "qid": qid,
            "question": question,
            "claim": claim,
            "citations": citations,
            "retrieved_ids": retrieved,
            **{stage: _column(table, stage, STR_LIST, n) for stage in STAGES},
            "claims": ledger,
            "version_keys": _struct_keys(_column(table, "versions"), n),
            "index_version": _cast_or_nulls(_child(_column(table, "versions"), "index"), pa.string(), n),
            "ts": _timestamp_text(_column(table, "ts"), n),
            "tags": _optional_map(_column(table, "tags"), n),
            "latency_ms": latency,
            "prompt_tokens": _coalesce(pa.int64(), n, *[_child(usage, a) for a in PROMPT_TOKEN_ALIASES]),
            "completion_tokens": _coalesce(
                pa.int64(), n, *[_child(usage, a) for a in COMPLETION_TOKEN_ALIASES]
            ),
            "outcome_refused": _outcome_refused(_column(table, "outcome"), n),
            **_outcome_columns(_column(table, "outcome"), n),
        }
    )


def evidence_columns(table: pa.Table) -> pa.Table:
    if not table_conforms(table, EvidenceChunk):
        raise NotSure
    n = table.num_rows
    columns = {
        name: _cast_or_nulls(_column(table, name), field.type, n)
        for name, field in zip(EVIDENCE_SCHEMA.names, EVIDENCE_SCHEMA, strict=True)
    }
    if any(columns[f.name].null_count for f in EVIDENCE_SCHEMA if not f.nullable):
        raise NotSure  # a required field is missing: the record reader names the line
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
                pc.coalesce(phrases, empty_lists(m)),
                _cast_or_nulls(_child(values, "answer_point"), pa.string(), m),
            ],
            fields=list(LEDGER.value_type),
        )
        canonical.append(pa.ListArray.from_arrays(ledger.offsets, entries, mask=ledger.is_null()))
    return _coalesce(LEDGER, n, *canonical)


def _struct_to_map(struct: pa.Array | None, n: int, sort_keys: bool = False) -> pa.Array:
    """A JSON object read as a struct (one child per key seen in the file) as a map of its non-null keys,
    in file order (or sorted by key)."""
    if struct is None or not pa.types.is_struct(struct.type) or struct.type.num_fields == 0:
        return pa.MapArray.from_arrays(
            np.zeros(n + 1, dtype=np.int32), pa.array([], pa.string()), pa.array([], pa.string())
        )
    fields = range(struct.type.num_fields)
    if sort_keys:
        fields = sorted(fields, key=lambda i: struct.type.field(i).name)
    names = [struct.type.field(i).name for i in fields]
    children = [_cast(pc.struct_field(struct, [i]), pa.string()) for i in fields]
    present = np.stack([np.asarray(child.is_valid()) for child in children], axis=1)  # rows × keys
    rows, keys = np.nonzero(present)  # row-major: entries grouped by row, keys in file order
    offsets = offsets_of(rows, n)
    flat_values = pa.concat_arrays(children).take(pa.array(keys * n + rows))
    return pa.MapArray.from_arrays(
        offsets, pa.array(np.asarray(names, dtype=object)[keys], pa.string()), flat_values
    )


def _optional_map(struct: pa.Array | None, n: int) -> pa.Array:
    """A JSON object column as a map sorted by key, null where the object is absent (``Trace.tags``)."""
    if struct is None or not pa.types.is_struct(struct.type):
        return nulls(n, TAGS)
    as_map = _struct_to_map(struct, n, sort_keys=True)
    return pa.MapArray.from_arrays(as_map.offsets, as_map.keys, as_map.items, mask=struct.is_null())


def _timestamp_text(ts: pa.Array | None, n: int) -> pa.Array:
    """``ts`` as text, as ``contracts.trace.timestamp_text`` writes it.

    Arrow writes a float as Python's ``repr`` does only for fractional values between 1e-4 and 1e10
    (epoch seconds); any other fractional value, or a whole one too large to be exact, is left to the
    record reader.
    """
    if ts is None or pa.types.is_null(ts.type):
        return nulls(n, pa.string())
    if not pa.types.is_floating(ts.type):
        return _cast(ts, pa.string())  # strings as written, integers in decimal
    ts = _cast(ts, pa.float64())
    magnitude = pc.abs(ts)
    whole = pc.equal(pc.floor(ts), ts)
    exact_whole = pc.and_(whole, pc.less(magnitude, float(EXACT_FLOAT_INTEGERS)))
    plain = pc.and_(pc.greater_equal(magnitude, 1e-4), pc.less(magnitude, 1e10))
    if pc.all(pc.or_(exact_whole, pc.and_(pc.invert(whole), plain))).as_py() is False:
        raise NotSure
    as_integer = pc.if_else(exact_whole, ts, 0.0).cast(pa.int64()).cast(pa.string())
    return pc.if_else(exact_whole, as_integer, ts.cast(pa.string()))


def _outcome_refused(outcome: pa.Array | None, n: int) -> pa.Array:
    """``outcome.refused`` (null where not given); any other type than a flag: the record reader rejects."""
    refused = _child(outcome, "refused")
    if refused is None or pa.types.is_null(refused.type):
        return nulls(n, pa.bool_())
    if not pa.types.is_boolean(refused.type):
        raise NotSure
    return refused


def _outcome_columns(outcome: pa.Array | None, n: int) -> dict[str, pa.Array]:
    """The QA-gate fields of ``outcome`` (``table_conforms`` has checked their types already)."""
    found = _child(outcome, "found_source")
    sources = _child(outcome, "sources")
    docs = None if sources is None else _list_child(sources, "doc")
    return {
        "outcome_clarification": _cast_or_nulls(_child(outcome, "clarification_mode"), pa.string(), n),
        "outcome_found_value": _cast_or_nulls(_child(outcome, "found_value"), pa.float64(), n),
        "outcome_found_unit": _cast_or_nulls(_child(outcome, "found_unit"), pa.string(), n),
        "outcome_found_doc": _cast_or_nulls(_child(found, "doc"), pa.string(), n),
        "outcome_found_locator": _cast_or_nulls(_child(found, "locator"), pa.string(), n),
        "outcome_source_docs": _cast_or_nulls(docs, STR_LIST, n),
        "outcome_narrative": _cast_or_nulls(_child(outcome, "narrative_answer"), pa.string(), n),
        "outcome_context": _cast_or_nulls(_context_texts(_child(outcome, "retrieved_context")), STR_LIST, n),
    }


def _context_texts(context: pa.Array | None) -> pa.Array | None:
    """``outcome.retrieved_context`` as its texts: a list of strings as it is, a list of objects as their
    ``text``; a list mixing both (or anything else) goes to the record reader."""
    if context is None or pa.types.is_null(context.type):
        return None
    if not pa.types.is_list(context.type):
        raise NotSure
    item = context.type.value_type
    if pa.types.is_string(item) or pa.types.is_null(item):
        return context
    if pa.types.is_struct(item) and item.get_field_index("text") >= 0:
        return _list_child(context, "text")
    raise NotSure


def _struct_keys(struct: pa.Array | None, n: int) -> pa.Array:
    """The keys of a JSON object column per row (null where the object is absent)."""
    if struct is None or not pa.types.is_struct(struct.type):
        return nulls(n, STR_LIST)
    as_map = _struct_to_map(struct, n)
    return pa.ListArray.from_arrays(as_map.offsets, as_map.keys, mask=struct.is_null())


_NULL = pa.null()
_SHARED_NULLS: dict[pa.DataType, pa.Array] = {}
_SHARED_ROWS = 1 << 17  # more than a 4 MiB block of the shortest lines holds


def nulls(n: int, type_: pa.DataType = _NULL) -> pa.Array:
    """``n`` nulls of ``type_``. Up to a block's rows, a slice of one all-null array kept per type: a
    field absent from a file costs nothing per block (``pa.nulls`` writes zeroed offsets or values for
    every row: over a million rows, 4 to 8 MB per absent field)."""
    if n > _SHARED_ROWS:
        return pa.nulls(n, type_)
    shared = _SHARED_NULLS.get(type_)
    if shared is None:
        shared = _SHARED_NULLS.setdefault(type_, pa.nulls(_SHARED_ROWS, type_))
    return shared.slice(0, n)


def _cast_or_nulls(arr: pa.Array | None, type_: pa.DataType, n: int) -> pa.Array:
    return nulls(n, type_) if arr is None else _cast(arr, type_)


# -- column helpers --------------------------------------------------------------------------------


def _column(table: pa.Table, name: str, type_: pa.DataType | None = None, n: int | None = None):
    """The named column as one array (cast to ``type_``), or None / all-null when absent."""
    if name not in table.column_names:
        return None if type_ is None else nulls(n, type_)
    arr = one_array(table.column(name))
    return arr if type_ is None else _cast(arr, type_)


def _cast(arr: pa.Array, type_: pa.DataType, safe: bool = True) -> pa.Array:
    if pa.types.is_null(arr.type):
        return nulls(len(arr), type_)
    return arr.cast(type_, safe=safe)


def aliased_column(table: pa.Table, names: tuple[str, ...], type_: pa.DataType) -> pa.Array:
    """Per row, the first non-null of the alias columns ``names`` (listed in order of precedence); all
    null when none is present."""
    return _coalesce(type_, table.num_rows, *[_column(table, name) for name in names])


def _coalesce(type_: pa.DataType, n: int, *arrays: pa.Array | None) -> pa.Array:
    present = [_cast(arr, type_) for arr in arrays if arr is not None]
    if not present:
        return nulls(n, type_)
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
    values = nulls(len(lists.values), pa.string()) if values is None else _cast(values, pa.string())
    return pa.ListArray.from_arrays(lists.offsets, values, mask=lists.is_null())


def _non_null_lists(arr: pa.Array | None, n: int) -> pa.Array:
    if arr is None:
        return empty_lists(n)
    arr = _cast(arr, STR_LIST)
    return arr if arr.null_count == 0 else pc.coalesce(arr, empty_lists(n))


def _embedded_citations(text: pa.Array) -> pa.Array:
    """``citations: [a, b]`` inside text answers, as lists; null where the text has none."""
    pattern = EMBEDDED_CITATIONS.replace(r"\[(", r"\[(?P<ids>", 1)  # name the group extract_regex returns
    found = pc.struct_field(pc.extract_regex(text, pattern), "ids")
    tokens = pc.split_pattern_regex(found, EMBEDDED_SEPARATORS)
    values, rows = flat(tokens)
    keep = np.asarray(pc.greater(pc.utf8_length(values), 0))
    return lists_from_rows(values.filter(pa.array(keep)), rows[keep], len(text), tokens.is_null())


def _ledger_field(ledger: pa.Array, name: str) -> pa.Array:
    """One field of every claim of the canonical ledger, as a list per row (null without a ledger)."""
    return pa.ListArray.from_arrays(
        ledger.offsets, pc.struct_field(ledger.values, name), mask=ledger.is_null()
    )

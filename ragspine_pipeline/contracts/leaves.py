"""What the typed fast read (``contracts.fast``) does with each value DuckDB hands it: the plan of a
model's input names, and each JSON leaf checked as its model field validates it and converted to the
typed structure the canonical statements read (``shape.typed_structure``), column by column.

A text is a JSON string, a flag ``true`` or ``false``, a number finite, an integer within int64, a
literal one of its values, an id a string or an integer, a required field given, a list item not null.
Anything else raises :class:`CannotVouch`: the record reader reads the file and names the line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal, get_args, get_origin

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from ragspine_pipeline.contracts import shape
from ragspine_pipeline.contracts.types import calendar_date, id_to_str


class CannotVouch(Exception):
    """A value the fast read cannot vouch for: the record reader reads the file."""


# -- the plan: what is read, and how each leaf is checked and typed ------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    inner: Any
    metadata: tuple
    required: bool
    as_object: bool = True  # a model-or-text field read as its model (the sniff saw an object, or nothing)


def plan(model: type[BaseModel], seen: dict | None = None) -> list[Field]:
    """Every input name of ``model``; ``seen`` (the sniffed shape) decides how a field that takes an
    object or a text is read."""
    fields = []
    for name, field_kind, inner, metadata, required in shape.model_fields(model):
        sniffed = (seen or {}).get(name)
        as_object = sniffed is None or isinstance(sniffed, dict)
        fields.append(Field(name, field_kind, inner, tuple(metadata), required, as_object))
    return fields


def typed_schema(read: list[Field]) -> pa.Schema:
    typed = [pa.field(name, type_) for field in read for name, type_ in _typed_columns(field, None)]
    return pa.schema([pa.field("_line", pa.bool_()), *typed])


def typed_batch(batch: pa.RecordBatch, read: list[Field]) -> pa.RecordBatch:
    # ``_line``: a column even for lines that give no field the model declares (``{}``).
    arrays, names = [pa.nulls(batch.num_rows, pa.bool_())], ["_line"]
    for field in read:
        for name, array in _typed_columns(field, batch.column(field.name)):
            names.append(name)
            arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _typed_columns(field: Field, array: pa.Array | None):
    """``(name, typed array)`` of one read field (``array`` None: ``(name, type)``); a model-or-text
    field gives two columns, ``name`` and ``name_text``."""
    if field.kind != shape.MODEL_OR_TEXT:
        yield field.name, _convert(field, array) if array is not None else _arrow_type(field)
        return
    model_type = _model_type(field.inner)
    if array is None:
        yield field.name, model_type
        yield f"{field.name}_text", pa.string()
    elif field.as_object:
        yield field.name, _convert(field, array)
        yield f"{field.name}_text", pa.nulls(len(array), pa.string())
    else:
        yield field.name, pa.nulls(len(array), model_type)
        yield f"{field.name}_text", _strings(array)


# -- checking and typing leaves ---------------------------------------------------------------------------


def _arrow_type(field: Field) -> pa.DataType:
    return _arrow(shape.typed(field.kind, field.inner))


def _model_type(model: type[BaseModel]) -> pa.DataType:
    return _arrow(shape.typed_structure(model))


_ARROW_SCALARS = {
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "JSON": pa.string(),  # kept as its JSON text
    "MAP(VARCHAR, VARCHAR)": pa.map_(pa.string(), pa.string()),
}


def _arrow(structure: Any) -> pa.DataType:
    """A type in ``shape.typed_structure``'s JSON form as the Arrow type the fast read produces."""
    if isinstance(structure, dict):
        return pa.struct([pa.field(name, _arrow(child)) for name, child in structure.items()])
    if isinstance(structure, list):
        return pa.list_(_arrow(structure[0]))
    return _ARROW_SCALARS[structure]


def _convert(field: Field, array: pa.Array) -> pa.Array:
    """One field's JSON-leaf array checked and typed (raises CannotVouch)."""
    kind_ = field.kind
    if kind_ in (shape.MODEL, shape.MODEL_OR_TEXT):
        return _convert_model(field.inner, array)
    if kind_ == shape.MODELS:
        offsets, values = _items(array)
        return _relist(array, offsets, _convert_model(field.inner, values))
    if kind_ == shape.TEXTS:
        offsets, values = _items(array)
        return _relist(array, offsets, _text(values, field))
    if kind_ == shape.JSONS:
        offsets, values = _items(array)
        _require(pc.all(pc.starts_with(values.cast(pa.string()), '"')), "an item that is not a text")
        return _relist(array, offsets, values.cast(pa.string()))
    if kind_ in (shape.MAP, shape.PAIRS):
        return _convert_map(field, array)
    if kind_ == shape.TEXT:
        return _text(array, field)
    if kind_ == shape.FLAG:
        texts = array.cast(pa.string())
        _require(pc.all(pc.is_in(texts.drop_null(), pa.array(["true", "false"]))), "not a flag")
        return pc.equal(texts, "true")
    if kind_ == shape.INTEGER:
        return _integer(array)
    if kind_ == shape.NUMBER:
        return _number(array)
    return _json_value(array, field)


def _require(ok: pa.Scalar | bool, why: str) -> None:
    value = ok.as_py() if isinstance(ok, pa.Scalar) else ok
    if value is False:
        raise CannotVouch(why)


def _items(lists: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """``(offsets from 0, items)`` of a list column; a null item is the record reader's (a list holds
    values)."""
    offsets = np.asarray(lists.offsets)
    start, end = int(offsets[0]), int(offsets[-1])
    values = lists.values.slice(start, end - start)
    _require(values.null_count == 0, "a null item")
    return offsets - start, values


def _relist(lists: pa.Array, offsets: np.ndarray, values: pa.Array) -> pa.Array:
    mask = lists.is_null() if lists.null_count else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, mask=mask)


def _convert_model(model: type[BaseModel], array: pa.Array) -> pa.Array:
    valid = array.is_valid()
    names, children = [], []
    for index, field in enumerate(plan(model)):
        child = array.field(index)
        if field.required and child.null_count:
            _require(pc.all(pc.or_(pc.invert(valid), child.is_valid())), "a required field missing")
        for name, typed in _typed_columns(field, child):
            names.append(name)
            children.append(typed)
    mask = pc.invert(valid) if array.null_count else None
    return pa.StructArray.from_arrays(children, names=names, mask=mask)


def _strings(array: pa.Array) -> pa.Array:
    """JSON texts that are all strings (else CannotVouch), as the strings they write: the quotes cut
    off (a valid UTF-8 text less its first and last byte, both quotes, is valid UTF-8), the few values
    with an escape decoded by Python's JSON."""
    texts = array.cast(pa.string())
    _require(pc.all(pc.starts_with(texts, '"')), "not a text")  # a string's JSON text starts with a quote
    plain = pc.binary_slice(texts.cast(pa.binary()), 1, -1).view(pa.string())
    _, offsets_buffer, data_buffer = texts.buffers()
    if data_buffer is None or len(texts) == 0:
        return plain
    offsets = np.frombuffer(offsets_buffer, np.int32)[texts.offset : texts.offset + len(texts) + 1]
    data = memoryview(data_buffer)[offsets[0] : offsets[-1]]
    if _BACKSLASH.search(data) is None:  # no escape anywhere (a search at memory speed)
        return plain
    at = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\\")) + offsets[0]
    escaped = np.zeros(len(texts), dtype=bool)
    escaped[np.searchsorted(offsets, at, side="right") - 1] = True
    escaped = pa.array(escaped)
    decoded = pa.array([json.loads(text) for text in texts.filter(escaped).to_pylist()], pa.string())
    return pc.replace_with_mask(plain, escaped, decoded)


_BACKSLASH = re.compile(rb"\\")


_INTEGER = r"^(0|-?[1-9][0-9]{0,18})$"


def _text(array: pa.Array, field: Field) -> pa.Array:
    """A text field: JSON strings (an id may also be an integer, read as its decimal text; a tag value
    that is a number or a flag is the record reader's, which writes it as Python does)."""
    texts = array.cast(pa.string())
    if any(getattr(m, "func", None) is id_to_str for m in field.metadata):
        is_string = pc.fill_null(pc.starts_with(texts, '"'), True)
        if not pc.all(is_string).as_py():
            # Within int64: anything longer is the record reader's, which reads it exactly.
            integer = pc.match_substring_regex(texts, _INTEGER)
            _require(pc.all(pc.or_(is_string, integer)), "an id that is neither a text nor an integer")
            strings = _strings(pc.if_else(is_string, texts, pa.scalar(None, pa.string())))
            return pc.if_else(is_string, strings, texts)
    values = _strings(texts)
    if get_origin(field.inner) is Literal:
        allowed = pa.array([str(v) for v in get_args(field.inner)], pa.string())
        _require(pc.all(pc.is_in(values.drop_null(), allowed)), "not one of the allowed values")
    return values


def _integer(array: pa.Array) -> pa.Array:
    texts = array.cast(pa.string())
    _require(pc.all(pc.match_substring_regex(texts, _INTEGER)), "not an integer")
    try:
        return texts.cast(pa.int64())
    except pa.ArrowInvalid:  # past int64
        raise CannotVouch("an integer past int64") from None


_NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$"


def _number(array: pa.Array) -> pa.Array:
    texts = array.cast(pa.string())
    _require(pc.all(pc.match_substring_regex(texts, _NUMBER)), "not a number")
    try:
        numbers = texts.cast(pa.float64())
    except pa.ArrowInvalid:
        raise CannotVouch("not a number") from None
    _require(pc.all(pc.is_finite(numbers)), "not finite")
    return numbers


def _json_value(array: pa.Array, field: Field) -> pa.Array:
    """A value kept as JSON (a union of scalars, a date): checked by the model's own validation of each
    distinct value (few: event times, found values and dates repeat), kept as the JSON text."""
    texts = array.cast(pa.string())
    distinct = pc.unique(texts.drop_null())
    if len(distinct) > 4096:
        # Many distinct values: vouch only for strings and finite numbers (an event time, a found value).
        _require(field.inner is not date, "many distinct dates")
        number = pc.match_substring_regex(distinct, _NUMBER)
        _require(pc.all(pc.or_(pc.starts_with(distinct, '"'), number)), "neither a text nor a number")
        numbers = pc.if_else(number, distinct, pa.scalar(None, pa.string()))
        try:
            finite = pc.is_finite(numbers.cast(pa.float64()))
        except pa.ArrowInvalid:
            raise CannotVouch("not a number") from None
        _require(pc.all(finite), "not finite")
        return texts
    for text in distinct.to_pylist():
        _check_value(json.loads(text), field)
    return texts


def _check_value(value: Any, field: Field) -> None:
    """One distinct value of a JSON-kept field, as the model reads it."""
    if field.inner is date:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise CannotVouch("not a date")
        try:
            calendar_date(value)
        except Exception:
            raise CannotVouch("not a calendar date") from None
        return
    if isinstance(value, bool) or value is None:
        raise CannotVouch("a flag")
    if isinstance(value, float) and not np.isfinite(value):
        raise CannotVouch("not finite")
    if isinstance(value, int) and len(str(abs(value))) > 4300:
        raise CannotVouch("too many digits")
    if not isinstance(value, (str, int, float)):
        raise CannotVouch("not a scalar")


def _convert_map(field: Field, array: pa.Array) -> pa.Array:
    """A JSON object read as a map: values texts (a null value: absent); a map drops null entries, pairs
    keep them (``versions``: a key given with null is written, not given)."""
    keys, items = array.keys, array.items
    offsets = np.asarray(array.offsets)
    start, end = int(offsets[0]), int(offsets[-1])
    keys, items = keys.slice(start, end - start), items.slice(start, end - start)
    offsets = offsets - start
    values = _strings(items)
    mask = array.is_null() if array.null_count else None
    if field.kind == shape.PAIRS:
        pairs = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pairs, mask=mask)
    kept = np.asarray(values.is_valid(), dtype=bool)
    if not kept.all():
        offsets = np.concatenate(([0], np.cumsum(kept)))[offsets]
        keys, values = keys.filter(pa.array(kept)), values.filter(pa.array(kept))
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys, values, mask=mask)

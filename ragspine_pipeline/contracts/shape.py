"""What a contract model says about JSON, derived for DuckDB: the structure to read a line into, and the
SQL test that a read value validates as the model.

The pydantic models (``GoldCase``, ``Trace``, ``EvidenceChunk``, …) are the one declaration of a record:
its fields, their types and aliases. From a model this module derives

* :func:`structure`: the DuckDB type a line is read into: nested models become ``STRUCT`` columns (one
  child per input name, aliases included), every other value stays ``JSON`` (its text and its JSON type
  kept), so that no value is converted on the way in: DuckDB casts leniently (``5`` into a text column
  reads as ``"5"``), the contract does not;
* :func:`conforms`: a SQL expression that is true where every field of a read value would pass the
  model's validation of that field: the JSON type each annotation admits (``json_type``), finiteness,
  literal sets, calendar dates, item types, and the fields a nested model requires. An annotation this
  derivation does not know is "not sure" (false), never a guess: the record reader then decides.

A false costs time, never correctness: the loader hands the file to the record-by-record reader, which
validates with the model itself and names the line of any error.
"""

from __future__ import annotations

import json
import types
from datetime import date
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ragspine_pipeline.contracts.types import id_to_str

__all__ = ["conforms", "field_aliases", "flat_structure", "json_structure", "structure", "text"]

_NUMBER = ("BIGINT", "UBIGINT", "DOUBLE")


def field_aliases(model: type[BaseModel], name: str) -> tuple[str, ...]:
    """The input names of a model field, in precedence order."""
    field = model.model_fields[name]
    alias = field.validation_alias
    if alias is None:
        return (name,)
    if isinstance(alias, str):
        return (alias,)
    return tuple(str(choice) for choice in alias.choices)


def _unwrap(annotation: Any, metadata: list[Any] | None = None) -> tuple[Any, list[Any]]:
    """(inner annotation, its metadata): strips ``Annotated`` and ``| None`` (null means absent)."""
    metadata = list(metadata or [])
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *extra = get_args(annotation)
            # A Field(...) inside Annotated carries its constraints (ge, lt, …) as metadata of its own.
            extra = [item for m in extra for item in (m.metadata if isinstance(m, FieldInfo) else [m])]
            annotation, metadata = base, [*metadata, *extra]
        elif origin in (Union, types.UnionType) and type(None) in get_args(annotation):
            args = [a for a in get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 - built at run time
        else:
            return annotation, metadata


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _list_item(annotation: Any) -> Any | None:
    return get_args(annotation)[0] if get_origin(annotation) is list else None


# -- the structure a line is read into ------------------------------------------------------------------


def _fields(model: type[BaseModel]) -> list[tuple[str, Any]]:
    """Every input name of the model with its field's annotation (aliases in precedence order)."""
    return [
        (alias, field) for name, field in model.model_fields.items() for alias in field_aliases(model, name)
    ]


def structure(model: type[BaseModel]) -> dict[str, str]:
    """``{input name: DuckDB type}`` for ``read_json(columns=…)``: every name the model reads (the shape
    of :func:`json_structure`, in DuckDB's type syntax)."""
    return {key: _duck_type(shape) for key, shape in _json_shape(model).items()}


def _duck_type(shape: Any) -> str:
    if isinstance(shape, dict):
        return f"STRUCT({', '.join(f'{_quote(key)} {_duck_type(child)}' for key, child in shape.items())})"
    if isinstance(shape, list):
        return f"{_duck_type(shape[0])}[]"
    return shape


def flat_structure(model: type[BaseModel], given: frozenset[str] | None = None) -> str:
    """The JSON form of a structure that reads every field of ``model`` as a JSON value (nested models
    and lists unparsed): a value of the wrong shape then stays visible to :func:`conforms` instead of
    being read leniently (``from_json`` reads ``"text"`` as an object with null fields). ``given``: only
    these input names (the others are known to be absent)."""
    return json.dumps({key: "JSON" for key, _ in _fields(model) if given is None or key in given})


def json_structure(model: type[BaseModel]) -> str:
    """The structure a line is read into, in the JSON form ``from_json(text, structure)`` takes (a key
    absent from a value reads as null, as in ``read_json``): nested models as objects (one key per
    input name, aliases included), lists of models as lists, every other value ``JSON`` (its text and
    its JSON type kept, so that nothing is converted on the way in)."""
    return json.dumps(_json_shape(model))


def _json_shape(annotation: Any) -> Any:
    inner, _ = _unwrap(annotation)
    if _is_model(inner):
        return {key: _json_shape(field.annotation) for key, field in _fields(inner)}
    item = _list_item(inner)
    if item is not None:
        item_inner, _ = _unwrap(item)
        return [_json_shape(item_inner) if _is_model(item_inner) else "JSON"]
    return "JSON"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- the test that a read value validates ----------------------------------------------------------------


def conforms(
    model: type[BaseModel],
    skip_required: tuple[str, ...] = (),
    flat: bool = False,
    given: frozenset[str] | None = None,
) -> str:
    """SQL: true where every field of the value read as ``model`` (the query's own columns) would pass
    the model's validation. A required field in ``skip_required`` may be absent (the caller derives it
    when it can, and leaves the rest to the record reader). ``flat``: the columns were read with
    :func:`flat_structure` (every field a JSON value), else with :func:`structure`. ``given``: only these
    input names occur (the test of an absent field is left out, a required one is missing)."""
    return _model_conforms(model, _quote, None, not flat, 0, skip_required, given)


def _model_conforms(
    model: type[BaseModel],
    child,
    whole: str | None,
    stored: bool,
    depth: int,
    skip_required: tuple[str, ...] = (),
    given: frozenset[str] | None = None,
) -> str:
    """SQL: every field of a model value conforms and every required one is given. ``child(key)`` is the
    SQL of the field ``key``; ``whole`` the value itself (None: the query's row, always present);
    ``given``: the only keys that occur, when known."""
    tests = []
    for name, field in model.model_fields.items():
        aliases = [alias for alias in field_aliases(model, name) if given is None or alias in given]
        for alias in aliases:
            tests.append(_conforms(child(alias), field.annotation, list(field.metadata), stored, depth))
        if field.is_required() and name not in skip_required:
            present = " OR ".join(_given(child(alias), stored) for alias in aliases) or "false"
            tests.append(f"({present})" if whole is None else f"({whole} IS NULL OR {present})")
    return " AND ".join(f"({t})" for t in tests if t != "true") or "true"


def _given(value: str, stored: bool) -> str:
    """SQL: the value is given (not absent, not null). A JSON value at a path is JSON ``null`` when the
    key holds null; a value the structure reads is SQL NULL then."""
    return f"{value} IS NOT NULL" if stored else f"coalesce(json_type({value}) <> 'NULL', false)"


def _conforms(value: str, annotation: Any, metadata: list[Any], stored: bool, depth: int) -> str:
    """SQL: ``value`` is absent (null) or validates as ``annotation``. ``stored``: the value is held as
    the structure reads it (STRUCT for a model, a list for a list); else it is a JSON value."""
    inner, metadata = _unwrap(annotation, metadata)
    test = _test(value, inner, metadata, stored, depth)
    return "true" if test == "true" else f"NOT ({_given(value, stored)}) OR ({test})"


def _test(value: str, inner: Any, metadata: list[Any], stored: bool, depth: int) -> str:
    origin = get_origin(inner)
    if inner is Any:
        return "true"
    if origin in (Union, types.UnionType):  # e.g. Answer | str: one branch per JSON type
        branches = (_test(value, *_unwrap(branch), stored=False, depth=depth) for branch in get_args(inner))
        return " OR ".join(f"({branch})" for branch in branches)
    if _is_model(inner):
        if stored:
            return _model_conforms(inner, lambda key: f"{value}.{_quote(key)}", value, True, depth)
        # A model held as JSON (inside a union, or in a flat read) is read once into its fields, each a
        # JSON value (bound to a name by a one-item list), and no key may be given twice (JSON keeps
        # its last value; a read finds the first).
        fields = f"from_json({value}, '{flat_structure(inner)}')"
        name = f"m{depth}"
        inside = _model_conforms(inner, lambda key: f"{name}.{_quote(key)}", None, False, depth + 1)
        bound = f"[{inside} FOR {name} IN [{fields}]][1]"
        return f"json_type({value}) = 'OBJECT' AND {_distinct_keys(value)} AND {bound}"
    item_name = f"e{depth}"
    if origin is list:
        (item,) = get_args(inner)
        item_inner, item_metadata = _unwrap(item)
        item_stored = stored and _is_model(item_inner)
        each = _test(item_name, item_inner, item_metadata, item_stored, depth + 1)
        if stored:
            items, array = value, ""
        else:
            items = f"CASE WHEN json_type({value}) = 'ARRAY' THEN CAST({value} AS JSON[]) END"
            array = f"json_type({value}) = 'ARRAY' AND "
        # A list item may not be null (pydantic rejects None in list[str]), whatever its type: every test
        # but "any value" starts from the item's JSON type (or its STRUCT), which a null does not have.
        item_ok = _given(item_name, item_stored) if each == "true" else f"coalesce({each}, false)"
        if item_stored:
            item_ok = f"{item_name} IS NOT NULL AND {item_ok}"
        return f"{array}coalesce(list_bool_and([{item_ok} FOR {item_name} IN {items}]), true)"
    if origin is dict:
        key_type, value_type = get_args(inner)
        if key_type is not str:
            return "false"
        value_inner, value_metadata = _unwrap(value_type)
        each = _test(item_name, value_inner, value_metadata, False, depth + 1)
        # JSON null values are dropped (null means absent); the others validate as the value type. A
        # key given twice is the record reader's (JSON keeps its last value; SQL paths find the first).
        entries = f"CASE WHEN json_type({value}) = 'OBJECT' THEN {value} -> '$.*' END"
        items = (
            f"coalesce(list_bool_and([json_type({item_name}) = 'NULL' OR ({each}) "
            f"FOR {item_name} IN {entries}]), true)"
        )
        return f"json_type({value}) = 'OBJECT' AND {_distinct_keys(value)} AND {items}"
    return _scalar(value, inner, metadata)


def _scalar(value: str, inner: Any, metadata: list[Any]) -> str:
    kind = f"json_type({value})"
    if inner is str:
        if any(getattr(m, "func", None) is id_to_str for m in metadata):
            return f"{kind} IN ('VARCHAR', 'BIGINT', 'UBIGINT')"  # an id: a name, or an integer
        # A text as written. A value the model reads as text (a tag value 2025 -> "2025", by Python's
        # str()) is the record reader's to convert.
        return f"{kind} = 'VARCHAR'"
    if inner is bool:
        return f"{kind} = 'BOOLEAN'"
    if inner is int:  # DuckDB types a JSON integer BIGINT, or UBIGINT when it is not negative
        number = f"TRY_CAST({value} AS HUGEINT)"
        bounds = [
            f"{number} {op} {getattr(m, name)}"
            for m in metadata
            for name, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
            if getattr(m, name, None) is not None
        ]
        return " AND ".join([f"{kind} IN ('BIGINT', 'UBIGINT')", *bounds])
    if inner is float:
        finite = any(getattr(m, "allow_inf_nan", True) is False for m in metadata)
        numbers = f"{kind} IN {_NUMBER}"
        return f"{numbers} AND isfinite(TRY_CAST({value} AS DOUBLE))" if finite else numbers
    if inner is date:  # a calendar date, YYYY-MM-DD or YYYYMMDD (text or number): types.IsoDate
        text_ = text(value)
        return (
            f"(({kind} = 'VARCHAR' AND regexp_full_match({text_}, '\\d{{4}}-\\d{{2}}-\\d{{2}}') "
            f"AND try_strptime({text_}, '%Y-%m-%d') IS NOT NULL) OR ({kind} IN ('VARCHAR', 'BIGINT', "
            f"'UBIGINT') AND regexp_full_match({text_}, '\\d{{8}}') "
            f"AND try_strptime({text_}, '%Y%m%d') IS NOT NULL))"
        )
    if get_origin(inner) is Literal:
        allowed = ", ".join("'" + str(v).replace("'", "''") + "'" for v in get_args(inner))
        return f"{kind} = 'VARCHAR' AND {text(value)} IN ({allowed})"
    return "false"  # an annotation this derivation does not know: the record reader decides


def _distinct_keys(value: str) -> str:
    return f"[len(k) = len(list_distinct(k)) FOR k IN [json_keys({value})]][1]"


# -- reading values back ---------------------------------------------------------------------------------


def text(value: str) -> str:
    """SQL: a JSON value as text: a string unescaped, a number or flag as written (``->>``)."""
    return f"({value} ->> '$')"


# -- the typed structure: what both readers hand the canonical statements ----------------------------------
#
# Each field of a model is one of a few kinds; the kind says the DuckDB type the canonical statements
# read it as (``typed_structure``) and what the fast read (``contracts.fast``) must check of its JSON text
# before it converts it to that type. A field whose value may take several JSON types that matter later
# (an event time, a found value, a reference date) stays JSON, checked.

TEXT, FLAG, INTEGER, NUMBER, JSON_VALUE = "text", "flag", "integer", "number", "json"
MODEL, MODELS, TEXTS, JSONS, MAP, PAIRS, MODEL_OR_TEXT = (
    "model",
    "models",
    "texts",
    "jsons",
    "map",
    "pairs",
    "model_or_text",
)
PAIR_FIELDS = frozenset({"versions"})
"""Maps a model also accepts as a list of ``[key, value]`` pairs, a key possibly repeated: read as pairs."""


def kind(name: str, annotation: Any) -> tuple[str, Any, list[Any]]:
    """``(kind, inner annotation, metadata)`` of a field (see the kinds above)."""
    inner, metadata = _unwrap(annotation)
    origin = get_origin(inner)
    if _is_model(inner):
        return MODEL, inner, metadata
    if origin is list:
        item, item_metadata = _unwrap(get_args(inner)[0])
        if _is_model(item):
            return MODELS, item, item_metadata
        if get_origin(item) in (Union, types.UnionType):
            return JSONS, item, item_metadata
        return TEXTS, item, item_metadata
    if origin is dict:
        return (PAIRS if name in PAIR_FIELDS else MAP), get_args(inner)[1], metadata
    if origin in (Union, types.UnionType):
        branches = get_args(inner)
        if any(_is_model(branch) for branch in branches):
            return MODEL_OR_TEXT, next(b for b in branches if _is_model(b)), metadata
        return JSON_VALUE, inner, metadata
    if inner is bool:
        return FLAG, inner, metadata
    if inner is int:
        return INTEGER, inner, metadata
    if inner is float:
        return NUMBER, inner, metadata
    if inner is date:
        return JSON_VALUE, inner, metadata
    return TEXT, inner, metadata  # str, an id, a tag text, a literal


def model_fields(model: type[BaseModel]) -> list[tuple[str, str, Any, list[Any], bool]]:
    """``(input name, kind, inner annotation, metadata, required)`` of every input name of ``model``."""
    out = []
    for name, field in model.model_fields.items():
        field_kind, inner, metadata = kind(name, field.annotation)
        metadata = [*metadata, *field.metadata]
        for alias in field_aliases(model, name):
            out.append((alias, field_kind, inner, metadata, field.is_required()))
    return out


def typed_structure(model: type[BaseModel]) -> dict[str, Any]:
    """``{input name: type}`` in the JSON form ``from_json`` takes: the relation the canonical statements
    read. A field that takes a model or a text is two columns: ``name`` (the model) and ``name_text``."""
    out: dict[str, Any] = {}
    for name, field_kind, inner, _, _ in model_fields(model):
        out[name] = typed(field_kind, inner)
        if field_kind == MODEL_OR_TEXT:
            out[f"{name}_text"] = "VARCHAR"
    return out


_SCALAR_TYPES = {TEXT: "VARCHAR", FLAG: "BOOLEAN", INTEGER: "BIGINT", NUMBER: "DOUBLE", JSON_VALUE: "JSON"}


def typed(field_kind: str, inner: Any) -> Any:
    """The type a field of ``field_kind`` is read as, in the JSON form ``from_json`` takes."""
    if field_kind in _SCALAR_TYPES:
        return _SCALAR_TYPES[field_kind]
    if field_kind in (MODEL, MODEL_OR_TEXT):
        return typed_structure(inner)
    if field_kind == MODELS:
        return [typed_structure(inner)]
    if field_kind == TEXTS:
        return ["VARCHAR"]
    if field_kind == JSONS:
        return ["JSON"]
    if field_kind == MAP:
        return "MAP(VARCHAR, VARCHAR)"
    return [{"key": "VARCHAR", "value": "VARCHAR"}]  # PAIRS


def duck_type(structure: Any) -> str:
    """A structure in the JSON form (:func:`typed_structure`) as a DuckDB type."""
    return _duck_type(structure)

"""Does a column read by pyarrow certainly validate against a contract model?

The columnar reader infers Arrow types from JSON. Before its columns are trusted, every known field is
checked against the pydantic annotation that would validate it record by record. The check is
conservative: ``True`` means every value in the column would pass the model's validation of that field;
``False`` means "not sure" and sends the file to the record-by-record reader, which then either names
the offending line or loads the file. A ``False`` therefore costs time, never correctness.
"""

from __future__ import annotations

import types
from datetime import date
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from ragspine_pipeline.columnar import one_array
from ragspine_pipeline.contracts.types import id_to_str


def field_aliases(model: type[BaseModel], name: str) -> tuple[str, ...]:
    """The input names of a model field, in precedence order."""
    field = model.model_fields[name]
    alias = field.validation_alias
    if alias is None:
        return (name,)
    if isinstance(alias, str):
        return (alias,)
    return tuple(str(choice) for choice in alias.choices)


def table_conforms(table: pa.Table, model: type[BaseModel], skip: tuple[str, ...] = ()) -> bool:
    """Every column of ``table`` that names a field of ``model`` conforms to that field.

    Required fields are not checked for presence here (the canonicalisation does that, alias-aware);
    fields in ``skip`` are left to the caller, which validates them itself.
    """
    columns = {
        name: one_array(column) for name, column in zip(table.column_names, table.columns, strict=True)
    }
    return _fields_conform(columns, model, parent_valid=None, check_required=False, skip=skip)


def _fields_conform(
    children: dict[str, pa.Array],
    model: type[BaseModel],
    parent_valid: pa.Array | None,
    check_required: bool,
    skip: tuple[str, ...] = (),
) -> bool:
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        present = [children[a] for a in field_aliases(model, name) if a in children]
        if not all(_array_conforms(arr, field.annotation, field.metadata) for arr in present):
            return False
        if check_required and field.is_required() and not _always_present(present, parent_valid):
            return False
    return True


def _always_present(arrays: list[pa.Array], parent_valid: pa.Array | None) -> bool:
    if not arrays:
        return parent_valid is not None and not pc.any(parent_valid).as_py()
    valid = arrays[0].is_valid()
    for arr in arrays[1:]:
        valid = pc.or_(valid, arr.is_valid())
    missing = pc.invert(valid) if parent_valid is None else pc.and_(parent_valid, pc.invert(valid))
    return not pc.any(missing).as_py()


def _unwrap(annotation: Any, metadata: list[Any]) -> tuple[Any, list[Any], bool]:
    """(inner annotation, its metadata, nullable): strips ``Annotated`` and ``| None``."""
    nullable = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *extra = get_args(annotation)
            annotation, metadata = base, [*metadata, *extra]
        elif origin in (Union, types.UnionType) and type(None) in get_args(annotation):
            args = [a for a in get_args(annotation) if a is not type(None)]
            nullable = True
            annotation = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 - built at run time
        else:
            return annotation, metadata, nullable


def _is_id(annotation: Any, metadata: list[Any]) -> bool:
    return annotation is str and any(getattr(m, "func", None) is id_to_str for m in metadata)


def _is_string(arr: pa.Array) -> bool:
    return pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)


def _array_conforms(arr: pa.Array, annotation: Any, metadata: list[Any] | None = None) -> bool:
    """Every non-null value of ``arr`` would validate as ``annotation`` (nulls mean "absent")."""
    if pa.types.is_null(arr.type):
        return True
    inner, metadata, _ = _unwrap(annotation, list(metadata or []))
    origin = get_origin(inner)
    if origin in (Union, types.UnionType):  # e.g. Answer | str: the Arrow type picks the branch
        return any(_array_conforms(arr, branch) for branch in get_args(inner))
    if _is_id(inner, metadata):
        return _is_string(arr) or pa.types.is_integer(arr.type)
    if inner is Any:
        return True
    if inner is str:
        return _is_string(arr)
    if inner is bool:
        return pa.types.is_boolean(arr.type)
    if inner is float:
        if pa.types.is_integer(arr.type):
            return True
        # pyarrow's parser reads NaN and Infinity; a FiniteFloat field must not see them.
        finite_only = any(getattr(m, "allow_inf_nan", True) is False for m in metadata)
        return pa.types.is_floating(arr.type) and (not finite_only or _all_finite(arr))
    if inner is int:
        return pa.types.is_integer(arr.type)
    if inner is date:
        return _is_string(arr) and _all_iso_dates(arr)
    if origin is Literal:
        if not _is_string(arr):
            return False
        allowed = pa.array([str(v) for v in get_args(inner)], type=arr.type)
        return pc.all(pc.is_in(arr.drop_null(), value_set=allowed)).as_py() is not False
    if origin is list:
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            return False
        values = pc.list_flatten(arr)
        (item,) = get_args(inner)
        _, _, item_nullable = _unwrap(item, [])
        return (item_nullable or values.null_count == 0) and _array_conforms(values, item)
    if origin is dict:
        key_type, value_type = get_args(inner)
        if not pa.types.is_struct(arr.type) or key_type is not str:
            return False
        # JSON objects become structs; a null child means the key is absent (the models drop nulls).
        return all(_array_conforms(pc.struct_field(arr, [i]), value_type) for i in range(arr.type.num_fields))
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        if not pa.types.is_struct(arr.type):
            return False
        children = {arr.type.field(i).name: pc.struct_field(arr, [i]) for i in range(arr.type.num_fields)}
        return _fields_conform(children, inner, parent_valid=arr.is_valid(), check_required=True)
    return False  # an annotation this checker does not know: let the record reader decide


def _all_finite(arr: pa.Array) -> bool:
    return pc.all(pc.is_finite(arr)).as_py() is not False


def _all_iso_dates(arr: pa.Array) -> bool:
    """Every value is a calendar date written YYYY-MM-DD (other forms: the record reader decides)."""
    values = arr.drop_null()
    if len(values) == 0:
        return True
    if not pc.all(pc.match_substring_regex(values, r"^\d{4}-\d{2}-\d{2}$")).as_py():
        return False
    parsed = pc.strptime(values, format="%Y-%m-%d", unit="s", error_is_null=True)
    return parsed.null_count == 0

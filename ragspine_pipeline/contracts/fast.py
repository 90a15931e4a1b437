"""The typed fast read: a JSON Lines file read by DuckDB into the columns its dialect has, each value's
JSON type checked against the model and converted to the typed structure the canonical statements read
(``shape.typed_structure``), in one pass over the file and vectorised passes over its columns.

The dialect is sniffed from the first records: which of the model's input names they use (and, for a
field that takes an object or a text, which). DuckDB reads those names with JSON leaves (a value's text
as written, its JSON type visible: DuckDB would otherwise cast ``5`` into a text column as ``"5"``); any
other name the model declares is read only to see whether a line gives it. Each leaf is then checked as
its model field validates it — a text is a JSON string, a flag ``true`` or ``false``, a number finite, an
integer within int64, a literal one of its values, an id a string or an integer, a required field given,
a list item not null — and converted to its type, column by column (``contracts.leaves``). The typed
batches stream on as DuckDB reads them (into the canonical statement, when the loader reads them).

It vouches for nothing it has not checked: a line that gives a name the sniff did not see sends the file
back for a second read that includes it; anything else it cannot vouch for — a value of another type, a
line DuckDB refuses (a repeated key, a lone surrogate, invalid UTF-8, two objects on one line) — returns
None, and the record reader (``contracts.records``) reads the file and names the line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from ragspine_pipeline import duck, inputs
from ragspine_pipeline.contracts import shape
from ragspine_pipeline.contracts.leaves import CannotVouch, Field, plan, typed_batch, typed_schema

__all__ = ["read_typed"]

_SNIFF_LINES = 1000
_SNIFF_BYTES = 1 << 20
_BATCH_ROWS = 1 << 18


# -- the dialect: which input names the first records use ----------------------------------------------


def sniff(path: Path) -> dict | None:
    """The merged shape of the first records: ``{name: child shape}`` for objects, ``[shape]`` for
    lists, ``"text"`` / ``"value"`` for strings and other scalars. None when a line does not parse (the
    record reader names it)."""
    merged: dict = {}
    with inputs.open_regular(path) as fh:
        head = fh.read(_SNIFF_BYTES)
    lines = head.split(b"\n")
    if len(head) == _SNIFF_BYTES:
        lines = lines[:-1]  # the last may be cut
    for line in lines[:_SNIFF_LINES]:
        if not line.strip():
            continue
        if len(line) > inputs.MAX_LINE_BYTES or inputs.nesting_depth(line) > inputs.MAX_DEPTH:
            return None
        try:
            value = json.loads(line)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        _merge(merged, value)
    return merged


def _merge(shape_: Any, value: Any) -> Any:
    if isinstance(value, dict):
        target = shape_ if isinstance(shape_, dict) else {}
        for key, item in value.items():
            target[key] = _merge(target.get(key), item)
        return target
    if isinstance(value, list):
        target = shape_ if isinstance(shape_, list) else [None]
        for item in value:
            target[0] = _merge(target[0], item)
        return target
    if value is None:
        return shape_
    if isinstance(value, str):
        return shape_ if shape_ is not None else "text"
    return shape_ if shape_ is not None else "value"


# -- how each planned field is read (``leaves.plan``) ------------------------------------------------------


def _read_type(field: Field) -> str:
    """The DuckDB type a field is read as (JSON leaves, so that the JSON type stays visible; a model
    with every field it declares)."""
    kind_ = field.kind
    if kind_ == shape.MODEL or (kind_ == shape.MODEL_OR_TEXT and field.as_object):
        return _struct(field.inner)
    if kind_ == shape.MODELS:
        return _struct(field.inner) + "[]"
    if kind_ in (shape.TEXTS, shape.JSONS):
        return "JSON[]"
    if kind_ in (shape.MAP, shape.PAIRS):
        return "MAP(VARCHAR, JSON)"
    return "JSON"


def _struct(model: type[BaseModel]) -> str:
    children = ", ".join(f"{_quote(field.name)} {_read_type(field)}" for field in plan(model))
    return f"STRUCT({children})"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- reading ---------------------------------------------------------------------------------------------


T = TypeVar("T")


def read_typed(
    path: Path,
    model: type[BaseModel],
    record_only: tuple[str, ...] = (),
    derived: tuple[str, ...] = (),
    consume: Callable[[pa.RecordBatchReader], T] = pa.RecordBatchReader.read_all,
    seen: dict | None = None,
) -> T | None:
    """``consume``'s result over the file's records in ``shape.typed_structure(model)`` (only the
    top-level names its dialect uses; the canonical statement's source adds the others as nulls), or
    None when the fast read cannot vouch for the file. ``record_only``: names whose rules only the model
    states (a file giving one is the record reader's); ``derived``: required fields the canonical
    statement may derive. ``seen``: the dialect as :func:`sniff` found it in an earlier file of the same
    source (the file is not sniffed again).

    The typed batches are streamed to ``consume`` as DuckDB reads them (by default gathered into one
    table): a statement over the stream holds one batch of JSON leaves and typed columns at a time,
    never the whole file in either form, and its work overlaps the read."""
    seen = sniff(path) if seen is None else seen
    if seen is None:
        return None
    for _ in range(2):  # a name first given after the sniffed lines: read once more, with it
        if any(name in seen for name in record_only):
            return None
        try:
            stream = _Stream(path, model, seen, derived)
        except CannotVouch:
            return None
        try:
            return consume(stream.reader())
        except Exception:
            if stream.stopped is None:  # not the stream's: the consumer's own error
                raise
        if not isinstance(stream.stopped, _GivenLater):
            return None
        seen = {**seen, **{name: None for name in stream.stopped.names}}
    return None


class _GivenLater(Exception):
    """Names the sniff did not see, first given by a later line: the file is read again with them."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


class _Stream:
    """The typed batches of one read; ``stopped`` is why it ended early (a consumer over the stream,
    DuckDB say, reports the stream's failure as an error of its own)."""

    def __init__(self, path: Path, model: type[BaseModel], seen: dict, derived: tuple[str, ...]) -> None:
        self.model, self.derived = model, derived
        fields = plan(model, seen)
        self.read = [f for f in fields if f.name in seen]
        self.others = [f for f in fields if f.name not in seen]
        if len(self.others) > 62:  # the names first given later are flagged in one BIGINT
            raise CannotVouch("more names than one flag word holds")
        columns = ", ".join(
            f"{duck.literal(f.name)}: {duck.literal(_read_type(f) if f.name in seen else 'JSON')}"
            for f in fields
        )
        source = (
            f"read_json({duck.literal(str(path))}, format = 'newline_delimited', records = true, "
            f"maximum_object_size = {inputs.MAX_LINE_BYTES}, columns = {{{columns}}})"
        )
        flags = " | ".join(
            f"(CASE WHEN {_quote(f.name)} IS NOT NULL THEN {1 << i} ELSE 0 END)::BIGINT"
            for i, f in enumerate(self.others)
        )
        selected = [_quote(f.name) for f in self.read] + [f"({flags or '0'}) AS _others"]
        self.sql = f"SELECT {', '.join(selected)} FROM {source}"
        self.stopped: Exception | None = None

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(typed_schema(self.read), self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            for batch in duck.batches(self.sql, _BATCH_ROWS):
                given = (
                    int(np.bitwise_or.reduce(np.asarray(batch.column("_others")))) if batch.num_rows else 0
                )
                if given:
                    raise _GivenLater([f.name for i, f in enumerate(self.others) if given >> i & 1])
                typed = typed_batch(batch, self.read)
                if not _required_given(self.model, typed, self.derived):
                    raise CannotVouch("a required field missing")
                yield typed
        except (_GivenLater, CannotVouch, *duck.REFUSED) as exc:
            self.stopped = exc
            raise


def _required_given(model: type[BaseModel], batch: pa.RecordBatch, derived: tuple[str, ...]) -> bool:
    """Whether every row gives each required field of ``model`` (under one of its names)."""
    for name, field in model.model_fields.items():
        if not field.is_required() or name in derived or batch.num_rows == 0:
            continue
        given = [batch.column(alias).is_valid() for alias in shape.field_aliases(model, name)
                 if alias in batch.column_names]  # fmt: skip
        if not given:
            return False
        present = given[0]
        for other in given[1:]:
            present = pc.or_(present, other)
        if not pc.all(present).as_py():
            return False
    return True

"""Extraction facts and ground truth: what a document parser read from a spreadsheet workbook.

Contract:

* A cell (:class:`ExtractionCell`) is ``{sheet, cell_ref, value, tags, merge_span, …}``; other keys are
  allowed and carried. ``sheet`` is a non-blank string. ``cell_ref`` is an A1-style reference matching
  ``^[A-Z]{1,3}[1-9][0-9]*$``: upper-case column letters only (``b4`` is rejected, not upper-cased, as
  are ``$B$4`` and ``A0``). ``value`` is a JSON scalar (string, finite number, boolean); ``tags`` a JSON
  object or array; ``merge_span`` a JSON array (a Python tuple is read as a list, recursively). Null
  and absent mean the same: the field was not extracted. Numbers nested in tags and spans must be finite.
* A cell's key is ``"{sheet}!{cell_ref}"`` (:attr:`ExtractionCell.key`); ``cell_ref`` never holds ``!``
  so the key is unambiguous.
* Facts (:func:`load_facts`) are JSON Lines, read tolerantly: a line that is not JSON, not an object,
  or not a valid cell is quarantined — reported as one ``file:line: field 'x': message`` line and left
  out of every score — and the rest are read. Blank lines are skipped. When several lines have the
  same key, the last one wins and the earlier ones are counted as duplicates. Only a file that cannot
  be opened at all is fatal.
* Ground truth (:func:`load_truth`) is curated, so it is read strictly: a JSON array of cells or an
  object ``{"cells": [...]}`` (other top-level keys are allowed). An unreadable file, malformed JSON,
  an invalid cell, or two cells with the same key raise :class:`InputError` naming the file and the
  cell (``cells[i]``, 0-based, for an invalid cell; the key for a duplicate).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, field_validator, model_validator

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.types import MODEL_CONFIG, drop_nulls
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.jsonvalues import json_type

CELL_REF = re.compile(r"[A-Z]{1,3}[1-9][0-9]*")


class ExtractionCell(BaseModel):
    """One cell of a workbook, as extracted (a fact) or as curated (ground truth)."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    sheet: str
    cell_ref: str
    value: Any = None
    tags: Any = None
    merge_span: Any = None

    @property
    def key(self) -> str:
        return f"{self.sheet}!{self.cell_ref}"

    @field_validator("sheet", mode="before")
    @classmethod
    def _sheet_named(cls, sheet: Any) -> str:
        if not isinstance(sheet, str):
            raise ValueError(f"must be a string, got {json_type(sheet)}")
        if not sheet.strip():
            raise ValueError("must not be empty")
        return sheet

    @field_validator("cell_ref", mode="before")
    @classmethod
    def _a1_reference(cls, ref: Any) -> str:
        if not isinstance(ref, str):
            raise ValueError(f"must be a string, got {json_type(ref)}")
        if not CELL_REF.fullmatch(ref):
            raise ValueError(
                f"{json.dumps(ref, ensure_ascii=False)[:40]} is not an A1-style reference "
                "(1-3 upper-case column letters, then a row number from 1)"
            )
        return ref

    @field_validator("value", mode="before")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        if isinstance(value, list | tuple | dict):
            raise ValueError(f"must be a string, number or boolean, got {json_type(value)}")
        return json_value(value)

    @field_validator("tags", mode="before")
    @classmethod
    def _object_or_array(cls, tags: Any) -> Any:
        if not isinstance(tags, list | tuple | dict):
            raise ValueError(f"must be an object or an array, got {json_type(tags)}")
        return json_value(tags)

    @field_validator("merge_span", mode="before")
    @classmethod
    def _array(cls, span: Any) -> Any:
        if not isinstance(span, list | tuple):
            raise ValueError(f"must be an array, got {json_type(span)}")
        return json_value(span)


def json_value(value: Any) -> Any:
    """``value`` as plain JSON data (tuples become lists, recursively); ValueError if it is not JSON."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        out = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise ValueError("object keys must be strings")
            out[name] = json_value(item)
        return out
    raise ValueError(f"must be JSON data, got {type(value).__name__}")


def _first_problem(exc: ValidationError) -> tuple[str | None, str]:
    """``(field, message)`` of the first validation error, phrased for a person."""
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"]) or None
    if error["type"] == "missing":
        return field, "missing"
    message = error["msg"].removeprefix("Value error, ")
    return field, message


# -- facts ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactsLoad:
    """The usable facts of a file, keyed by cell, and what was set aside on the way."""

    path: str
    cells: dict[str, ExtractionCell]  # key -> the last valid fact for that cell
    duplicates: int  # valid lines replaced by a later line with the same key
    invalid: list[InputError]  # quarantined lines, in file order


def load_facts(path: str | Path) -> FactsLoad:
    """Read a facts JSONL file, quarantining every unusable line (see the module contract)."""
    try:
        with inputs.open_regular(path, "facts") as fh:
            return parse_facts(_capped(fh, str(path)), str(path))
    except OSError as exc:
        raise InputError(str(path), f"cannot read the facts: {exc.strerror or exc}") from None


def parse_facts(lines: Iterable[bytes | str], file: str) -> FactsLoad:
    """The facts of JSONL ``lines`` (line 1 first); ``file`` names them in error messages."""
    cells: dict[str, ExtractionCell] = {}
    duplicates = 0
    invalid: list[InputError] = []
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        cell = _fact(file, line_no, raw, invalid)
        if cell is None:
            continue
        key = cell.key
        if key in cells:
            duplicates += 1
            del cells[key]  # re-inserted below: the dict keeps the order of the winning lines
        cells[key] = cell
    return FactsLoad(path=file, cells=cells, duplicates=duplicates, invalid=invalid)


def _capped(stream, file: str) -> Iterator[bytes | InputError]:
    """The stream's lines, a line beyond the line cap replaced by the error that names it."""
    for line in inputs.iter_lines(stream):
        yield (
            InputError(file, inputs.too_long_message(line.length), line.number)
            if line.too_long
            else line.data
        )


def _fact(
    file: str, line_no: int, raw: bytes | str | InputError, invalid: list[InputError]
) -> ExtractionCell | None:
    """The line's cell, or None after recording why the line is quarantined."""
    if isinstance(raw, InputError):
        invalid.append(raw)
        return None
    try:
        data = inputs.loads(raw, file, line_no)
    except InputError as exc:
        invalid.append(exc)
        return None
    if not isinstance(data, dict):
        invalid.append(InputError(file, f"expected a JSON object, got {json_type(data)}", line_no))
        return None
    try:
        return ExtractionCell.model_validate(data)
    except ValidationError as exc:
        field, message = _first_problem(exc)
        invalid.append(InputError(file, message, line_no, field=field))
        return None


# -- ground truth ---------------------------------------------------------------------------------------


def load_truth(path: str | Path) -> dict[str, ExtractionCell]:
    """The curated cells keyed by cell, in file order; any problem is fatal (see the module contract)."""
    name = str(path)
    data = inputs.loads(inputs.read_text(path, "ground truth"), name)
    if isinstance(data, dict):
        if "cells" not in data:
            raise InputError(name, "expected a JSON array of cells or an object with 'cells'", field="cells")
        data = data["cells"]
        if not isinstance(data, list):
            raise InputError(name, f"must be an array of cells, got {json_type(data)}", field="cells")
    elif not isinstance(data, list):
        raise InputError(
            name, f"expected a JSON array of cells or an object with 'cells', got {json_type(data)}"
        )

    cells: dict[str, ExtractionCell] = {}
    first_index: dict[str, int] = {}
    for index, item in enumerate(data):
        where = f"cells[{index}]"
        if not isinstance(item, dict):
            raise InputError(name, f"expected a JSON object, got {json_type(item)}", record_id=where)
        try:
            cell = ExtractionCell.model_validate(item)
        except ValidationError as exc:
            field, message = _first_problem(exc)
            raise InputError(name, message, record_id=where, field=field) from None
        key = cell.key
        if key in cells:
            raise InputError(
                name, f"duplicate cell: {where} repeats cells[{first_index[key]}]", record_id=key
            )
        cells[key] = cell
        first_index[key] = index
    return cells

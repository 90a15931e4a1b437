"""Shared field types of the data contracts."""

from __future__ import annotations

import math
import re
from datetime import date
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, FiniteFloat, WithJsonSchema
from pydantic_core import PydanticCustomError


def id_to_str(value: Any) -> Any:
    # JSON writers sometimes emit numeric ids; an id is a name, so 17 and "17" are the same case.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


Id = Annotated[str, BeforeValidator(id_to_str)]
"""A record id: a string, or an integer read as its decimal string."""


def a_number(value: Any) -> Any:
    # pydantic's lax float reads true as 1.0 and "1702" as 1702.0: a figure that is a flag or a text is
    # a mistake in the file, not a number.
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "expected a number, not a flag")
    if isinstance(value, str):
        raise PydanticCustomError("number_type", "expected a number, not a text")
    return value


Number = Annotated[FiniteFloat, BeforeValidator(a_number)]
"""A finite JSON number (an integer reads as its float); a flag, a text, NaN or an infinity is rejected."""

_CALENDAR_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{8}")


def calendar_date(value: Any) -> Any:
    # pydantic's date also reads 0, 86400 and "20260612" as seconds since 1970. A reference date is read
    # as RAGSpine reads it, date.fromisoformat(str(value)), in its calendar forms: YYYY-MM-DD and
    # YYYYMMDD, as text or as the number 20260612 (ISO week dates, which Python 3.11 also reads, are not).
    if isinstance(value, date):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not (isinstance(value, str) and _CALENDAR_DATE.fullmatch(value)):
        raise PydanticCustomError("date_format", "expected a calendar date written YYYY-MM-DD (or YYYYMMDD)")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise PydanticCustomError("date_format", "not a calendar date") from None


IsoDate = Annotated[
    date,
    BeforeValidator(calendar_date),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date"},
                {"type": "string", "pattern": "^[0-9]{8}$"},
                {"type": "integer", "minimum": 10000101, "maximum": 99991231},
            ],
            "description": "a calendar date: YYYY-MM-DD, or YYYYMMDD as text or as a number",
        }
    ),
]
"""A calendar date written ``YYYY-MM-DD`` or ``YYYYMMDD`` (text or number), as RAGSpine reads it;
the canonical column holds it as ``YYYY-MM-DD``. Other spellings are rejected."""


_NOT_A_TAG = {dict: "an object", list: "a list", float: "NaN or an infinity"}


def tag_text(value: Any) -> Any:
    # RAGSpine reads a tag value with Python's str(): 2025 -> "2025", true -> "True", 1.5 -> "1.5".
    if isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    if type(value) in _NOT_A_TAG:
        kind = _NOT_A_TAG[type(value)]
        raise PydanticCustomError(
            "tag_value", "a tag value is a text, a finite number or a flag, not {kind}", {"kind": kind}
        )
    return value


TagText = Annotated[
    str,
    BeforeValidator(tag_text),
    WithJsonSchema({"type": ["string", "number", "boolean", "null"]}),
]
"""A golden case's tag value: a text, or a finite number or flag read as Python's ``str()`` writes it
(``"2025"``, ``"True"``, ``"1.5"``), as RAGSpine reads it; an object, a list or a non-finite number is
rejected (null is absent: no tag)."""

QUESTION_ALIASES = ("question", "q")

# Every contract model accepts fields it does not know (dialects carry extras such as `ok` or `notes`)
# and treats an explicit JSON null like an absent key, so that aliases resolve to the first value given.
MODEL_CONFIG = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


def drop_nulls(data: Any) -> Any:
    """Before-validator body: remove null-valued keys so that `null` and absent mean the same."""
    if isinstance(data, dict):
        return {key: value for key, value in data.items() if value is not None}
    return data

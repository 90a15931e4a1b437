"""Describing and checking plain JSON values for one-line error messages (shared by every reader)."""

from __future__ import annotations

import json
import math
import numbers
from typing import Any


def json_type(value: Any) -> str:
    """The JSON type of a parsed value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


def describe(value: Any) -> str:
    """A short one-line rendering of a JSON value for an error message: ``0.9``, ``null``, ``string "x"``."""
    if value is None or isinstance(value, bool | int | float):
        return _short(value)
    return f"{json_type(value)} {_short(value)}"


def _short(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not a finite real number (bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


class DuplicateKey(Exception):
    """A JSON object names the same key twice (raised by :func:`no_duplicate_keys`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` object hook for files where a repeated key would silently drop a value."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out

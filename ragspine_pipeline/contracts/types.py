"""Shared field types of the data contracts."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, FiniteFloat
from pydantic_core import PydanticCustomError


def id_to_str(value: Any) -> Any:
    # JSON writers sometimes emit numeric ids; an id is a name, so 17 and "17" are the same case.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


Id = Annotated[str, BeforeValidator(id_to_str)]


def not_a_flag(value: Any) -> Any:
    # pydantic's lax float reads true as 1.0: a figure that is a flag is a mistake, not a number.
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "expected a number, not a flag")
    return value


Number = Annotated[FiniteFloat, BeforeValidator(not_a_flag)]
"""A finite number (an integer reads as its float); booleans, NaN and infinities are rejected."""

QUESTION_ALIASES = ("question", "q")
"""A record id: a string, or an integer read as its decimal string."""

# Every contract model accepts fields it does not know (dialects carry extras such as `ok` or `notes`)
# and treats an explicit JSON null like an absent key, so that aliases resolve to the first value given.
MODEL_CONFIG = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


def drop_nulls(data: Any) -> Any:
    """Before-validator body: remove null-valued keys so that `null` and absent mean the same."""
    if isinstance(data, dict):
        return {key: value for key, value in data.items() if value is not None}
    return data

"""Fabricated numbers in refusals: a refusal that still states a figure made one up.

In the answer text of a refusal, reporting periods are removed first — a year, optionally with a half or
a quarter (``FY2024``, ``2025H1``, ``2024 年 上半年``, ``fy 2025 q1``): naming the period asked about is
not a figure. Then any remaining number is a fabrication (``9999%``, ``8.18b``, ``slide=5,table=1``,
``１２３４``, ``２０３０年``).

Both patterns are RE2 expressions (the engine of Arrow's string kernels) written to match exactly what
Python's ``re`` matches with ``\\d`` and ``\\s`` on text, as RAGSpine's evaluator does:

* a digit is any Unicode decimal digit (category Nd: ASCII, full-width, Arabic-Indic, Devanagari, …),
  so full-width ``１２３４`` is a number and full-width ``２０３０年`` is not a period (the period's
  century must be ASCII ``19``/``20``, as in RAGSpine);
* whitespace is every character ``str.isspace()`` accepts (the ideographic space U+3000, NBSP, …);
* the default period pattern ignores case (``2024h2``, ``Fy2025``). A configured pattern is used as
  written.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

UNICODE_SPACE = (
    r"[\t\n\x0b\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
)
"""RE2's spelling of Python's ``\\s`` on text: exactly the characters for which ``str.isspace()`` holds
(RE2's own ``\\s`` is ASCII ``[\\t\\n\\f\\r ]`` only)."""

DIGIT = r"\p{Nd}"
"""RE2's spelling of Python's ``\\d`` on text: a Unicode decimal digit."""

PERIOD_PATTERN = (
    rf"(?i)(?:FY{UNICODE_SPACE}*)?(?:19|20){DIGIT}{{2}}{UNICODE_SPACE}*年?{UNICODE_SPACE}*"
    rf"(?:H{UNICODE_SPACE}*[12]|Q{UNICODE_SPACE}*[1-4]|上半年|下半年)?"
)
"""A reporting period: ``(?i)(?:FY\\s*)?(?:19|20)\\d{2}\\s*年?\\s*(?:H\\s*[12]|Q\\s*[1-4]|上半年|下半年)?``
with Python's Unicode ``\\s`` and ``\\d``."""

NUMBER_PATTERN = rf"{DIGIT}+(?:\.{DIGIT}+)?"
"""A number: ``\\d+(?:\\.\\d+)?`` with Python's Unicode ``\\d``; any digit left makes one."""

_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")  # the same on Python's engine, to list what was found


def check_period_pattern(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used as the period regex (RE2 syntax), or None."""
    try:  # RE2 compiles a pattern when a kernel first runs
        pc.replace_substring_regex(pa.array(["FY2025"]), pattern, "")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        return str(exc).splitlines()[0]
    return None


def without_periods(text: pa.Array, period_pattern: str = PERIOD_PATTERN) -> pa.Array:
    """``text`` with every reporting period replaced by a space (null stays null)."""
    return pc.replace_substring_regex(text, period_pattern, " ")


def fabricated(text: pa.Array, period_pattern: str = PERIOD_PATTERN) -> np.ndarray:
    """Per text: a number remains once the periods are removed (False for null)."""
    found = pc.match_substring_regex(without_periods(text, period_pattern), NUMBER_PATTERN)
    return np.asarray(pc.fill_null(found, False), dtype=bool)


def numbers(text: str) -> list[str]:
    """The numbers in ``text`` (already without periods), in order, as written."""
    return _NUMBER_RE.findall(text)

r"""Text from data, made safe for a Markdown report.

Every Markdown report (the CLI's, ``slice_report.md``, the judge's, Dagster metadata) shows text that
comes from data: slice names and values, case ids, index versions, model names, errors reported by the
system under test. Rendered by GitHub, a Markdown viewer or the Dagster UI, raw HTML in such text would
run (``<script>``, ``<img onerror=…>``) and Markdown syntax would restyle the page. So:

* :func:`md_text` — HTML special characters become entities (``<`` → ``&lt;``, ``&`` → ``&amp;``, quotes
  too); the characters that open links, emphasis and code (``[ ] * ` \``) and ``|`` are
  backslash-escaped; line breaks become spaces. Rendered, the text reads exactly as it was given.
  (``_`` inside a word is not emphasis in CommonMark, so ``release_freeze`` stays as it is.)
* :func:`md_cell` — the same (``|`` is escaped), so a value cannot add a column to a table row.
* :func:`md_code` — text for an inline code span: HTML entities are not needed there (Markdown shows
  code literally), but backticks and line breaks are neutralised.

Our own markup (headings, tables, emphasis) is written around the escaped text, never through it.
"""

from __future__ import annotations

import html
import re

_MARKDOWN_INLINE = re.compile(r"([\\`*\[\]|])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")


def md_text(value: object) -> str:
    """``value`` as Markdown text that renders as itself: no live HTML, no Markdown syntax."""
    text = _LINE_BREAKS.sub(" ", str(value))
    return _MARKDOWN_INLINE.sub(r"\\\1", html.escape(text, quote=True))


def md_cell(value: object) -> str:
    """``value`` for a Markdown table cell (``|`` is escaped with the rest)."""
    return md_text(value)


def md_code(value: object) -> str:
    """``value`` inside a code span written as ``` `…` ```: backticks become ``'``, line breaks spaces."""
    return _LINE_BREAKS.sub(" ", str(value)).replace("`", "'")

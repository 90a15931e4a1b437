r"""Text from data, made safe for a Markdown report.

Every Markdown report (the CLI's, ``slice_report.md``, the extraction and judge reports, Dagster
metadata) shows text that comes from data: slice names and values, case ids and questions, index
versions, model names, file names, errors reported by the system under test. Rendered by GitHub, a
Markdown viewer or the Dagster UI, raw HTML in such text would run (``<script>``, ``<img onerror=…>``)
and Markdown syntax would restyle the page or add a column to a table. So every such text goes through
one of these, and our own markup (headings, tables, emphasis) is written around it, never through it:

* :func:`md_text` — on one line (line breaks become spaces); the HTML special characters become
  entities (``<`` → ``&lt;``, ``>``, ``&``, ``"``, ``'``); the characters that open links, emphasis and
  code spans (``[ ] * ` \``) and the table separator ``|`` get a backslash. Rendered, the text reads
  exactly as it was given. (``_`` inside a word is not emphasis in CommonMark: ``release_freeze``
  stays as it is.) :func:`md_text_column` applies the same rule to a whole Arrow string column.
* :func:`code_span` — the text as an inline code span (HTML is never live inside one), on one line,
  fenced with two backticks when it holds one; ``cell=True`` also escapes ``|`` for a table cell.

:func:`detectable_drop_markdown` is the release report's line on what the golden set can detect.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.reports.columns import byte_set, holds_any

_LINE_BREAKS = r"[\r\n\u2028\u2029]+"  # Python's spelling; RE2 (Arrow) writes \x{2028}
_LINE_BREAKS_RE2 = r"[\r\n\x{2028}\x{2029}]+"
_MARKUP = r"([\\`*\[\]|])"
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#x27;"))
_LINE_BREAKS_RE = re.compile(_LINE_BREAKS)
_MARKUP_RE = re.compile(_MARKUP)


def md_text(value: object) -> str:
    """``value`` as Markdown text that renders as itself: no live HTML, no Markdown syntax, one line."""
    text = _LINE_BREAKS_RE.sub(" ", str(value))
    return _MARKUP_RE.sub(r"\\\1", html.escape(text, quote=True))


# The bytes md_text may change: line breaks (U+2028 and U+2029 start with 0xE2), the HTML special
# characters and the markup characters. A column without any of them is its own md_text.
_MAY_CHANGE = byte_set(b"\r\n\xe2" + "".join(char for char, _ in _ENTITIES).encode() + b"\\`*[]|")


def md_text_column(values: pa.Array) -> pa.Array:
    """:func:`md_text` of every value of a string column (nulls stay null), without a Python loop."""
    values = values.cast(pa.string())
    if not holds_any(values, _MAY_CHANGE):
        return values
    out = pc.replace_substring_regex(values, _LINE_BREAKS_RE2, " ")
    for char, entity in _ENTITIES:  # "&" first, so that no entity is escaped twice
        out = pc.replace_substring(out, char, entity)
    return pc.replace_substring_regex(out, _MARKUP, r"\\\1")


def code_span(text: object, *, cell: bool = False) -> str:
    """``text`` on one line as an inline code span (fenced with two backticks when it holds one);
    ``cell``: ``|`` escaped too, for a table cell."""
    text = " ".join(str(text).split())
    if cell:
        text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def detectable_drop_markdown(release: Any) -> str:
    """The release report's line on what the golden set can detect (``ReleaseDecision.detectable_drop``,
    given the decision or its dict): ``- With 50 cases, drops under 20 points are not reliably caught
    (80 % power; …).`` and a newline, or "" when the decision does not state it (no baseline
    comparison, no cases). Our own text of numbers: nothing from data."""
    from ragspine_pipeline.decision.detectable import detectable_drop_text

    figure = release.get("detectable_drop") if isinstance(release, Mapping) else release.detectable_drop
    line = detectable_drop_text(figure)
    return "" if line is None else f"- {line}\n"


TAG_SLICES_NOTE = (
    "Without an evidence registry no slice gate applies: per value of each golden tag, the cases whose "
    "outcome is right (answered with a citation hit, or rightly refused) with the 95% interval, and the "
    "share of citation hits, contained answers and recalled cases (over the cases each applies to)."
)


def tag_slices_markdown(tag_slices: dict) -> str:
    """The slices of a run without a layered evaluation (``tag_slices``), worst first; not gated."""
    head = ["slice", "n", "right outcome", "95% CI", "citation hit", "contained", "recall@k"]
    rows = ["## Slices by tag (not gated, worst first)\n", TAG_SLICES_NOTE + "\n"]
    rows += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    flat = [(dim, value, s) for dim, values in tag_slices.items() for value, s in values.items()]
    for dim, value, s in sorted(flat, key=lambda x: (x[2]["right_rate"], -x[2]["n"], x[0], x[1])):
        low, high = s["right_ci95"]
        cells = [md_text(f"{dim}={value}"), s["n"], figure_cell(s["right_rate"]), f"{low:.3f}–{high:.3f}"]
        cells += [figure_cell(s.get(name)) for name in ("citation_hit", "contained", "recall_hit")]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def figure_cell(value) -> str:
    """A figure in a Markdown table: a float at 4 decimals, a count as is, ``n/a`` for none."""
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)

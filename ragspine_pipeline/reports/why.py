"""Why a release is blocked, for people: the cause sentence and the worst cases, in Markdown and in HTML.

The words come from :mod:`decision.causes` (``cause_sentence``, ``worst_case_reason``), so the CLI report,
the slice report, the HTML page and the Slack message all say the same thing. Case ids and questions come
from the golden set: they are escaped here, so a question holding ``<script>`` or ``**`` shows as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ragspine_pipeline.decision.causes import cause_sentence, worst_case_reason
from ragspine_pipeline.reports.charts import esc

# Characters that could start Markdown or HTML markup inline; a backslash makes each literal text.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~])")


def why_markdown(causes: Mapping | None) -> str:
    """``**Why:** <sentence>.`` and the worst cases as a numbered list (numbered, so that a bullet list
    written after it stays a list of its own), ending in one newline; "" when nothing fails."""
    sentence = cause_sentence(causes)
    if sentence is None:
        return ""
    blocks = [f"**Why:** {markdown_text(sentence)}."]
    cases = [c for c in causes.get("worst_cases") or [] if isinstance(c, Mapping)]
    if cases:
        blocks.append("**Worst cases:**")
        blocks.append(
            "\n".join(
                f"{i}. {code_span(str(c.get('qid')))} ({markdown_text(worst_case_reason(c))})"
                + (f" — {markdown_text(c['question'])}" if c.get("question") else "")
                for i, c in enumerate(cases, 1)
            )
        )
    return "\n\n".join(blocks) + "\n"


def why_html(causes: Mapping | None) -> str:
    """The same as :func:`why_markdown` as escaped HTML; "" when nothing fails."""
    sentence = cause_sentence(causes)
    if sentence is None:
        return ""
    text = f'<p class="why"><b>Why:</b> {esc(sentence)}.</p>'
    items = [
        f'<li><code class="id">{esc(c.get("qid"))}</code> ({esc(worst_case_reason(c))})'
        + (f" — {esc(c['question'])}" if c.get("question") else "")
        + "</li>"
        for c in causes.get("worst_cases") or []
        if isinstance(c, Mapping)
    ]
    return text + (f'<ol class="worst">{"".join(items)}</ol>' if items else "")


def markdown_text(text: object) -> str:
    """``text`` on one line with every character that could open Markdown or HTML markup escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def code_span(text: str) -> str:
    """``text`` on one line as an inline code span, fenced with two backticks when it holds one."""
    text = " ".join(text.split())
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"

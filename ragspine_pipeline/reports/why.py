"""Why a release is blocked, for people: the cause sentence and the worst cases, in Markdown and in HTML.

The words come from :mod:`decision.causes` (``cause_sentence``, ``worst_case_reason``), so the CLI report,
the slice report, the HTML page and the Slack message all say the same thing. Case ids and questions come
from the golden set: they are escaped here, so a question holding ``<script>`` or ``**`` shows as text.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragspine_pipeline.decision.causes import cause_sentence, worst_case_reason
from ragspine_pipeline.reports.charts import esc
from ragspine_pipeline.reports.markdown import code_span, md_text


def why_markdown(causes: Mapping | None) -> str:
    """``**Why:** <sentence>.`` and the worst cases as a numbered list (numbered, so that a bullet list
    written after it stays a list of its own), ending in one newline; "" when nothing fails."""
    sentence = cause_sentence(causes)
    if sentence is None:
        return ""
    blocks = [f"**Why:** {md_text(sentence)}."]
    cases = [c for c in causes.get("worst_cases") or [] if isinstance(c, Mapping)]
    if cases:
        blocks.append("**Worst cases:**")
        blocks.append(
            "\n".join(
                f"{i}. {code_span(str(c.get('qid')))} ({md_text(worst_case_reason(c))})"
                + (f" — {md_text(c['question'])}" if c.get("question") else "")
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

"""The judge's prompts and the strict reading of its replies. Pure: no network, no files.

Three metrics, each a 1–5 score with fixed anchors:

* ``faithfulness`` — is every statement of the answer supported by the context it was given?
* ``answer_relevancy`` — does the answer address the question asked?
* ``context_recall`` — does the answer cover the reference facts (the gold claim, or the gold context)?

Every prompt carries the anchors of its metric, the length-is-not-quality instruction and the output
contract (one JSON object ``{"score": <1-5>, "reason": "<one line>"}``). The wording is versioned by
:data:`PROMPT_VERSION`: a cached judgment is reused only for the same version, so changing a word here
means bumping the version, which re-judges everything.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ragspine_pipeline.metrics import names

__all__ = [
    "ANCHORS",
    "JUDGED_METRICS",
    "LENGTH_INSTRUCTION",
    "METRICS",
    "PROMPT_VERSION",
    "STRICT_REMINDER",
    "JudgeItem",
    "JudgeOutputError",
    "build_messages",
    "judgment_key",
    "metric_inputs",
    "parse_judgment",
]

PROMPT_VERSION = "ragspine-judge-v1"
METRICS = ("faithfulness", "answer_relevancy", "context_recall")
# The gateable aggregates of a judging run: the mean combined score and the pass rate of each metric
# (``judge_<metric>``, ``judge_<metric>_pass_rate``), as the registry defines them.
JUDGED_METRICS = names("judge")

ANCHORS: dict[str, dict[int, str]] = {
    "faithfulness": {
        5: "fully supported: every statement in the answer is stated in or directly implied by the context",
        4: "mostly supported: one minor detail is not in the context, nothing contradicts it",
        3: "partly supported: the main point is in the context, but some statements are not",
        2: "mostly unsupported: the main point is not in the context",
        1: "fabricated: the answer states things the context does not say, or contradicts it",
    },
    "answer_relevancy": {
        5: "fully on topic: the answer addresses exactly the question asked",
        4: "on topic, with a minor digression or a small part of the question left out",
        3: "partly on topic: it addresses the question only in part",
        2: "mostly off topic: it touches the question but answers something else",
        1: "off topic: the answer does not address the question at all",
    },
    "context_recall": {
        5: "all key facts covered: every reference fact is stated in the answer",
        4: "most key facts covered: one minor reference fact is missing",
        3: "some key facts covered: about half of the reference facts are stated",
        2: "few key facts covered: only a minor reference fact is stated",
        1: "none covered: no reference fact is stated in the answer",
    },
}

LENGTH_INSTRUCTION = (
    "Length is not quality: do not reward an answer for being longer, more detailed or more confident, "
    "and do not penalise it for being short. Judge only what the criterion below asks."
)
_OUTPUT = (
    'Reply with exactly one JSON object and nothing else: {"score": <an integer from 1 to 5>, '
    '"reason": "<one sentence on one line>"}.'
)
STRICT_REMINDER = (
    "Your previous reply could not be read. Reply again with exactly one JSON object, no code fence, "
    'no text before or after it: {"score": <an integer from 1 to 5>, "reason": "<one line>"}.'
)
_TASKS = {
    "faithfulness": "Rate how well the ANSWER is supported by the CONTEXT (and by nothing else).",
    "answer_relevancy": "Rate how well the ANSWER addresses the QUESTION.",
    "context_recall": "Rate how many of the REFERENCE FACTS the ANSWER covers.",
}
_INPUTS = {
    "faithfulness": ("answer", "context"),
    "answer_relevancy": ("question", "answer"),
    "context_recall": ("answer", "reference"),
}


class JudgeOutputError(ValueError):
    """A judge reply that is not the JSON object the prompt asks for."""


@dataclass(frozen=True)
class JudgeItem:
    """What a judge may see of one case: the question, the answer, the context the answer was given
    (chunk texts) and the reference facts (the gold claim or gold context)."""

    qid: str
    question: str | None = None
    answer: str | None = None
    context: tuple[str, ...] = ()
    reference: tuple[str, ...] = ()


def metric_inputs(metric: str, item: JudgeItem) -> dict[str, str | list[str]] | None:
    """The inputs ``metric`` judges for ``item``, or None when the metric does not apply (an empty
    answer, or no question / context / reference to judge against): not applicable, never a score."""
    values: dict[str, str | list[str]] = {}
    for name in _INPUTS[metric]:
        value = getattr(item, name)
        if isinstance(value, tuple):
            value = [text for text in value if text and text.strip()]
            if not value:
                return None
            values[name] = value
        else:
            if value is None or not value.strip():
                return None
            values[name] = value
    return values


DEFAULT_MAX_INPUT_CHARS = 8000
"""The most characters of one prompt input (a question, an answer, the context) sent to the judge."""

TRUNCATION_MARK = "[… {cut} more characters not shown to the judge]"


def truncate_inputs(
    inputs: dict[str, str | list[str]], max_chars: int
) -> tuple[dict[str, str | list[str]], list[dict]]:
    """``inputs`` with every field cut to ``max_chars`` characters (a list field: its items in order
    until the field's budget is spent), each cut marked in the text; and one ``{field, chars, kept}`` per
    field that was cut, for the report (``chars`` the field's length, ``kept`` what was sent of it).

    However large the trace, a field sends at most ``max_chars`` characters of input, plus the marks:
    the cut text ends with ``[… N more characters not shown to the judge]``, a list gets one more line
    naming how many passages were left out, and each passage its ``[i]`` label in the prompt."""
    out: dict[str, str | list[str]] = {}
    cuts: list[dict] = []
    for name, value in inputs.items():
        items = value if isinstance(value, list) else [value]
        total, left, kept = sum(len(text) for text in items), max_chars, []
        for text in items:
            if left <= 0:
                break
            kept.append(
                text
                if len(text) <= left
                else text[:left] + " " + TRUNCATION_MARK.format(cut=len(text) - left)
            )
            left -= len(text)
        if len(kept) < len(items):
            kept.append(f"[… {len(items) - len(kept)} more passages not shown to the judge]")
        if total > max_chars:
            cuts.append({"field": name, "chars": total, "kept": max_chars})
        out[name] = kept if isinstance(value, list) else kept[0]
    return out, cuts


def build_messages(
    metric: str, inputs: dict[str, str | list[str]], unreadable_reply: str | None = None
) -> tuple[dict, ...]:
    """The chat messages judging ``inputs`` on ``metric``. With ``unreadable_reply`` (a first reply that
    could not be parsed) the conversation continues with that reply and the stricter reminder."""
    anchors = "\n".join(f"{score} = {text}" for score, text in sorted(ANCHORS[metric].items(), reverse=True))
    system = (
        "You are a strict evaluator of answers produced by a retrieval-augmented QA system.\n"
        f"{_TASKS[metric]}\nScore anchors:\n{anchors}\n{LENGTH_INSTRUCTION}\n{_OUTPUT}"
    )
    sections = []
    for name, value in inputs.items():
        title = {"reference": "REFERENCE FACTS"}.get(name, name.upper())
        body = (
            "\n".join(f"[{i}] {text}" for i, text in enumerate(value, 1))
            if isinstance(value, list)
            else value
        )
        sections.append(f"{title}:\n{body}")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(sections)}]
    if unreadable_reply is not None:
        messages.append({"role": "assistant", "content": unreadable_reply})
        messages.append({"role": "user", "content": STRICT_REMINDER})
    return tuple(messages)


def judgment_key(model: str, metric: str, inputs: dict[str, str | list[str]]) -> str:
    """The cache key of one judgment: model, prompt version, metric and a content hash of the inputs."""
    canonical = json.dumps([model, PROMPT_VERSION, metric, inputs], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def parse_judgment(text: str | None) -> tuple[int, str]:
    """``(score, reason)`` from a reply that is exactly one JSON object with an integer ``score`` in 1–5
    and a string ``reason`` (whitespace folded onto one line); JudgeOutputError otherwise."""
    if text is None or not text.strip():
        raise JudgeOutputError("empty reply")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JudgeOutputError(f"not a JSON object: {exc.msg} (column {exc.colno})") from None
    if not isinstance(data, dict):
        raise JudgeOutputError(f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"score", "reason"})
    if unknown:
        raise JudgeOutputError(f"unexpected key(s): {', '.join(unknown)}")
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
        raise JudgeOutputError(f"score must be an integer from 1 to 5, got {score!r}"[:120])
    reason = data.get("reason")
    if not isinstance(reason, str):
        raise JudgeOutputError("reason must be a string")
    return score, " ".join(reason.split())

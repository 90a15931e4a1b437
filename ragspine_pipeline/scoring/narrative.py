"""RAGSpine's two groundedness gates for narrative answers, lexical and offline.

They apply to the QA-gate cases whose ``case_type`` is ``narrative`` — not to composite cases, though
those name a ``narrative_doc`` too. The narrative answer is ``outcome.narrative_answer``; a trace without
one has an empty narrative answer (never the answer text in its place).

**Tokens.** Every maximal run of ASCII letters and digits, lower-cased, and every CJK ideograph of
U+4E00–U+9FFF on its own (``"Q4 增长3.5% café"`` → ``q4, 增, 长, 3, 5, caf``). Nothing else is a token:
other letters (``é``, Greek, Cyrillic), full-width digits and CJK outside that block separate tokens.
Case is folded after matching, so only ASCII letters change (``K``, the Kelvin sign, is no ``k``).

**Claims.** The narrative answer is read line by line (Python's ``str.splitlines``: ``\\n``, ``\\r\\n``,
``\\u2028`` …). A line that, stripped of whitespace, is empty or starts with a framing prefix
(:data:`FRAMING_PREFIXES`: ``基于检索到的资料``, ``未检索到``, ``问题：`` …, the words RAGSpine's engine
frames an answer with or echoes from its prompt) is dropped whole. In the other lines, each citation
trailer ``（来源：…）`` / ``（资料来源：…）`` (full-width parentheses, either colon) is removed and each
retrieval marker ``[n]`` (any decimal digits) becomes a space; the line is then split at every run of
``。！？!?；;`` — never at a full stop, so ``8.18``, ``U.S.`` and ``Sales fell. Costs rose.`` each stay
whole. A sentence, stripped, without a token is dropped.

* ``narrative_faithfulness`` — every claim is entailed by the trace's retrieved context
  (``outcome.retrieved_context``: its strings, or the ``text`` of its objects; without it, the texts
  of the trace's ``contexts``): at least
  :data:`THRESHOLD` (0.6) of the claim's tokens, counted with repetition, are among the context's
  tokens. A narrative answer without claims (empty, or only framing lines such as the engine's
  ``未检索到…`` refusal) passes: it asserts nothing, whatever the context. A traced case with claims
  whose trace carries neither field (both absent or null) is *unmeasured*: its claims cannot be
  checked, so it is neither a pass nor a failure; it is left out of the gate's denominator and counted
  apart (:data:`NEEDS` names the fields). An empty list is carried: the service reports that it
  retrieved nothing, and every claim it still makes is unsupported (RAGSpine's own engine writes
  ``[]`` then, and fails such a case too).
* ``answer_accuracy`` — recall of the reference text of ``expected.narrative_doc`` over sets: the
  distinct reference tokens the whole narrative answer contains (framing lines and trailers too), over
  the distinct reference tokens (a repeated token counts once); a case passes at :data:`THRESHOLD`
  (0.6) or above. A reference without a token leaves nothing to recall: 1.0. It needs the reference
  texts (:func:`read_references`).

A narrative case without a trace fails both: a system that drops a question must not pass for it
(a missing answer is a failure; a missing context is not a measurement).
Both are per-case pass/fail, gated as pass rates like the other QA gates. Narrative cases are few (a
golden set's handful), so each is scored in Python, whose ``splitlines``, ``strip`` and ``re`` are
the very rules RAGSpine states.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import names

THRESHOLD = 0.6
GATES = names("narrative")  # narrative_faithfulness, answer_accuracy (``ragspine_pipeline.metrics``)
FAITHFULNESS, ACCURACY = GATES
CASE_TYPE = "narrative"  # the only case type the gates apply to
# The trace fields a gate reads that a trace may not carry: without them the case is unmeasured.
NEEDS = {FAITHFULNESS: "outcome.retrieved_context or contexts"}
REFERENCE_SUFFIXES = (".txt", ".md")
# Lines that frame an answer rather than state something: the engine's lead-ins, its refusals when
# nothing was retrieved, and the prompt scaffolding its offline provider echoes back.
FRAMING_PREFIXES = (
    "基于检索到的资料",
    "未检索到",
    "归因部分未检索到",
    "对比结果",
    "归因分析",
    "资料来源",
    "问题：",
    "问题:",
    "检索片段",
)

_TOKEN = re.compile(r"[A-Za-z0-9]+|[\u4e00-\u9fff]")
_CITATION_TRAILER = re.compile(r"（(?:资料)?来源[：:][^）]*）")
_RETRIEVAL_MARKER = re.compile(r"\[\d+\]")  # \d: any Unicode decimal digit, as Python reads it
_SENTENCE_END = re.compile(r"[。！？!?；;]+")  # line breaks are already split by splitlines


def tokens(text: str) -> list[str]:
    """The ASCII-word and CJK-ideograph tokens of ``text``, in order, lower-cased after matching."""
    return [token.lower() for token in _TOKEN.findall(text)]


def claims(answer: str) -> list[str]:
    """The claims of a narrative answer: its sentences, framing lines, citation trailers and retrieval
    markers removed (the module docstring states the rule); each has at least one token."""
    out: list[str] = []
    for raw_line in answer.splitlines():
        line = raw_line.strip()
        if not line or line.startswith(FRAMING_PREFIXES):
            continue
        body = _RETRIEVAL_MARKER.sub(" ", _CITATION_TRAILER.sub("", line))
        out += [part for raw in _SENTENCE_END.split(body) if tokens(part := raw.strip())]
    return out


def coverage(claim: str, context: set[str]) -> float:
    """The share of the claim's tokens, counted with repetition, that are among the ``context`` tokens."""
    found = tokens(claim)
    return sum(token in context for token in found) / len(found) if found else 1.0


def token_recall(answer: str, reference: str) -> float:
    """The share of the reference's distinct tokens that the answer contains; 1.0 for a reference
    without a token (nothing to recall)."""
    wanted = set(tokens(reference))
    return len(wanted & set(tokens(answer))) / len(wanted) if wanted else 1.0


def narrative_cases(case_type: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per gold row, whether the narrative gates apply: its ``case_type`` is ``narrative``."""
    return np.asarray(pc.fill_null(pc.equal(case_type, CASE_TYPE), False), dtype=bool)


def lacking(gate: str, count: int) -> str:
    """Why ``count`` narrative cases are unmeasured for ``gate``: ``4 narrative traces carry no …``,
    naming the trace fields it needs."""
    traces = "trace carries" if count == 1 else "traces carry"
    return f"{count} narrative {traces} no {NEEDS[gate]}"


@dataclass(frozen=True)
class NarrativeGates:
    """Per gold row: whether each gate applies and passes, whether it is unmeasured (a narrative case
    whose trace lacks the gate's input: never in ``applies``), and a failure's details."""

    applies: dict[str, np.ndarray]
    ok: dict[str, np.ndarray]
    details: dict[str, dict[int, dict]]  # gate -> row -> {"expected", "actual"}
    unmeasured: dict[str, np.ndarray]

    def failures(self, gate: str, rows: np.ndarray, ids: list) -> list[dict]:
        """``{id, expected, actual}`` of the failing ``rows`` of ``gate``, in gold order."""
        return [{"id": ids[row], **self.details[gate][int(row)]} for row in rows]


def score_narrative(
    case_type: pa.Array,
    narrative_doc: pa.Array,
    narrative_answer: pa.Array,
    context: pa.Array,
    traced: np.ndarray,
    references: Mapping[str, str] | None,
) -> NarrativeGates:
    """Both gates over gold-aligned columns: ``case_type`` and ``narrative_doc`` (gold), the
    ``outcome_narrative`` and retrieved-context trace columns, and ``traced`` (whether the case has a
    trace). ``answer_accuracy`` applies only with ``references`` (``{doc: text}``), which must hold
    every doc the narrative cases name. ``narrative_faithfulness`` is unmeasured, not applied, for a
    traced case with claims whose ``context`` is null (the trace carries no passages); an untraced
    case fails."""
    n = len(case_type)
    narrative = narrative_cases(case_type)
    carried = np.asarray(context.is_valid(), dtype=bool)
    unmeasured = {gate: np.zeros(n, dtype=bool) for gate in GATES}
    applies = {gate: np.zeros(n, dtype=bool) for gate in GATES}
    ok = {gate: np.zeros(n, dtype=bool) for gate in GATES}
    details: dict[str, dict[int, dict]] = {gate: {} for gate in GATES}
    docs, told, contexts = narrative_doc.to_pylist(), narrative_answer.to_pylist(), context.to_pylist()
    for row in np.flatnonzero(narrative):
        text, was_traced = told[row] or "", bool(traced[row])
        found = claims(text)
        outcomes = {}
        if was_traced and found and not carried[row]:  # claims, and nothing to check them against
            unmeasured[FAITHFULNESS][row] = True
        else:
            outcomes[FAITHFULNESS] = _faithfulness(found, contexts[row] or [], was_traced)
        if references is not None:
            outcomes[ACCURACY] = _accuracy(text, docs[row], references[docs[row]], was_traced)
        for gate, (passed, failure) in outcomes.items():
            applies[gate][row], ok[gate][row] = True, passed
            if failure is not None:
                details[gate][row] = failure
    return NarrativeGates(applies, ok, details, unmeasured)


def _faithfulness(found: list[str], passages: list[str | None], traced: bool) -> tuple[bool, dict | None]:
    """``(passes, failure details or None)`` of one narrative answer's claims against its context
    passages."""
    context_tokens = set(tokens("\n".join(passage for passage in passages if passage)))
    covered = [coverage(claim, context_tokens) for claim in found]
    unsupported = [claim for claim, share in zip(found, covered, strict=True) if share < THRESHOLD]
    if traced and not unsupported:
        return True, None
    weakest = int(np.argmin(covered)) if covered else None
    return False, {
        "expected": {"min_coverage": THRESHOLD},
        "actual": {
            "trace": traced,
            "claims": len(found),
            "unsupported": len(unsupported),
            "context_passages": len(passages),
            "weakest_claim": None if weakest is None else found[weakest][:200],
            "coverage": None if weakest is None else round(covered[weakest], 4),
            "unsupported_claims": unsupported,  # every one, whole, in the answer's order
        },
    }


def _accuracy(text: str, doc: str, reference: str, traced: bool) -> tuple[bool, dict | None]:
    """``(passes, failure details or None)`` of one narrative answer against its reference text."""
    recall = token_recall(text, reference)
    if traced and recall >= THRESHOLD:
        return True, None
    return False, {
        "expected": {"narrative_doc": doc, "min_recall": THRESHOLD},
        "actual": {"trace": traced, "recall": round(recall, 4)},
    }


def read_references(directory: str | Path, docs: set[str]) -> dict[str, str]:
    """The reference text of each of ``docs`` from ``directory``: the file named as the doc with
    ``.txt`` or ``.md`` added (``REG_WATCH_HK.pptx`` → ``REG_WATCH_HK.pptx.txt``), else with its own
    suffix replaced (``REG_WATCH_HK.txt``). A doc without one is a one-line :class:`InputError`."""
    root = Path(directory)
    if not root.is_dir():
        raise InputError(str(root), "the reference texts must be a directory (one file per narrative_doc)")
    out: dict[str, str] = {}
    for doc in sorted(docs):
        if Path(doc).name != doc or doc in (".", ".."):
            raise InputError(str(root), f"narrative_doc {doc!r} is not a plain file name")
        stem = Path(doc).stem
        candidates = [root / f"{doc}{suffix}" for suffix in REFERENCE_SUFFIXES]
        candidates += [root / f"{stem}{suffix}" for suffix in REFERENCE_SUFFIXES]
        path = next((p for p in candidates if p.exists()), None)
        if path is None:
            tried = ", ".join(p.name for p in candidates[:2])
            raise InputError(str(root), f"no reference text for narrative_doc {doc!r} (looked for {tried} …)")
        out[doc] = inputs.read_text(path, "reference text")
    return out

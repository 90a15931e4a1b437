"""RAGSpine's two groundedness gates for narrative answers, lexical and offline.

They apply to the QA-gate cases whose ``expected`` names a ``narrative_doc`` (narrative and composite
cases). The narrative answer is ``outcome.narrative_answer``, else the answer text.

**Tokens.** The text is lower-cased; every CJK ideograph is a token of its own, and every maximal run of
other letters and digits is one (``"Q4 增长3.5%"`` → ``q4, 增, 长, 3, 5``). Underscores and punctuation
separate tokens.

**Claims.** The narrative answer is split into claims at sentence ends: ``。！？；!?;``, a line break,
or a full stop followed by whitespace or the end (so ``3.5`` stays whole). A claim without a token is
dropped.

* ``narrative_faithfulness`` — every claim is entailed by the trace's retrieved context
  (``outcome.retrieved_context``: its strings, or the ``text`` of its objects, joined): a claim is
  entailed when at least :data:`THRESHOLD` (0.6) of its tokens, counted with repetition, occur among the
  context's tokens. A case without claims (no narrative answer, a refusal) fails; so does a case whose
  trace carries no retrieved context.
* ``answer_accuracy`` — token recall of the narrative answer against the reference text of
  ``expected.narrative_doc``: the tokens of the reference that the answer contains, counted with
  repetition (each answer token matches at most one reference token), over the reference's token
  count; a case passes at :data:`THRESHOLD` (0.6) or above. It needs the reference texts
  (:func:`read_references`); a case whose reference is empty fails.

Both are per-case pass/fail, gated as pass rates like the other QA gates. Narrative cases are few
(a golden set's handful), so each is scored in Python; the tokeniser is one compiled regular expression.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import names

THRESHOLD = 0.6
GATES = names("narrative")  # narrative_faithfulness, answer_accuracy (``ragspine_pipeline.metrics``)
FAITHFULNESS, ACCURACY = GATES
REFERENCE_SUFFIXES = (".txt", ".md")

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_CLAIM_END = re.compile(r"(?<=[。！？；!?;])|\n|(?<=\.)(?=\s|$)")


def tokens(text: str) -> list[str]:
    """The word and CJK-character tokens of ``text``, lower-cased, in order."""
    return _TOKEN.findall(text.lower())


def claims(answer: str) -> list[list[str]]:
    """The claims of a narrative answer, each as its tokens (claims without a token dropped)."""
    return [found for part in _CLAIM_END.split(answer) if (found := tokens(part))]


def coverage(claim: list[str], context: set[str]) -> float:
    """The share of a claim's tokens (with repetition) that occur in the context."""
    return sum(token in context for token in claim) / len(claim)


def token_recall(answer: list[str], reference: list[str]) -> float:
    """The share of the reference's tokens (with repetition) the answer contains; 0 for no reference."""
    if not reference:
        return 0.0
    return sum((Counter(answer) & Counter(reference)).values()) / len(reference)


@dataclass(frozen=True)
class NarrativeGates:
    """Per gold row: whether each gate applies and passes, and a failure's details."""

    applies: dict[str, np.ndarray]
    ok: dict[str, np.ndarray]
    details: dict[str, dict[int, dict]]  # gate -> row -> {"expected", "actual"}

    def failures(self, gate: str, rows: np.ndarray, ids: list) -> list[dict]:
        """``{id, expected, actual}`` of the failing ``rows`` of ``gate``, in gold order."""
        return [{"id": ids[row], **self.details[gate][int(row)]} for row in rows]


def score_narrative(
    narrative_doc: pa.Array,
    answer: pa.Array,
    narrative_answer: pa.Array,
    context: pa.Array,
    references: Mapping[str, str] | None,
) -> NarrativeGates:
    """Both gates over gold-aligned columns: ``narrative_doc`` (gold), the answer text, the
    ``outcome_narrative`` and ``outcome_context`` trace columns. ``answer_accuracy`` applies only with
    ``references`` (``{doc: text}``), which must hold every doc the cases name."""
    n = len(narrative_doc)
    docs = narrative_doc.to_pylist()
    rows = [row for row in range(n) if docs[row] is not None]
    applies = {gate: np.zeros(n, dtype=bool) for gate in GATES}
    ok = {gate: np.zeros(n, dtype=bool) for gate in GATES}
    details: dict[str, dict[int, dict]] = {gate: {} for gate in GATES}
    answers, told, contexts = answer.to_pylist(), narrative_answer.to_pylist(), context.to_pylist()
    reference_tokens = {doc: tokens(text) for doc, text in (references or {}).items()}
    for row in rows:
        text = told[row] if told[row] is not None else (answers[row] or "")
        found = claims(text)
        applies[FAITHFULNESS][row] = True
        context_tokens = set(tokens("\n".join(contexts[row] or [])))
        covered = [coverage(claim, context_tokens) for claim in found]
        ok[FAITHFULNESS][row] = bool(found) and min(covered) >= THRESHOLD
        if not ok[FAITHFULNESS][row]:
            weakest = int(np.argmin(covered)) if covered else None
            details[FAITHFULNESS][row] = {
                "expected": {"min_coverage": THRESHOLD},
                "actual": {
                    "claims": len(found),
                    "context_passages": len(contexts[row] or []),
                    "weakest_claim": None if weakest is None else " ".join(found[weakest])[:200],
                    "coverage": None if weakest is None else round(covered[weakest], 4),
                },
            }
        if references is None:
            continue
        applies[ACCURACY][row] = True
        recall = token_recall(tokens(text), reference_tokens[docs[row]])
        ok[ACCURACY][row] = recall >= THRESHOLD
        if not ok[ACCURACY][row]:
            details[ACCURACY][row] = {
                "expected": {"narrative_doc": docs[row], "min_recall": THRESHOLD},
                "actual": {"recall": round(recall, 4)},
            }
    return NarrativeGates(applies, ok, details)


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

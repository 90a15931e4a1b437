"""Trace contract: one answer of the system under test.

:class:`Trace` loads every trace dialect: WFGY ``answer_json`` traces, text answers with
``citations: [a, b]`` embedded in the text plus ``chunks[].id``, and layered traces with stage ids,
versions and a claim ledger. Its ``canonical_*`` properties are the reference definition of how a
dialect maps to the canonical columns; ``contracts.columns`` computes the same over whole columns.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, Field, FiniteFloat, StrictBool, field_validator, model_validator

from ragspine_pipeline.contracts.gold import SourceRef
from ragspine_pipeline.contracts.jsonl import KeyCountingDict
from ragspine_pipeline.contracts.types import MODEL_CONFIG, QUESTION_ALIASES, Id, Number, drop_nulls

TRACE_QID_ALIASES = ("qid", "q_id", "case_id", "id", "request_id")
RETRIEVED_ALIASES = ("retrieved_ids", "first_stage_ids")
PROMPT_TOKEN_ALIASES = ("prompt_tokens", "prompt")
COMPLETION_TOKEN_ALIASES = ("completion_tokens", "completion")

# A whole-number float below 2**53 is written without a fraction (1700000000.0 reads as 1700000000):
# JSON writers disagree on whether epoch seconds carry ".0", and the value is the same.
EXACT_FLOAT_INTEGERS = 2**53
# Token counts become int64 columns: a count outside int64 is rejected here, not overflowed later.
Int64 = Annotated[int, Field(ge=-(2**63), lt=2**63)]

REFUSAL_TOKEN = "not in context"
# ASCII whitespace only, spelled out, so that the column implementation trims exactly the same set.
WHITESPACE = " \t\n\r\f\v"
# What Python's str.strip() strips: every character for which str.isspace() holds (NBSP, U+2003, the
# ideographic space U+3000, ...). A claim is a refusal when it is the token once these are stripped.
UNICODE_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# `citations: [a, b]` inside an answer text. Explicit character classes (not \s) keep the regex
# identical under Python's re and the RE2 engine used for columns.
EMBEDDED_CITATIONS = r"(?i)citations[ \t\r\n]*:[ \t\r\n]*\[([^\]]*)\]"
EMBEDDED_SEPARATORS = r"[, \t\r\n'\"]+"

_EMBEDDED_RE = re.compile(EMBEDDED_CITATIONS)
_SEPARATORS_RE = re.compile(EMBEDDED_SEPARATORS)


class ChunkRef(BaseModel):
    """A retrieved chunk as some tracers log it: only its id is read."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    id: Id


class LedgerClaim(BaseModel):
    """One entry of an answer's claim ledger (read by the layered metrics, ``scoring.layered``)."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    claim_id: Id | None = None
    text: str
    citation_id: str | None = None
    support_phrases: list[str] = Field(default_factory=list)
    answer_point: str | None = None


class TokenUsage(BaseModel):
    """Token counts of one answer: OpenAI-style ``prompt_tokens`` / ``completion_tokens``, or the short
    ``prompt`` / ``completion`` (the long name wins when both are given). Other keys are kept, unread."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    prompt_tokens: Int64 | None = Field(default=None, validation_alias=AliasChoices(*PROMPT_TOKEN_ALIASES))
    completion_tokens: Int64 | None = Field(
        default=None, validation_alias=AliasChoices(*COMPLETION_TOKEN_ALIASES)
    )


ObservedClarificationMode = Literal["none", "ask_first", "answer_with_assumptions", "out_of_scope_entity"]
"""What a system may report it did. ``out_of_scope_entity`` (RAGSpine's engine, for a question about an
entity outside its corpus) is an observation only: no golden case may expect it, so it never equals an
expected mode and fails ``clarification_appropriateness`` wherever that gate applies."""


class ContextPassage(BaseModel):
    """One passage of ``outcome.retrieved_context`` written as an object: its ``text`` is what counts
    (``doc``, ``locator`` and other keys are kept, unread)."""

    model_config = MODEL_CONFIG

    text: str


class Outcome(BaseModel):
    """What the SUT observed about its own answer, for the QA gates. ``narrative_answer`` and
    ``retrieved_context`` feed the narrative gates (``scoring.narrative``); other keys (``route``, …)
    are kept, unread."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    clarification_mode: ObservedClarificationMode | None = None
    refused: StrictBool | None = None
    found_value: Number | None = None
    found_unit: str | None = None
    found_source: SourceRef | None = None
    sources: list[SourceRef] | None = None
    narrative_answer: str | None = None
    retrieved_context: list[str | ContextPassage] | None = None

    @property
    def context_texts(self) -> list[str] | None:
        """The texts of ``retrieved_context`` (a string, or an object's ``text``), in order."""
        if self.retrieved_context is None:
            return None
        return [item if isinstance(item, str) else item.text for item in self.retrieved_context]

    @field_validator("refused", mode="before")
    @classmethod
    def _refused_is_a_flag(cls, refused: Any) -> Any:
        # outcome.refused decides refusals when present: "yes" or 1 must not pass for a refusal silently.
        if not isinstance(refused, bool):
            raise ValueError(f"outcome.refused must be true or false (got {refused!r})")
        return refused


class Answer(BaseModel):
    """The structured answer: ``answer`` or ``answer_json`` as an object."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    claim: str | None = None
    citations: list[str] | None = None
    claims: list[LedgerClaim] | None = None


class Trace(BaseModel):
    """One answer of the system under test, whatever dialect it was logged in."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    qid: Id | None = Field(default=None, validation_alias=AliasChoices(*TRACE_QID_ALIASES))
    question: str | None = Field(default=None, validation_alias=AliasChoices(*QUESTION_ALIASES))
    ts: int | FiniteFloat | str | None = None
    retrieved_ids: list[str] | None = Field(default=None, validation_alias=AliasChoices(*RETRIEVED_ALIASES))
    chunks: list[ChunkRef] | None = None
    rerank_input_ids: list[str] | None = None
    reranked_ids: list[str] | None = None
    selected_context_ids: list[str] | None = None
    selected_versions: list[str] | None = None
    versions: dict[str, str] | None = None
    answer: Answer | str | None = None
    answer_json: Answer | None = None
    citations: list[str] | None = None
    outcome: Outcome | None = None
    ok: StrictBool | None = None
    latency_ms: FiniteFloat | None = None
    token_usage: TokenUsage | None = None
    tags: dict[str, str] | None = None

    _map_nulls = field_validator("tags", mode="before")(drop_nulls)

    @field_validator("versions", mode="before")
    @classmethod
    def _versions_as_object(cls, versions: Any) -> Any:
        """``versions`` as an object; a list of ``[key, value]`` pairs (the permission-safe harness's
        form) becomes one, a repeated key remembered as in an object written with it twice."""
        if isinstance(versions, list):
            versions = KeyCountingDict.from_pairs([_version_pair(item) for item in versions])
        return drop_nulls(versions)

    # -- canonical view (reference definitions; columns.py vectorises exactly these) -----------------

    @property
    def _answer_objects(self) -> list[Answer]:
        return [a for a in (self.answer, self.answer_json) if isinstance(a, Answer)]

    @property
    def _answer_text(self) -> str | None:
        return self.answer if isinstance(self.answer, str) else None

    @property
    def ledger(self) -> list[LedgerClaim] | None:
        """The claim ledger: ``answer.claims``, else ``answer_json.claims``."""
        return next((a.claims for a in self._answer_objects if a.claims is not None), None)

    @property
    def canonical_claim(self) -> str | None:
        """``answer.claim`` > ``answer_json.claim`` > text ``answer`` > ledger texts joined by a space."""
        for answer in self._answer_objects:
            if answer.claim is not None:
                return answer.claim
        if self._answer_text is not None:
            return self._answer_text
        ledger = self.ledger
        return None if ledger is None else " ".join(claim.text for claim in ledger)

    @property
    def canonical_citations(self) -> list[str] | None:
        """The cited ids, or None when the answer carries no citation list at all.

        ``answer.citations`` > ``answer_json.citations`` > top-level ``citations`` > ``citations: [...]``
        embedded in a text answer > the distinct ``citation_id``s of the ledger, in order.
        """
        for answer in self._answer_objects:
            if answer.citations is not None:
                return answer.citations
        if self.citations is not None:
            return self.citations
        if self._answer_text is not None:
            embedded = parse_embedded_citations(self._answer_text)
            if embedded is not None:
                return embedded
        ledger = self.ledger
        if ledger is None:
            return None
        return list(dict.fromkeys(c.citation_id for c in ledger if c.citation_id is not None))

    @property
    def canonical_ts(self) -> str | None:
        """``ts`` as text (see :func:`timestamp_text`)."""
        return timestamp_text(self.ts)

    @property
    def canonical_tags(self) -> list[tuple[str, str]] | None:
        """The tags sorted by key (JSON key order carries no meaning); None when the trace has none."""
        return None if self.tags is None else sorted(self.tags.items())

    @property
    def outcome_refused(self) -> bool | None:
        """``outcome.refused``; None when the trace does not say."""
        return None if self.outcome is None else self.outcome.refused

    @property
    def canonical_retrieved_ids(self) -> list[str] | None:
        """``retrieved_ids`` > ``first_stage_ids`` > ``chunks[].id``."""
        if self.retrieved_ids is not None:
            return self.retrieved_ids
        return None if self.chunks is None else [chunk.id for chunk in self.chunks]


def _version_pair(item: Any) -> tuple[str, Any]:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        raise ValueError(f"versions: expected an object or a list of [key, value] pairs (got {item!r:.60})")
    return item[0], item[1]


def timestamp_text(ts: int | float | str | None) -> str | None:
    """A trace's ``ts`` as text: a string as written (ISO or epoch), an integer in decimal, a float in
    decimal without a fraction when it is a whole number below 2**53, else as Python's shortest ``repr``.
    """
    if ts is None or isinstance(ts, str):
        return ts
    if isinstance(ts, int):
        return str(ts)
    if ts.is_integer() and abs(ts) < EXACT_FLOAT_INTEGERS:
        return str(int(ts))
    return repr(ts)


def parse_embedded_citations(text: str) -> list[str] | None:
    """Ids of the first ``citations: [a, b]`` in ``text``; None when there is none."""
    match = _EMBEDDED_RE.search(text)
    if match is None:
        return None
    return [token for token in _SEPARATORS_RE.split(match.group(1)) if token]

"""Trace contract: one answer of the system under test.

:class:`Trace` loads every trace dialect: WFGY ``answer_json`` traces, text answers with
``citations: [a, b]`` embedded in the text plus ``chunks[].id``, and layered traces with stage ids,
versions and a claim ledger. How each dialect maps to the canonical columns is said once, in
``contracts.canonical``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    FiniteFloat,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)

from ragspine_pipeline.contracts.gold import SourceRef
from ragspine_pipeline.contracts.jsonl import KeyCountingDict
from ragspine_pipeline.contracts.types import MODEL_CONFIG, QUESTION_ALIASES, Id, Number, drop_nulls

TRACE_QID_ALIASES = ("qid", "q_id", "case_id", "id", "request_id")
RETRIEVED_ALIASES = ("retrieved_ids", "first_stage_ids")
PROMPT_TOKEN_ALIASES = ("prompt_tokens", "prompt")
COMPLETION_TOKEN_ALIASES = ("completion_tokens", "completion")

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
# `citations: [a, b]` inside an answer text (RE2 syntax: the canonical statement runs it in DuckDB).
EMBEDDED_CITATIONS = r"(?i)citations[ \t\r\n]*:[ \t\r\n]*\[([^\]]*)\]"
EMBEDDED_SEPARATORS = r"[, \t\r\n'\"]+"


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
    # Absent (null): the claim's word tokens decide its support; an empty list is vacuously supported,
    # as the permission-safe harness reads it.
    support_phrases: list[str] | None = None
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


class TraceContext(BaseModel):
    """One passage the service put in front of its model: its chunk ``id`` and ``text``. A trace's
    ``contexts`` stand for the evidence of its answer when no evidence registry is given (the
    faithfulness metrics and the judge read them); other keys are kept, unread."""

    model_config = MODEL_CONFIG

    id: Id
    text: str


class Outcome(BaseModel):
    """What the SUT observed about its own answer, for the QA gates. ``narrative_answer`` and
    ``retrieved_context`` feed the narrative gates (``scoring.narrative``); other keys (``route``, …)
    are kept, unread."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    clarification_mode: ObservedClarificationMode | None = None
    refused: StrictBool | None = None
    # A figure logged as text ("1702.0") is kept as text: a miss, as RAGSpine scores it (text is never
    # a number there); the run's warnings name such cases.
    found_value: Number | StrictStr | None = None
    found_unit: str | None = None
    found_source: SourceRef | None = None
    sources: list[SourceRef] | None = None
    narrative_answer: str | None = None
    retrieved_context: list[str | ContextPassage] | None = None

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
    contexts: list[TraceContext] | None = None
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


def _version_pair(item: Any) -> tuple[str, Any]:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        raise ValueError(f"versions: expected an object or a list of [key, value] pairs (got {item!r:.60})")
    return item[0], item[1]

"""Gold case (golden set) contract.

One canonical model, :class:`GoldCase`, loads every dialect through field aliases:
WFGY ``gold.jsonl`` (qid/question/answerable/gold_claim_substr/gold_citations), WFGY ``qaset.json``
(qid/q/answerable/gold_ids/gold_claim, a JSON array), RAGSpine ``qa_golden_set.jsonl``
(id/question/case_type/expected/tags/reference_date) and layered cases
(case_id/question/required_source_ids/required_points/tags).
"""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, StrictBool, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ragspine_pipeline.contracts.types import MODEL_CONFIG, QUESTION_ALIASES, Id, Number, drop_nulls

CaseType = Literal["numeric", "clarification", "refusal", "narrative", "composite"]
ClarificationMode = Literal["none", "ask_first", "answer_with_assumptions"]

QID_ALIASES = ("qid", "id", "case_id")
GOLD_CITATION_ALIASES = ("gold_citations", "gold_ids", "required_source_ids")


class SourceRef(BaseModel):
    """Where a figure comes from: a document and a locator inside it."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    doc: str
    locator: str | None = None


class Expected(BaseModel):
    """QA-gate expectations of a RAGSpine case (scored by ``scoring.qa_gates``)."""

    model_config = MODEL_CONFIG
    _nulls = model_validator(mode="before")(drop_nulls)

    clarification: ClarificationMode | None = None
    refuse: StrictBool | None = None
    value: Number | None = None
    unit: str | None = None
    source: SourceRef | None = None
    narrative_doc: str | None = None


class GoldCase(BaseModel):
    """One case of the golden set, whatever dialect it was written in."""

    model_config = MODEL_CONFIG

    qid: Id = Field(validation_alias=AliasChoices(*QID_ALIASES))
    question: str = Field(validation_alias=AliasChoices(*QUESTION_ALIASES))
    answerable: StrictBool
    gold_claim_substr: list[str] = Field(default_factory=list)
    gold_claim: str | None = None
    gold_citations: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices(*GOLD_CITATION_ALIASES)
    )
    required_points: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    case_type: CaseType | None = None
    expected: Expected | None = None
    reference_date: date | None = None
    # A canary: a case whose release outcome is known in advance. A known-good case must come out
    # releasable, a known-bad one blocked; one that comes out the other way blocks the release.
    expect: Literal["releasable", "blocked"] | None = None

    _tags_nulls = field_validator("tags", mode="before")(drop_nulls)

    @model_validator(mode="before")
    @classmethod
    def _infer_answerable(cls, data: Any) -> Any:
        """Answerability must be explicit or inferable.

        When ``answerable`` is absent: ``not expected.refuse`` if ``expected`` is present, else true if
        the gold citations are non-empty, else the line is rejected.
        """
        data = drop_nulls(data)
        if not isinstance(data, dict) or "answerable" in data:
            return data
        expected = data.get("expected")
        if isinstance(expected, dict) and isinstance(expected.get("refuse"), bool):
            return {**data, "answerable": not expected["refuse"]}
        citations = next((data[a] for a in GOLD_CITATION_ALIASES if a in data), None)
        if isinstance(citations, list) and citations:
            return {**data, "answerable": True}
        raise PydanticCustomError(
            "answerable_missing",
            "missing, and it cannot be inferred (no expected.refuse, no gold citations): "
            "answerability must be explicit",
            {"field": "answerable"},
        )

    @model_validator(mode="after")
    def _expectations_fit_the_case_type(self) -> GoldCase:
        """What each QA-gate family must state (the line is rejected otherwise)."""
        problem = qa_expectation_problem(self.case_type, self.expected)
        if problem is not None:
            field, message = problem
            raise PydanticCustomError("qa_expectations", message, {"field": field})
        return self


def qa_expectation_problem(case_type: str | None, expected: Expected | None) -> tuple[str, str] | None:
    """``(field, message)`` of the first rule a RAGSpine case breaks, or None.

    Refusal cases must expect a refusal; clarification cases cannot expect ``none``; numeric and
    composite cases need value, unit and source; narrative and composite cases need narrative_doc.
    ``contracts.canonical`` checks the same rules column-wise.
    """
    if case_type is None:
        return None
    if expected is None:
        return "expected", f"a {case_type} case needs 'expected'"
    if case_type == "refusal" and expected.refuse is not True:
        return "expected.refuse", "a refusal case must expect refuse: true"
    if case_type == "clarification" and expected.clarification in (None, "none"):
        return "expected.clarification", "a clarification case cannot expect clarification 'none'"
    if case_type in ("numeric", "composite"):
        for name in ("value", "unit", "source"):
            if getattr(expected, name) is None:
                return f"expected.{name}", f"a {case_type} case needs expected value, unit and source"
    if case_type in ("narrative", "composite") and expected.narrative_doc is None:
        return "expected.narrative_doc", f"a {case_type} case needs expected narrative_doc"
    return None

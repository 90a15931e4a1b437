"""Gold case (golden set) contract.

One canonical model, :class:`GoldCase`, loads every dialect through field aliases:
WFGY ``gold.jsonl`` (qid/question/answerable/gold_claim_substr/gold_citations), WFGY ``qaset.json``
(qid/q/answerable/gold_ids/gold_claim, a JSON array), RAGSpine ``qa_golden_set.jsonl``
(id/question/case_type/expected/tags/reference_date) and layered cases
(case_id/question/required_source_ids/required_points/tags).

What a RAGSpine case must state of ``expected`` for its ``case_type`` (RAGSpine's own loader rules) is
declared once, as the models of :data:`NEEDS`: the loader validates a case with them and
``ragspine-eval schema gold`` states them as ``if case_type … then expected …``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    GetJsonSchemaHandler,
    StrictBool,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ragspine_pipeline.contracts.types import (
    MODEL_CONFIG,
    QUESTION_ALIASES,
    Id,
    IsoDate,
    Number,
    TagText,
    drop_nulls,
)

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

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> dict:
        """The model's schema, and: with a value (not null), the unit and source (:class:`ValueNeeds`)."""
        schema = handler(core_schema)
        given = {"required": ["value"], "properties": {"value": {"not": {"type": "null"}}}}
        handler.resolve_ref_schema(schema)["allOf"] = [
            {"if": given, "then": handler(ValueNeeds.__pydantic_core_schema__)}
        ]
        return schema


class GoldCase(BaseModel):
    """One case of the golden set, whatever dialect it was written in."""

    model_config = MODEL_CONFIG

    qid: Id = Field(validation_alias=AliasChoices(*QID_ALIASES))
    question: str = Field(validation_alias=AliasChoices(*QUESTION_ALIASES))
    answerable: StrictBool
    # Absent is not empty: seed-000 finds an empty list contained and an absent one not.
    gold_claim_substr: list[str] | None = None
    gold_claim: str | None = None
    gold_citations: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices(*GOLD_CITATION_ALIASES)
    )
    required_points: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    tags: dict[str, TagText] = Field(default_factory=dict)
    case_type: CaseType | None = None
    expected: Expected | None = None
    reference_date: IsoDate | None = None
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
        """What each QA-gate family must state (:data:`NEEDS`; the line is rejected otherwise)."""
        problem = qa_expectation_problem(self.case_type, self.expected)
        if problem is not None:
            field, message, context = problem
            raise PydanticCustomError("qa_expectations", message, {"field": field, **context})
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> dict:
        """The model's schema, and what each case type needs of ``expected`` (:data:`NEEDS`) as
        ``if case_type is … then expected is …``, each derived from its model."""
        schema = handler(core_schema)
        cases = handler.resolve_ref_schema(schema)
        cases["allOf"] = [
            {
                "if": {"required": ["case_type"], "properties": {"case_type": {"const": case_type}}},
                "then": {
                    "required": ["expected"],
                    "properties": {"expected": handler(needs.__pydantic_core_schema__)},
                },
            }
            for case_type, needs in NEEDS.items()
        ]
        return schema


# -- what each QA-gate family must state ------------------------------------------------------------
#
# RAGSpine's golden-set loader rules, declared once as models: the loader validates a case's `expected`
# with the model of its case type (and with ValueNeeds when it expects a value); `ragspine-eval schema
# gold` states the same models as JSON Schema. Null means absent, as everywhere in the contracts.

NonEmptyText = Annotated[str, StringConstraints(min_length=1)]


class LocatedSource(SourceRef):
    """A source a figure is checked against: its document and the locator inside it."""

    locator: str


class _Needs(BaseModel):
    """What a case type needs of ``expected``; ``verb`` begins the rule a broken line is told."""

    model_config = MODEL_CONFIG
    verb: ClassVar[str] = "needs"


class NumericNeeds(_Needs):
    value: Number = Field(description="expected value (a number), unit and source")
    unit: NonEmptyText = Field(description="expected value, unit (not empty) and source")
    source: LocatedSource = Field(description="expected value, unit and source (with doc and locator)")


class NarrativeNeeds(_Needs):
    narrative_doc: NonEmptyText = Field(description="expected narrative_doc (not empty)")


class CompositeNeeds(NumericNeeds, NarrativeNeeds):
    pass


class RefusalNeeds(_Needs):
    verb: ClassVar[str] = "must"
    refuse: Literal[True] = Field(description="expect refuse: true")


class ClarificationNeeds(_Needs):
    verb: ClassVar[str] = "cannot"
    clarification: Literal["ask_first", "answer_with_assumptions"] = Field(
        description="expect clarification 'none' (ask_first or answer_with_assumptions)"
    )


class ValueNeeds(_Needs):
    """Whatever its type, a case that expects a value states the unit and the source it is checked on."""

    unit: str = Field(description="expected unit and source with its expected value")
    source: SourceRef = Field(description="expected unit and source with its expected value")


NEEDS: dict[str, type[_Needs]] = {
    "numeric": NumericNeeds,
    "composite": CompositeNeeds,
    "narrative": NarrativeNeeds,
    "refusal": RefusalNeeds,
    "clarification": ClarificationNeeds,
}
"""Case type -> what its ``expected`` must state (RAGSpine's loader rules)."""


def qa_expectation_problem(
    case_type: str | None, expected: Expected | None
) -> tuple[str, str, dict[str, Any]] | None:
    """``(field, message, context)`` of the first rule a RAGSpine case breaks, or None.

    A case with a ``case_type`` needs ``expected``, valid for the model of its type (:data:`NEEDS`):
    refusal cases must expect ``refuse: true``; clarification cases cannot expect ``none``; numeric and
    composite cases need a number ``value``, a ``unit`` that is not empty and a ``source`` with ``doc``
    and ``locator``; narrative and composite cases need a ``narrative_doc`` that is not empty. Any case
    that expects a ``value`` also states its ``unit`` and ``source`` (:class:`ValueNeeds`). ``context``
    holds the offending value as ``got`` when there is one.
    """
    if case_type is None and expected is None:
        return None
    if expected is None:
        return "expected", f"a {case_type} case needs 'expected'", {}
    given = expected.model_dump(exclude_none=True)
    checks = [NEEDS[case_type]] if case_type is not None else []
    if expected.value is not None:
        checks.append(ValueNeeds)
    for needs in checks:
        try:
            needs.model_validate(given)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            name = str(error["loc"][0])
            field = ".".join(["expected", *(str(part) for part in error["loc"])])
            rule = needs.model_fields[name].description
            message = f"a {case_type or 'QA'} case {needs.verb} {rule}"
            return field, message, ({} if error["type"] == "missing" else {"got": error["input"]})
    return None

"""From any dialect to the canonical columns: one SQL statement per record type, run by DuckDB.

A gold case, a trace or an evidence chunk, in whatever dialect it was written, is read into the
structure its model derives (``contracts.shape``: aliases kept apart, values kept as JSON), and the
statements here say — once — what each canonical column (``contracts.schemas``) is: which alias wins,
where a trace's claim, citations and retrieved ids come from, how a claim ledger, versions, tags, token
counts and the QA-gate observations become columns. Both readers run the same statement: the columnar
reader over the file as DuckDB reads it, the record reader over the records the models validated.

Besides the canonical columns each statement yields ``_usable``: whether the row satisfies the rules a
loader checks on canonical values (a trace names its case; a gold case's answerability is known), and
``extra`` (``", column"``): columns of the source to carry along.
"""

from __future__ import annotations

from pydantic import BaseModel

from ragspine_pipeline import duck
from ragspine_pipeline.contracts.gold import GOLD_CITATION_ALIASES, QID_ALIASES
from ragspine_pipeline.contracts.shape import json_structure, text
from ragspine_pipeline.contracts.trace import (
    COMPLETION_TOKEN_ALIASES,
    EMBEDDED_CITATIONS,
    EMBEDDED_SEPARATORS,
    PROMPT_TOKEN_ALIASES,
    RETRIEVED_ALIASES,
    TRACE_QID_ALIASES,
    Answer,
)
from ragspine_pipeline.contracts.types import QUESTION_ALIASES

STAGES = ("rerank_input_ids", "reranked_ids", "selected_context_ids", "selected_versions")


def _first(aliases: tuple[str, ...], prefix: str = "") -> str:
    """SQL: the first alias given (null means absent), as its JSON value."""
    names = [f'{prefix}"{alias}"' for alias in aliases]
    return f"coalesce({', '.join(names)})" if len(names) > 1 else names[0]


def _texts(values: str, name: str = "e") -> str:
    """SQL: a list of JSON strings as a list of text (null stays null)."""
    return f"[{text(name)} FOR {name} IN {values}]"


def _map(obj: str, sort: bool) -> str:
    """SQL: a JSON object of strings as a map of its non-null entries, in file order or by key."""
    entries = f"list_zip(json_keys({obj}), {obj} -> '$.*')"
    kept = f"[{{'key': p[1], 'value': p[2] ->> '$'}} FOR p IN {entries} IF json_type(p[2]) <> 'NULL']"
    return f"map_from_entries({f'list_sort({kept})' if sort else kept})"


def _as(model: type[BaseModel], value: str) -> str:
    return f"from_json({value}, {duck.literal(json_structure(model))})"


def gold_sql(source: str, extra: str = "") -> str:
    """The canonical gold columns of ``source`` (a relation read with ``shape.structure(GoldCase)``).

    ``answerable`` is inferred when absent: ``not expected.refuse``, else true when the gold citations
    are given and not empty; a case where neither applies is not usable (the record reader names it).
    """
    citations = _first(GOLD_CITATION_ALIASES)
    answerable = f"""coalesce(
            CAST(answerable AS BOOLEAN),
            NOT CAST(expected.refuse AS BOOLEAN),
            CASE WHEN len({citations}) > 0 THEN true END
        )"""
    return f"""
    SELECT
        {text(_first(QID_ALIASES))} AS qid,
        {text(_first(QUESTION_ALIASES))} AS question,
        {answerable} AS answerable,
        coalesce({_texts("gold_claim_substr")}, []) AS gold_claim_substr,
        -- a seed-000 case (nothing of the other dialects: no gold claim, required points, case type or
        -- expectations) naming no snippet list: never contained, as seed-000 scores it
        (
            {_texts("gold_claim_substr")} IS NULL AND {text("gold_claim")} IS NULL
            AND coalesce(len({_texts("required_points")}), 0) = 0
            AND {text("case_type")} IS NULL AND expected IS NULL
        ) AS seed_without_snippets,
        {text("gold_claim")} AS gold_claim,
        coalesce({_texts(citations)}, []) AS gold_citations,
        coalesce({_texts("required_points")}, []) AS required_points,
        coalesce({_map("tags", sort=False)}, MAP {{}}) AS tags,
        -- as YYYY-MM-DD, however it was written (YYYYMMDD, or the number 20260612)
        CASE WHEN regexp_full_match({text("reference_date")}, '\\d{{8}}')
            THEN strftime(strptime({text("reference_date")}, '%Y%m%d'), '%Y-%m-%d')
            ELSE {text("reference_date")} END AS reference_date,
        {text("case_type")} AS case_type,
        {text("expected.clarification")} AS expected_clarification,
        CAST(expected.refuse AS BOOLEAN) AS expected_refuse,
        CAST(expected.value AS DOUBLE) AS expected_value,
        {text("expected.unit")} AS expected_unit,
        {text("expected.source.doc")} AS expected_source_doc,
        {text("expected.source.locator")} AS expected_source_locator,
        {text("expected.narrative_doc")} AS expected_narrative_doc,
        {text("expect")} AS expect,
        {answerable} IS NOT NULL AS _usable{extra}
    FROM {source}
    """


def trace_sql(source: str, extra: str = "") -> str:
    """The canonical trace columns of ``source`` (a relation read with ``shape.structure(Trace)``).

    * ``claim``: ``answer.claim`` > ``answer_json.claim`` > a text ``answer`` > the ledger's texts joined
      by a space;
    * ``citations``: ``answer.citations`` > ``answer_json.citations`` > top-level ``citations`` >
      ``citations: [a, b]`` embedded in a text answer > the distinct ``citation_id``s of the ledger in
      order of first appearance; null when the answer carries no citation list at all;
    * ``retrieved_ids``: ``retrieved_ids`` > ``first_stage_ids`` > ``chunks[].id``;
    * ``claims``: the ledger, ``answer.claims`` > ``answer_json.claims``;
    * ``version_keys``: the keys of ``versions`` with a value, as written (an object, or a list of
      ``[key, value]`` pairs in which a key may repeat); ``index_version`` its ``index`` entry;
    * ``ts``: the event time as text: a string as written, an integer in decimal, a fractional number as
      its shortest decimal form, a whole number below 2**53 without a fraction;
    * ``tags``: the slice dimensions, sorted by key (null without tags).

    A trace with neither an id nor a question to join on is not usable (the record reader names it).
    """
    answer_object = f"CASE WHEN json_type(answer) = 'OBJECT' THEN {_as(Answer, 'answer')} END"
    answer_text = "CASE WHEN json_type(answer) = 'VARCHAR' THEN answer ->> '$' END"
    embedded = f"regexp_extract(answer_text, {duck.literal(EMBEDDED_CITATIONS)}, 1)"
    split = f"regexp_split_to_array({embedded}, {duck.literal(EMBEDDED_SEPARATORS)})"
    ledger_ids = "[c.citation_id FOR c IN ledger IF c.citation_id IS NOT NULL]"
    pairs = "CAST(versions AS JSON[])"
    ts_number = "CAST(ts AS DOUBLE)"
    stages = ", ".join(f"{_texts(stage)} AS {stage}" for stage in STAGES)
    return f"""
    WITH parsed AS (
        SELECT *, {answer_object} AS answer_object, {answer_text} AS answer_text FROM {source}
    ), ledgered AS (
        SELECT *, [
            {{
                'text': c.text ->> '$',
                'citation_id': c.citation_id ->> '$',
                'support_phrases': {_texts("c.support_phrases", "p")},
                'answer_point': c.answer_point ->> '$'
            }}
            FOR c IN coalesce(answer_object.claims, answer_json.claims)
        ] AS ledger
        FROM parsed
    )
    SELECT
        {text(_first(TRACE_QID_ALIASES))} AS qid,
        {text(_first(QUESTION_ALIASES))} AS question,
        coalesce(
            answer_object.claim ->> '$', answer_json.claim ->> '$', answer_text,
            array_to_string([c.text FOR c IN ledger], ' ')
        ) AS claim,
        coalesce(
            {_texts("answer_object.citations")},
            {_texts("answer_json.citations")},
            {_texts("citations")},
            CASE WHEN regexp_matches(answer_text, {duck.literal(EMBEDDED_CITATIONS)})
                THEN [t FOR t IN {split} IF t <> ''] END,
            [x FOR x, i IN {ledger_ids} IF list_position({ledger_ids}, x) = i]
        ) AS citations,
        coalesce({_texts(_first(RETRIEVED_ALIASES))}, [c.id ->> '$' FOR c IN chunks]) AS retrieved_ids,
        {stages},
        ledger AS claims,
        CASE json_type(versions)
            WHEN 'OBJECT' THEN [p[1] FOR p IN list_zip(json_keys(versions), versions -> '$.*')
                                IF json_type(p[2]) <> 'NULL']
            WHEN 'ARRAY' THEN [p ->> '$[0]' FOR p IN {pairs} IF json_type(p -> '$[1]') <> 'NULL']
        END AS version_keys,
        CASE json_type(versions)
            WHEN 'OBJECT' THEN versions ->> '$.index'
            WHEN 'ARRAY' THEN [p ->> '$[1]' FOR p IN {pairs} IF p ->> '$[0]' = 'index'][-1]
        END AS index_version,
        CASE
            WHEN json_type(ts) <> 'DOUBLE' THEN ts ->> '$'
            WHEN {ts_number} = floor({ts_number}) AND abs({ts_number}) < 9007199254740992
                THEN CAST(CAST({ts_number} AS BIGINT) AS VARCHAR)
            ELSE CAST({ts_number} AS VARCHAR)
        END AS ts,
        CASE WHEN tags IS NOT NULL THEN {_map("tags", sort=True)} END AS tags,
        CAST(latency_ms AS DOUBLE) AS latency_ms,
        CAST({_first(PROMPT_TOKEN_ALIASES, "token_usage.")} AS BIGINT) AS prompt_tokens,
        CAST({_first(COMPLETION_TOKEN_ALIASES, "token_usage.")} AS BIGINT) AS completion_tokens,
        CAST(outcome.refused AS BOOLEAN) AS outcome_refused,
        {text("outcome.clarification_mode")} AS outcome_clarification,
        CASE WHEN json_type(outcome.found_value) <> 'VARCHAR' THEN CAST(outcome.found_value AS DOUBLE) END
            AS outcome_found_value,
        CASE WHEN json_type(outcome.found_value) = 'VARCHAR' THEN outcome.found_value ->> '$' END
            AS outcome_found_value_text,
        {text("outcome.found_unit")} AS outcome_found_unit,
        {text("outcome.found_source.doc")} AS outcome_found_doc,
        {text("outcome.found_source.locator")} AS outcome_found_locator,
        [s.doc ->> '$' FOR s IN outcome.sources] AS outcome_source_docs,
        {text("outcome.narrative_answer")} AS outcome_narrative,
        [CASE json_type(e) WHEN 'VARCHAR' THEN e ->> '$' ELSE e ->> '$.text' END
            FOR e IN outcome.retrieved_context] AS outcome_context,
        [c.id ->> '$' FOR c IN contexts] AS context_ids,
        [c.text ->> '$' FOR c IN contexts] AS context_texts,
        {_first((*TRACE_QID_ALIASES, *QUESTION_ALIASES))} IS NOT NULL AS _usable{extra}
    FROM ledgered
    """


def evidence_sql(source: str, extra: str = "") -> str:
    """The canonical evidence registry columns of ``source``."""
    return f"""
    SELECT
        {text("chunk_id")} AS chunk_id,
        {text("document_id")} AS document_id,
        {text("parent_id")} AS parent_id,
        {text("version")} AS version,
        CAST(permitted AS BOOLEAN) AS permitted,
        CAST("current" AS BOOLEAN) AS "current",
        {text('"text"')} AS "text",
        true AS _usable{extra}
    FROM {source}
    """

"""From any dialect to the canonical columns: one SQL statement per record type, run by DuckDB.

A gold case, a trace or an evidence chunk, in whatever dialect it was written, is read into the typed
structure its model derives (``contracts.shape.typed_structure``: aliases kept apart, texts as text,
flags as flags, numbers as numbers; the few values whose JSON type matters later kept as JSON), and the
statements here say — once — what each canonical column (``contracts.schemas``) is: which alias wins,
where a trace's claim, citations and retrieved ids come from, how a claim ledger, versions, tags, token
counts and the QA-gate observations become columns. Both readers run the same statement: the fast read
over the columns it checked and typed (``contracts.fast``), the record reader over the records the
models validated.

Besides the canonical columns each statement yields ``_usable``: whether the row satisfies the rules a
loader checks on canonical values (a trace names its case; a gold case's answerability is known), and
``extra`` (``", column"``): columns of the source to carry along.
"""

from __future__ import annotations

from ragspine_pipeline import duck
from ragspine_pipeline.contracts.gold import GOLD_CITATION_ALIASES, QID_ALIASES
from ragspine_pipeline.contracts.shape import text
from ragspine_pipeline.contracts.trace import (
    COMPLETION_TOKEN_ALIASES,
    EMBEDDED_CITATIONS,
    EMBEDDED_SEPARATORS,
    PROMPT_TOKEN_ALIASES,
    RETRIEVED_ALIASES,
    TRACE_QID_ALIASES,
)
from ragspine_pipeline.contracts.types import QUESTION_ALIASES

STAGES = ("rerank_input_ids", "reranked_ids", "selected_context_ids", "selected_versions")


def _first(aliases: tuple[str, ...], prefix: str = "") -> str:
    """SQL: the first alias given (null means absent)."""
    names = [f'{prefix}"{alias}"' for alias in aliases]
    return f"coalesce({', '.join(names)})" if len(names) > 1 else names[0]


def _sorted_map(tags: str) -> str:
    """SQL: a map with its entries sorted by key (JSON key order means nothing)."""
    return f"map_from_entries(list_sort(map_entries({tags})))"


def gold_sql(source: str, extra: str = "") -> str:
    """The canonical gold columns of ``source`` (a relation of ``shape.typed_structure(GoldCase)``).

    ``answerable`` is inferred when absent: ``not expected.refuse``, else true when the gold citations
    are given and not empty; a case where neither applies is not usable (the record reader names it).
    """
    citations = _first(GOLD_CITATION_ALIASES)
    answerable = f"""coalesce(
            answerable,
            NOT expected.refuse,
            CASE WHEN len({citations}) > 0 THEN true END
        )"""
    reference_date = text("reference_date")
    return f"""
    SELECT
        {_first(QID_ALIASES)} AS qid,
        {_first(QUESTION_ALIASES)} AS question,
        {answerable} AS answerable,
        coalesce(gold_claim_substr, []) AS gold_claim_substr,
        -- a seed-000 case (nothing of the other dialects: no gold claim, required points, case type or
        -- expectations) naming no snippet list: never contained, as seed-000 scores it
        (
            gold_claim_substr IS NULL AND gold_claim IS NULL
            AND coalesce(len(required_points), 0) = 0
            AND case_type IS NULL AND expected IS NULL
        ) AS seed_without_snippets,
        gold_claim,
        coalesce({citations}, []) AS gold_citations,
        coalesce(required_points, []) AS required_points,
        coalesce(tags, MAP {{}}) AS tags,
        -- as YYYY-MM-DD, however it was written (YYYYMMDD, or the number 20260612)
        CASE WHEN regexp_full_match({reference_date}, '\\d{{8}}')
            THEN strftime(strptime({reference_date}, '%Y%m%d'), '%Y-%m-%d')
            ELSE {reference_date} END AS reference_date,
        case_type,
        expected.clarification AS expected_clarification,
        expected.refuse AS expected_refuse,
        expected.value AS expected_value,
        expected.unit AS expected_unit,
        expected.source.doc AS expected_source_doc,
        expected.source.locator AS expected_source_locator,
        expected.narrative_doc AS expected_narrative_doc,
        expect,
        {answerable} IS NOT NULL AS _usable{extra}
    FROM {source}
    """


def trace_sql(source: str, extra: str = "") -> str:
    """The canonical trace columns of ``source`` (a relation of ``shape.typed_structure(Trace)``).

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
    embedded = f"regexp_extract(answer_text, {duck.literal(EMBEDDED_CITATIONS)}, 1)"
    split = f"regexp_split_to_array({embedded}, {duck.literal(EMBEDDED_SEPARATORS)})"
    ledger_ids = "[c.citation_id FOR c IN ledger IF c.citation_id IS NOT NULL]"
    ts_number = "CAST(ts AS DOUBLE)"
    stages = ", ".join(STAGES)
    return f"""
    WITH ledgered AS (
        SELECT *, [
            {{
                'text': c.text,
                'citation_id': c.citation_id,
                'support_phrases': c.support_phrases,
                'answer_point': c.answer_point
            }}
            FOR c IN coalesce(answer.claims, answer_json.claims)
        ] AS ledger
        FROM {source}
    )
    SELECT
        {_first(TRACE_QID_ALIASES)} AS qid,
        {_first(QUESTION_ALIASES)} AS question,
        coalesce(
            answer.claim, answer_json.claim, answer_text,
            array_to_string([c.text FOR c IN ledger], ' ')
        ) AS claim,
        coalesce(
            answer.citations,
            answer_json.citations,
            citations,
            CASE WHEN regexp_matches(answer_text, {duck.literal(EMBEDDED_CITATIONS)})
                THEN [t FOR t IN {split} IF t <> ''] END,
            [x FOR x, i IN {ledger_ids} IF list_position({ledger_ids}, x) = i]
        ) AS citations,
        coalesce({_first(RETRIEVED_ALIASES)}, [c.id FOR c IN chunks]) AS retrieved_ids,
        {stages},
        ledger AS claims,
        [p.key FOR p IN versions IF p.value IS NOT NULL] AS version_keys,
        [p.value FOR p IN versions IF p.key = 'index'][-1] AS index_version,
        CASE
            WHEN json_type(ts) <> 'DOUBLE' THEN ts ->> '$'
            WHEN {ts_number} = floor({ts_number}) AND abs({ts_number}) < 9007199254740992
                THEN CAST(CAST({ts_number} AS BIGINT) AS VARCHAR)
            ELSE CAST({ts_number} AS VARCHAR)
        END AS ts,
        CASE WHEN tags IS NOT NULL THEN {_sorted_map("tags")} END AS tags,
        latency_ms,
        {_first(PROMPT_TOKEN_ALIASES, "token_usage.")} AS prompt_tokens,
        {_first(COMPLETION_TOKEN_ALIASES, "token_usage.")} AS completion_tokens,
        outcome.refused AS outcome_refused,
        outcome.clarification_mode AS outcome_clarification,
        CASE WHEN json_type(outcome.found_value) <> 'VARCHAR' THEN CAST(outcome.found_value AS DOUBLE) END
            AS outcome_found_value,
        CASE WHEN json_type(outcome.found_value) = 'VARCHAR' THEN outcome.found_value ->> '$' END
            AS outcome_found_value_text,
        outcome.found_unit AS outcome_found_unit,
        outcome.found_source.doc AS outcome_found_doc,
        outcome.found_source.locator AS outcome_found_locator,
        [s.doc FOR s IN outcome.sources] AS outcome_source_docs,
        outcome.narrative_answer AS outcome_narrative,
        [CASE json_type(e) WHEN 'VARCHAR' THEN e ->> '$' ELSE e ->> '$.text' END
            FOR e IN outcome.retrieved_context] AS outcome_context,
        [c.id FOR c IN contexts] AS context_ids,
        [c.text FOR c IN contexts] AS context_texts,
        {_first((*TRACE_QID_ALIASES, *QUESTION_ALIASES))} IS NOT NULL AS _usable{extra}
    FROM ledgered
    """


def evidence_sql(source: str, extra: str = "") -> str:
    """The canonical evidence registry columns of ``source``."""
    return f"""
    SELECT
        chunk_id,
        document_id,
        parent_id,
        version,
        permitted,
        "current",
        "text",
        true AS _usable{extra}
    FROM {source}
    """

"""From spans to traces (``contracts.spans``): the SQL that groups a relation of spans
(``contracts.span_relation``) by trace id into one trace per request, in the project's trace dialect."""

from __future__ import annotations

import json
import re

from ragspine_pipeline import duck
from ragspine_pipeline.contracts.span_settings import SpanSettings

# -- from spans to traces --------------------------------------------------------------------------


def _attr(key: str, within: str = "attrs") -> str:
    """SQL: the value (as text) of attribute ``key`` of a span (null when absent)."""
    return f"[a.value FOR a IN {within} IF a.key = {duck.literal(key)}][1]"


def _integer(value: str) -> str:
    return f"CAST(TRY_CAST({value} AS DOUBLE) AS BIGINT)"


def _unwrapped(value: str, mime: str, keys: tuple[str, ...]) -> str:
    """SQL: a root's ``input.value``/``output.value``: the text itself, or for a JSON value the first of
    ``keys`` it holds as a string (null when it holds none: the LLM span's messages then say it)."""
    picks = ", ".join(f"json_extract_string(try_cast({value} AS JSON), '$.{key}')" for key in keys)
    return f"CASE WHEN {mime} = 'application/json' THEN coalesce({picks}) ELSE {value} END"


_LISTS = (
    r"^(retrieval\.documents|reranker\.output_documents|llm\.input_messages|llm\.output_messages)"
    r"\.(\d+)\.(document\.id|document\.content|message\.role|message\.content)$"
)
"""The OpenInference lists read: documents (of retrievers and rerankers) and messages (of LLM spans)."""


def traces_sql(spans: str, settings: SpanSettings, request_ids: bool) -> str:
    """SQL: one row per trace of the relation ``spans``: ``trace_id``, ``line`` (the trace in the
    project's dialect, JSON) or ``error`` (why it is not a trace), ordered by the root's start."""
    version = settings.version_attribute
    case_id = settings.case_id_attribute
    if case_id is None:
        case_expr = "NULL::VARCHAR"
    elif case_id.startswith("metadata."):
        case_expr = (
            f"coalesce({_attr(case_id)}, "
            f"json_extract_string(try_cast({_attr('metadata')} AS JSON), "
            f"{duck.literal('$.' + json.dumps(case_id[len('metadata.') :]))}))"
        )
    else:
        case_expr = _attr(case_id)
    citation_attr = (
        _attr(settings.citation_attribute) if settings.citation_attribute is not None else "NULL::VARCHAR"
    )
    return f"""
    WITH s AS (
        SELECT
            trace_id, span_id, parent_id, start_ns, end_ns, error, status_message,
            upper({_attr("openinference.span.kind")}) AS kind,
            {_attr("input.value")} AS input_value,
            lower({_attr("input.mime_type")}) AS input_mime,
            {_attr("output.value")} AS output_value,
            lower({_attr("output.mime_type")}) AS output_mime,
            {_attr("session.id")} AS session_id,
            {_attr("user.id")} AS user_id,
            {_attr("metadata")} AS metadata,
            coalesce({_attr(version)}, {_attr(version, "res")}) AS version,
            {_attr(version)} AS own_version,
            {case_expr} AS case_id,
            {citation_attr} AS citation_value,
            {_integer(_attr("llm.token_count.prompt"))} AS prompt_tokens,
            {_integer(_attr("llm.token_count.completion"))} AS completion_tokens,
            [a FOR a IN attrs IF regexp_full_match(a.key, {duck.literal(_LISTS)})] AS listed
        FROM {spans}
    ), items AS (
        SELECT trace_id, span_id, start_ns,
            regexp_extract(a.key, {duck.literal(_LISTS)}, ['list', 'i', 'field']) AS p,
            a.value AS v
        FROM (SELECT trace_id, span_id, start_ns, unnest(listed) AS a FROM s)
    ), entries AS (
        SELECT trace_id, span_id, start_ns, p.list AS list, CAST(p.i AS INTEGER) AS i,
            max(v) FILTER (WHERE p.field IN ('document.id')) AS id,
            max(v) FILTER (WHERE p.field IN ('document.content', 'message.content')) AS content,
            max(v) FILTER (WHERE p.field = 'message.role') AS role
        FROM items GROUP BY ALL
    ), lists AS (
        SELECT trace_id,
            list(id ORDER BY start_ns, span_id, i)
                FILTER (WHERE list = 'retrieval.documents' AND id IS NOT NULL) AS retrieved_ids,
            list({{'id': id, 'text': content}} ORDER BY start_ns, span_id, i)
                FILTER (WHERE list = 'retrieval.documents' AND id IS NOT NULL AND content IS NOT NULL)
                AS contexts,
            list(id ORDER BY start_ns, span_id, i)
                FILTER (WHERE list = 'reranker.output_documents' AND id IS NOT NULL) AS reranked_ids,
            list(content ORDER BY start_ns, span_id, i)
                FILTER (WHERE list = 'llm.input_messages' AND role = 'user' AND content IS NOT NULL)
                AS user_messages,
            list(content ORDER BY start_ns DESC, span_id, i)
                FILTER (WHERE list = 'llm.output_messages' AND content IS NOT NULL) AS outputs
        FROM entries GROUP BY trace_id
    ), traces AS (
        SELECT
            trace_id,
            count(*) AS spans,
            count(*) FILTER (WHERE parent_id IS NULL) AS roots,
            arg_min(span_id, start_ns) FILTER (WHERE parent_id IS NULL) AS root_id,
            min(start_ns) FILTER (WHERE parent_id IS NULL) AS root_start,
            arg_min(end_ns - start_ns, start_ns) FILTER (WHERE parent_id IS NULL) AS root_ns,
            arg_min({_unwrapped("input_value", "input_mime", ("question", "query", "input"))}, start_ns)
                FILTER (WHERE parent_id IS NULL) AS root_question,
            arg_min({_unwrapped("output_value", "output_mime", ("answer", "output", "response"))}, start_ns)
                FILTER (WHERE parent_id IS NULL) AS root_answer,
            arg_min(own_version, start_ns) FILTER (WHERE parent_id IS NULL) AS root_version,
            arg_min(version, start_ns) FILTER (WHERE version IS NOT NULL) AS any_version,
            arg_min(session_id, (parent_id IS NOT NULL, start_ns)) FILTER (WHERE session_id IS NOT NULL)
                AS session_id,
            arg_min(user_id, (parent_id IS NOT NULL, start_ns)) FILTER (WHERE user_id IS NOT NULL) AS user_id,
            arg_min(metadata, (parent_id IS NOT NULL, start_ns)) FILTER (WHERE metadata IS NOT NULL)
                AS metadata,
            arg_min(case_id, (parent_id IS NOT NULL, start_ns)) FILTER (WHERE case_id IS NOT NULL) AS case_id,
            arg_min(citation_value, (parent_id IS NOT NULL, start_ns))
                FILTER (WHERE citation_value IS NOT NULL) AS citation_value,
            sum(prompt_tokens) FILTER (WHERE kind = 'LLM') AS prompt_tokens,
            sum(completion_tokens) FILTER (WHERE kind = 'LLM') AS completion_tokens,
            bool_or(error) AS failed,
            arg_min(status_message, start_ns) FILTER (WHERE error) AS failure
        FROM s GROUP BY trace_id
    ), assembled AS (
        SELECT t.*,
            coalesce(t.root_question, l.user_messages[-1]) AS question,
            coalesce(t.root_answer, l.outputs[1]) AS answer,
            l.retrieved_ids, l.contexts, l.reranked_ids,
            CASE WHEN json_type(try_cast(t.metadata AS JSON)) = 'OBJECT'
                THEN try(json_transform(t.metadata, '"MAP(VARCHAR, JSON)"')) END AS metadata_map
        FROM traces t LEFT JOIN lists l USING (trace_id)
    )
    SELECT
        trace_id,
        CASE
            WHEN roots = 0 THEN 'no root span (a span without a parent) among its ' || spans || ' span(s)'
            WHEN answer IS NULL THEN 'no answer: the root span has no output.value and no LLM span an '
                || 'output message' || CASE WHEN failed THEN ' (a span failed: '
                || coalesce(failure, 'status ERROR') || ')' ELSE '' END
            {"" if request_ids else _NO_QUESTION}
        END AS error,
        {"trace_id" if request_ids else "NULL::VARCHAR"} AS request_id,
        case_id AS qid,
        question,
        answer AS answer_text,
        {_citations(settings)} AS citations,
        retrieved_ids,
        contexts,
        reranked_ids,
        root_ns / 1e6 AS latency_ms,
        to_json(strftime(make_timestamp(root_start // 1000), '%Y-%m-%dT%H:%M:%S.%f+00:00')) AS ts,
        CASE WHEN prompt_tokens IS NOT NULL OR completion_tokens IS NOT NULL
            THEN struct_pack(
                prompt_tokens := TRY_CAST(prompt_tokens AS BIGINT), prompt := NULL::BIGINT,
                completion_tokens := TRY_CAST(completion_tokens AS BIGINT), completion := NULL::BIGINT
            ) END AS token_usage,
        {_tags()} AS tags,
        CASE WHEN coalesce(root_version, any_version) IS NOT NULL
            THEN [{{'key': 'index', 'value': coalesce(root_version, any_version)}}] END AS versions,
        NOT failed AS ok
    FROM assembled
    ORDER BY root_start NULLS LAST, trace_id
    """


_NO_QUESTION = """WHEN question IS NULL AND case_id IS NULL THEN 'no question to join a golden case on: '
                || 'the root span has no input.value and no LLM span a user message'"""

LINE = """
    SELECT trace_id, error, to_json(struct_pack(
        request_id := request_id,
        qid := qid,
        question := question,
        answer := answer_text,
        citations := citations,
        retrieved_ids := retrieved_ids,
        contexts := contexts,
        reranked_ids := reranked_ids,
        latency_ms := latency_ms,
        ts := ts,
        token_usage := struct_pack(
            prompt_tokens := token_usage.prompt_tokens, completion_tokens := token_usage.completion_tokens
        ),
        tags := tags,
        versions := map_from_entries(versions),
        ok := ok
    )) AS line
    FROM ({traces})
"""
"""SQL: each trace of :func:`traces_sql` as a line of the project's trace dialect (JSON)."""


def _citations(settings: SpanSettings) -> str:
    if settings.citation_pattern is not None:
        group = 1 if re.compile(settings.citation_pattern).groups else 0
        return f"regexp_extract_all(answer, {duck.literal(settings.citation_pattern)}, {group})"
    if settings.citation_attribute is not None:
        # A list attribute (OTLP's arrayValue), a JSON array in a string, or ids separated by commas.
        value = "try_cast(citation_value AS JSON)"
        return f"""CASE
            WHEN citation_value IS NULL THEN NULL
            WHEN json_type({value}, '$.values') = 'ARRAY'
                THEN [x ->> '$.stringValue' FOR x IN json_extract({value}, '$.values[*]')
                    IF x ->> '$.stringValue' IS NOT NULL]
            WHEN json_type({value}) = 'ARRAY' THEN try_cast({value} AS VARCHAR[])
            ELSE [trim(x) FOR x IN string_split(citation_value, ',') IF trim(x) <> '']
        END"""
    return "NULL::VARCHAR[]"


def _tags() -> str:
    """SQL: ``session.id``, ``user.id`` and the metadata keys as one map of texts (null without any)."""
    entries = (
        "list_concat("
        "CASE WHEN session_id IS NOT NULL THEN [{'key': 'session.id', 'value': session_id}] ELSE [] END, "
        "CASE WHEN user_id IS NOT NULL THEN [{'key': 'user.id', 'value': user_id}] ELSE [] END, "
        "[{'key': e.key, 'value': CASE WHEN json_type(e.value) = 'VARCHAR' THEN e.value ->> '$' "
        "ELSE CAST(e.value AS VARCHAR) END} FOR e IN map_entries(coalesce(metadata_map, MAP {})) "
        "IF e.value IS NOT NULL AND json_type(e.value) <> 'NULL'])"
    )
    return f"CASE WHEN len({entries}) > 0 THEN map_from_entries({entries}) END"

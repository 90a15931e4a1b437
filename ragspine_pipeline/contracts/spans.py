"""Traces from OpenTelemetry spans with the OpenInference semantic conventions, no export script.

Teams that trace their RAG service (the OpenTelemetry SDK with OpenInference's instrumentors, what
Arize Phoenix reads) have spans, not one line per request. Two forms are read:

* **OTLP/JSON**: ``ExportTraceServiceRequest`` objects (``resourceSpans[].scopeSpans[].spans[]``), one
  per line as the Collector's file exporter writes them, or one per file; hex trace and span ids;
  ``.gz`` too;
* **the flat span table** Phoenix shows: one span a row, ``context.trace_id``, ``context.span_id``,
  ``parent_id``, ``start_time``, ``end_time``, ``status_code`` and ``attributes.*`` columns (JSON lines
  or Parquet), the OpenInference lists nested (``attributes.retrieval.documents`` as a list of
  ``{"document.id", "document.content", "document.score"}``).

Spans are grouped by trace id into one trace per request, in the project's own trace dialect
(``contracts.trace``): as the typed columns the canonical statement reads (``score``, ``check-traces``),
or as trace lines (the sampler and the nightly store), so that every reader reads them as it reads any
trace file:

* ``question`` / answer: the root span's ``input.value`` / ``output.value`` (a JSON value of mime type
  ``application/json`` gives its ``question``/``query``/``input`` and ``answer``/``output``/``response``
  text), else the first LLM span's last user message and the last LLM span's output message;
* ``retrieved_ids`` and ``contexts``: the documents of the RETRIEVER spans (``retrieval.documents.N.
  document.{id,content}``) in the order of the spans' start and then of N; ``reranked_ids``: those of
  RERANKER spans (``reranker.output_documents``);
* ``latency_ms``: the root span's duration; ``ts``: its start (ISO 8601, UTC, in microseconds);
  ``token_usage``: the sum of the LLM spans' ``llm.token_count.prompt`` / ``.completion``;
* ``tags``: ``session.id``, ``user.id`` and each key of ``metadata`` (a JSON object); ``versions.index``:
  the attribute :attr:`SpanSettings.version_attribute` (``service.version`` by default) of the root span,
  else of any span, else of the resource;
* ``ok``: false when a span's status is ERROR;
* ``citations``: matched in the answer text by :attr:`SpanSettings.citation_pattern`, or read from the
  attribute :attr:`SpanSettings.citation_attribute` (a list of strings, or a JSON array in a string);
  without either the trace carries no citation list;
* ``qid``: the attribute :attr:`SpanSettings.case_id_attribute` (``metadata.<key>`` reads a metadata
  key); without it a golden replay joins on the question. ``request_id``: the trace id, when asked for
  (a production day: the nightly sample's de-duplication key).

Span kinds other than those are read only for their status. A trace with no root span (a span without a
parent), no answer, or (outside a production day) neither a question nor a case id to join a golden
case on is not a trace: it is returned as unusable, with its trace id and why.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import duck, inputs
from ragspine_pipeline.contracts.jsonl import read_errors
from ragspine_pipeline.errors import InputError

__all__ = [
    "SPAN_FORMATS",
    "SpanSettings",
    "SpanTraces",
    "iter_traces",
    "read_spans",
    "span_format",
    "span_traces",
    "typed_traces",
]

SpanFormat = Literal["otlp", "span_table"]
SPAN_FORMATS: tuple[str, ...] = ("otlp", "span_table")
_SNIFF_BYTES = 1 << 16
_PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class SpanSettings:
    """How a service's spans become its traces (see the module docstring)."""

    citation_pattern: str | None = None
    citation_attribute: str | None = None
    version_attribute: str = "service.version"
    case_id_attribute: str | None = None

    @classmethod
    def of(cls, holder: Any) -> SpanSettings:
        """The settings ``holder`` names by the same attribute names (a command's arguments, a
        resource's or a SUT's settings; one it lacks keeps its default); ValueError for a setting that
        cannot be."""
        return cls(**{f.name: getattr(holder, f.name, f.default) for f in fields(cls)})

    def __post_init__(self) -> None:
        if self.citation_pattern is not None:
            try:
                groups = re.compile(self.citation_pattern).groups
            except re.error as exc:
                raise ValueError(f"citation pattern {self.citation_pattern!r}: {exc}") from None
            if groups > 1:
                raise ValueError(
                    f"citation pattern {self.citation_pattern!r}: at most one group (the citation id)"
                )
            try:  # DuckDB runs it: RE2's syntax (no look-around, no back-references)
                duck.query(f"SELECT regexp_extract_all('', {duck.literal(self.citation_pattern)}, 0)")
            except duck.REFUSED as exc:
                reason = str(exc).split("\n")[0][:200]
                raise ValueError(
                    f"citation pattern {self.citation_pattern!r}: not RE2 syntax: {reason}"
                ) from None
        for name in ("citation_attribute", "version_attribute", "case_id_attribute"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ValueError(f"{name}: an attribute name, not a blank")


@dataclass(frozen=True)
class SpanTraces:
    """The traces of some span files: ``lines`` in the project's trace dialect (one JSON object each,
    ordered by the root span's start, then trace id) and ``unusable`` ``(trace id, why)`` of the traces
    that are not one."""

    lines: list[str]
    unusable: list[tuple[str, str]]


# -- which form a file is in -----------------------------------------------------------------------


def span_format(path: str | Path) -> SpanFormat | None:
    """``"otlp"`` or ``"span_table"`` when the file holds spans in one of the two forms, else None.

    Told from the file's first bytes: Parquet with a ``context.trace_id`` column, or a first JSON record
    with ``resourceSpans`` (OTLP) or ``context.trace_id`` (the span table)."""
    with read_errors(path), inputs.open_regular(path) as fh:
        head = fh.read(_SNIFF_BYTES)
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(Path(path), "rb") as fh:
                head = fh.read(_SNIFF_BYTES)
        except (OSError, EOFError):
            return None
    if head[:4] == _PARQUET_MAGIC:
        import pyarrow.parquet as pq  # only for a Parquet file: the commands start without it

        try:
            names = pq.read_schema(path).names
        except (OSError, pa.ArrowException):
            return None
        return "span_table" if "context.trace_id" in names else None
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return None
    first = text.split(b"\n", 1)[0]
    try:
        keys = json.loads(first).keys() if inputs.nesting_depth(first) <= inputs.MAX_DEPTH else []
    except (ValueError, AttributeError, RecursionError):
        # One object spread over lines (a request written per file, indented): its first key.
        found = re.match(rb'\{\s*"(resourceSpans|context\.trace_id)"', text)
        keys = [found.group(1).decode()] if found else []
    if "resourceSpans" in keys:
        return "otlp"
    if "context.trace_id" in keys:
        return "span_table"
    return None


# -- reading spans into one relation -----------------------------------------------------------------

_ANY_VALUE = {
    "stringValue": "VARCHAR",
    "intValue": "VARCHAR",
    "doubleValue": "VARCHAR",
    "boolValue": "VARCHAR",
    "arrayValue": "JSON",
}
_ATTRIBUTES = [{"key": "VARCHAR", "value": _ANY_VALUE}]
_OTLP_STRUCTURE = json.dumps(
    {
        "resourceSpans": [
            {
                "resource": {"attributes": _ATTRIBUTES},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "VARCHAR",
                                "spanId": "VARCHAR",
                                "parentSpanId": "VARCHAR",
                                "startTimeUnixNano": "VARCHAR",
                                "endTimeUnixNano": "VARCHAR",
                                "attributes": _ATTRIBUTES,
                                "status": {"code": "VARCHAR", "message": "VARCHAR"},
                            }
                        ]
                    }
                ],
            }
        ]
    }
)
"""What is read of an ``ExportTraceServiceRequest`` (the rest — scopes, names, events, links — is not).
Objects are read whole and typed with ``from_json``: many times faster than ``read_json`` with typed
columns over the Collector's long lines. An attribute's value is kept as text: a string as it is, a
number or flag in its JSON spelling (an int64 is a string in OTLP/JSON already), a list as its
``arrayValue`` JSON."""
_VALUE_TEXT = (
    "coalesce({v}.stringValue, {v}.intValue, {v}.doubleValue, {v}.boolValue, CAST({v}.arrayValue AS VARCHAR))"
)
_ERROR_CODES = "('2', 'STATUS_CODE_ERROR', 'ERROR')"


def _read_keys(settings: SpanSettings) -> frozenset[str]:
    """The attribute keys the traces are made of (beside the OpenInference lists: :data:`_LIST_PREFIXES`)."""
    named = (settings.version_attribute, settings.case_id_attribute, settings.citation_attribute)
    return _KEYS | {key for key in named if key is not None}


_KEYS = frozenset(
    {
        "openinference.span.kind",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "session.id",
        "user.id",
        "metadata",
        "llm.token_count.prompt",
        "llm.token_count.completion",
    }
)
_LIST_PREFIXES = (
    "retrieval.documents.",
    "reranker.output_documents.",
    "llm.input_messages.",
    "llm.output_messages.",
)


def _otlp_sql(path: Path, keys: frozenset[str]) -> str:
    """SQL: the spans of an OTLP/JSON file as the relation :func:`_traces_sql` reads, with the attributes
    of ``keys`` and the OpenInference lists (every other attribute is dropped as it is read: the
    Collector's files carry many, and each costs its Arrow round trip)."""
    listed = duck.literal(str(path))
    value = _VALUE_TEXT.format(v="a.value")
    wanted = " OR ".join(
        [f"a.key IN ({', '.join(duck.literal(k) for k in sorted(keys))})"]
        + [f"starts_with(a.key, {duck.literal(prefix)})" for prefix in _LIST_PREFIXES]
    )
    return f"""
    WITH requests AS (
        SELECT unnest(from_json(json, {duck.literal(_OTLP_STRUCTURE)}).resourceSpans) AS rs
        FROM read_json_objects({listed}, format = 'auto', maximum_object_size = {inputs.MAX_LINE_BYTES})
    ), scopes AS (
        SELECT rs.resource.attributes AS res, unnest(rs.scopeSpans) AS ss FROM requests
    ), spans AS (
        SELECT res, unnest(ss.spans) AS s FROM scopes
    )
    SELECT
        lower(s.traceId) AS trace_id,
        lower(s.spanId) AS span_id,
        nullif(lower(s.parentSpanId), '') AS parent_id,
        TRY_CAST(s.startTimeUnixNano AS BIGINT) AS start_ns,
        TRY_CAST(s.endTimeUnixNano AS BIGINT) AS end_ns,
        coalesce(s.status.code IN {_ERROR_CODES}, false) AS error,
        s.status.message AS status_message,
        [{{'key': a.key, 'value': {value}}} FOR a IN coalesce(s.attributes, []) IF {wanted}] AS attrs,
        [{{'key': a.key, 'value': {value}}} FOR a IN coalesce(res, []) IF {wanted}] AS res
    FROM spans
    """


def _value_text(value: Any) -> str:
    """A value of the span table as the text an OTLP attribute's value is read as: a string as it is, a
    number or flag in its JSON spelling, a list as OTLP's ``arrayValue``, an object as its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return json.dumps({"values": [_any_value(v) for v in value]})
    return json.dumps(value, default=str)


def _any_value(value: Any) -> dict:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value if isinstance(value, str) else json.dumps(value, default=str)}


def _flat_attributes(row: dict[str, Any]) -> list[dict[str, str]]:
    """The ``attributes.*`` columns of one span-table row as OTLP's flat keys: a list of objects (the
    OpenInference documents and messages) becomes ``<key>.<i>.<field>``, an object (``metadata``) its
    JSON text, as the instrumentors set them."""
    flat: list[dict[str, str]] = []
    for column, value in row.items():
        if not column.startswith("attributes.") or value is None:
            continue
        key = column[len("attributes.") :]
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                for field, inner in item.items():
                    if inner is not None:
                        flat.append({"key": f"{key}.{i}.{field}", "value": _value_text(inner)})
            continue
        flat.append({"key": key, "value": _value_text(value)})
    return flat


def _nanoseconds(value: Any, where: str, line: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, (int, float)):
        return int(value)
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise InputError(where, f"not an ISO 8601 time: {str(value)[:40]!r}", line) from None
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


_ANY_VALUES = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
_SPANS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_id", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("error", pa.bool_()),
        ("status_message", pa.string()),
        ("attrs", _ANY_VALUES),
        ("res", _ANY_VALUES),
    ]
)


def _table_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic == _PARQUET_MAGIC:
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, {k: v for k, v in row.items() if v is not None}
        return
    opener = gzip.open if magic[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        for line_no, line in enumerate(fh, start=1):
            if line.strip():
                record = inputs.loads(line, str(path), line_no)
                if not isinstance(record, dict):
                    raise InputError(str(path), "expected one span (a JSON object) per line", line_no)
                yield line_no, record


def _span_table(path: Path) -> pa.Table:
    """The spans of a span table (JSON lines or Parquet) as the relation :func:`_traces_sql` reads."""
    rows: dict[str, list] = {name: [] for name in _SPANS_SCHEMA.names}
    with read_errors(path):
        for line, row in _table_rows(path):
            trace_id = row.get("context.trace_id")
            if not isinstance(trace_id, str) or not trace_id.strip():
                raise InputError(str(path), "a span needs its trace id", line, None, "context.trace_id")
            attrs = _flat_attributes(row)
            if "span_kind" in row and not any(a["key"] == "openinference.span.kind" for a in attrs):
                attrs.append({"key": "openinference.span.kind", "value": _value_text(row["span_kind"])})
            rows["trace_id"].append(trace_id.lower())
            rows["span_id"].append(str(row.get("context.span_id", "")).lower())
            parent = row.get("parent_id")
            rows["parent_id"].append(str(parent).lower() if parent else None)
            rows["start_ns"].append(_nanoseconds(row.get("start_time"), str(path), line))
            rows["end_ns"].append(_nanoseconds(row.get("end_time"), str(path), line))
            rows["error"].append(
                str(row.get("status_code", "")).upper() in ("ERROR", "STATUS_CODE_ERROR", "2")
            )
            rows["status_message"].append(row.get("status_message") or None)
            rows["attrs"].append(attrs)
            rows["res"].append([])
    return pa.table(rows, schema=_SPANS_SCHEMA)


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


def _traces_sql(spans: str, settings: SpanSettings, request_ids: bool) -> str:
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

_LINE = """
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
"""SQL: each trace of :func:`_traces_sql` as a line of the project's trace dialect (JSON)."""


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


def read_spans(path: str | Path, settings: SpanSettings, form: SpanFormat | None = None) -> pa.Table:
    """The spans of one file (``form``: sniffed when not given) as one relation: trace, span and parent
    ids (lower-case hex), start and end (ns), whether the span failed, and its attributes with the
    resource's, as OTLP's flat ``{key, value}`` pairs, the value as text. Of an OTLP file only the
    attributes the traces are made of are read (those ``settings`` name included).

    Raises InputError naming the file when it is not spans in either form, or DuckDB cannot read it."""
    path = Path(path)
    form = form or span_format(path)
    if form is None:
        raise InputError(str(path), "not OpenTelemetry spans (neither OTLP/JSON nor the flat span table)")
    if form == "span_table":
        return _span_table(path)
    try:
        return duck.query(_otlp_sql(path, _read_keys(settings))).cast(_SPANS_SCHEMA)
    except duck.REFUSED as exc:
        message = " ".join(str(exc).split("\n")[0].split())[:300]
        raise InputError(str(path), f"not OpenTelemetry spans as OTLP/JSON: {message}") from None


def iter_traces(
    spans: pa.Table, settings: SpanSettings, *, request_ids: bool = False
) -> Iterator[tuple[str, str | None, str]]:
    """The traces of ``spans`` (:func:`read_spans`, of one file or several concatenated) as
    ``(trace id, why it is not a trace or None, the trace as a line of the project's dialect)``, ordered
    by the root span's start, then trace id; DuckDB hands them over in batches, never all at once.
    ``request_ids``: each trace's id is its request id (a production day)."""
    sql = _LINE.format(traces=_traces_sql("spans", settings, request_ids))
    for batch in duck.batches(sql, 1 << 16, spans=spans):
        yield from zip(*(batch.column(n).to_pylist() for n in ("trace_id", "error", "line")), strict=True)


def typed_traces(
    path: str | Path, settings: SpanSettings, form: SpanFormat | None = None
) -> tuple[pa.Table, list[tuple[str, str]]]:
    """The traces of one span file as the typed structure of the ``Trace`` model
    (``shape.typed_structure``: what the canonical statement reads; the columns it lacks are absent) and
    the ``(trace id, why)`` of the spans that are not a trace. ``form``: as :func:`span_format` told
    it, when the caller has asked already."""
    spans = read_spans(path, settings, form)
    try:
        traces = duck.query(_traces_sql("spans", settings, False), spans=spans)
    except duck.REFUSED as exc:
        message = " ".join(str(exc).split("\n")[0].split())[:300]
        raise InputError(str(path), f"cannot group the spans into traces: {message}") from None
    failed = traces.column("error").is_valid()
    unusable = list(
        zip(
            traces.column("trace_id").filter(failed).to_pylist(),
            traces.column("error").filter(failed).to_pylist(),
            strict=True,
        )
    )
    typed = traces.filter(pc.invert(failed)).drop_columns(["trace_id", "error"])
    return typed, unusable


def span_traces(
    files: Sequence[str | Path], settings: SpanSettings, *, request_ids: bool = False
) -> SpanTraces:
    """The traces of span ``files`` (each OTLP/JSON or a span table), grouped by trace id across the
    files. Raises InputError, naming the file, for a file that is not spans."""
    tables = [read_spans(f, settings) for f in files]
    spans = pa.concat_tables(tables) if tables else _SPANS_SCHEMA.empty_table()
    usable: list[str] = []
    unusable: list[tuple[str, str]] = []
    for trace_id, error, line in iter_traces(spans, settings, request_ids=request_ids):
        if error is None:
            usable.append(line)
        else:
            unusable.append((trace_id, error))
    return SpanTraces(usable, unusable)

"""OpenTelemetry span files read into one relation of spans (``contracts.spans``): which of the two forms
a file is in (OTLP/JSON, or the flat span table Phoenix shows), and its spans with their ids, times,
status and attributes, the values as text."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragspine_pipeline import duck, inputs
from ragspine_pipeline.contracts.jsonl import read_errors
from ragspine_pipeline.contracts.span_settings import SpanFormat, SpanSettings
from ragspine_pipeline.errors import InputError

_SNIFF_BYTES = 1 << 16
_PARQUET_MAGIC = b"PAR1"


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
    """SQL: the spans of an OTLP/JSON file as the relation ``span_grouping.traces_sql`` reads, with the
    attributes of ``keys`` and the OpenInference lists (every other attribute is dropped as it is read: the
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
SPANS_SCHEMA = pa.schema(
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
    """The spans of a span table (JSON lines or Parquet) as the relation ``span_grouping.traces_sql``
    reads."""
    rows: dict[str, list] = {name: [] for name in SPANS_SCHEMA.names}
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
    return pa.table(rows, schema=SPANS_SCHEMA)


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
        return duck.query(_otlp_sql(path, _read_keys(settings))).cast(SPANS_SCHEMA)
    except duck.REFUSED as exc:
        message = " ".join(str(exc).split("\n")[0].split())[:300]
        raise InputError(str(path), f"not OpenTelemetry spans as OTLP/JSON: {message}") from None

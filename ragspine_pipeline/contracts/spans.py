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

The settings are ``contracts.span_settings``; reading a file into one relation of spans,
``contracts.span_relation``; the SQL that groups spans into traces, ``contracts.span_grouping``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import duck
from ragspine_pipeline.contracts.span_grouping import LINE, traces_sql
from ragspine_pipeline.contracts.span_relation import SPANS_SCHEMA, read_spans, span_format
from ragspine_pipeline.contracts.span_settings import SPAN_FORMATS, SpanFormat, SpanSettings
from ragspine_pipeline.errors import InputError

__all__ = [
    "SPAN_FORMATS",
    "SpanFormat",
    "SpanSettings",
    "SpanTraces",
    "iter_traces",
    "read_spans",
    "span_format",
    "span_traces",
    "typed_traces",
]


@dataclass(frozen=True)
class SpanTraces:
    """The traces of some span files: ``lines`` in the project's trace dialect (one JSON object each,
    ordered by the root span's start, then trace id) and ``unusable`` ``(trace id, why)`` of the traces
    that are not one."""

    lines: list[str]
    unusable: list[tuple[str, str]]


def iter_traces(
    spans: pa.Table, settings: SpanSettings, *, request_ids: bool = False
) -> Iterator[tuple[str, str | None, str]]:
    """The traces of ``spans`` (:func:`read_spans`, of one file or several concatenated) as
    ``(trace id, why it is not a trace or None, the trace as a line of the project's dialect)``, ordered
    by the root span's start, then trace id; DuckDB hands them over in batches, never all at once.
    ``request_ids``: each trace's id is its request id (a production day)."""
    sql = LINE.format(traces=traces_sql("spans", settings, request_ids))
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
        traces = duck.query(traces_sql("spans", settings, False), spans=spans)
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
    spans = pa.concat_tables(tables) if tables else SPANS_SCHEMA.empty_table()
    usable: list[str] = []
    unusable: list[tuple[str, str]] = []
    for trace_id, error, line in iter_traces(spans, settings, request_ids=request_ids):
        if error is None:
            usable.append(line)
        else:
            unusable.append((trace_id, error))
    return SpanTraces(usable, unusable)

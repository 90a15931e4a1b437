"""A retrieve-then-answer application traced the way production teams trace theirs: the OpenTelemetry SDK
with the OpenInference semantic conventions (what Arize Phoenix reads), the official OpenAI client
instrumented by ``OpenAIInstrumentor``, against a loopback stand-in LLM. The tests of the span readers
feed on what it writes, so every span is real SDK output.

- :class:`StandInLLM`: an OpenAI-compatible ``POST /v1/chat/completions`` on loopback, answering from a
  table (or a callable) of question → answer, with deterministic token counts; a question set to fail
  gets HTTP 500 with an OpenAI-style error body.
- :class:`TracedRagApp`: word-overlap retrieval over a small corpus (a RETRIEVER span), an optional
  reranker (a RERANKER span) and the instrumented chat completion (the LLM span the instrumentor makes),
  under a CHAIN root span. :meth:`TracedRagApp.ask` returns an :class:`AskResult`, which also renders the
  same request as the team would have logged it in RAGSpine's own dialect (:meth:`AskResult.project_line`).
- :class:`CollectorFileExporter`: OTLP/JSON lines as the OpenTelemetry Collector writes them (its file
  exporter in one file, or its S3 exporter's ``year=/month=/day=/hour=/minute=`` partitions).
- :class:`PhoenixSpanTable`: the flat span table Phoenix shows (``get_spans_dataframe()``), as JSON Lines
  or Parquet.

Only one :class:`TracedRagApp` may be open at a time in a process: ``OpenAIInstrumentor`` is a singleton
that patches ``openai.OpenAI.request`` for every client until the app is closed.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import itertools
import json
import random
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import openai
import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.json_format import MessageToDict
from openinference.instrumentation import using_attributes
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import (
    DocumentAttributes,
    OpenInferenceMimeTypeValues,
    OpenInferenceSpanKindValues,
    RerankerAttributes,
    SpanAttributes,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from tests.loopback import LoopbackServer, chat_completion, send_json

DEFAULT_ANSWER = "I don't know."
MODEL = "stand-in"

# ---------------------------------------------------------------------------------------------------------
# The stand-in LLM


def count_words(text: str) -> int:
    return len(text.split())


class StandInLLM(LoopbackServer):
    """An OpenAI-compatible chat-completions endpoint on loopback. ``answers`` maps the last user
    message's text (the question) to the answer, or is a callable doing so; a question missing from the
    table gets :data:`DEFAULT_ANSWER`. A question in ``fail`` gets HTTP 500 with an OpenAI error body.
    Tokens: prompt = words of all the messages, completion = words of the answer. ``requests`` holds
    every request body received."""

    def __init__(
        self, answers: Mapping[str, str] | Callable[[str], str], *, fail: Iterable[str] = ()
    ) -> None:
        self.answers = answers
        self.fail = set(fail)
        self.requests: list[dict] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        super().__init__(self._handler())

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return self.origin + "/v1"

    def answer_for(self, question: str) -> str:
        if callable(self.answers):
            return self.answers(question)
        return self.answers.get(question, DEFAULT_ANSWER)

    def reply(self, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(body)
            number = next(self._ids)
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        question = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        if question in self.fail:
            error = {
                "message": "The stand-in LLM failed.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
            return 500, {"error": error}
        content = self.answer_for(question)
        prompt_tokens = sum(count_words(m["content"]) for m in messages if isinstance(m.get("content"), str))
        completion_tokens = count_words(content)
        reply = chat_completion(
            f"chatcmpl-standin-{number}", body.get("model", MODEL), content, prompt_tokens, completion_tokens
        )
        return 200, reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the OpenAI client pools its connections

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "no such route", "type": "invalid_request"}})
                self._send(*server.reply(json.loads(body or b"{}")))

            def _send(self, status: int, payload: dict) -> None:
                send_json(self, status, payload)

            def log_message(self, format: str, *args) -> None:
                pass

        return Handler


# ---------------------------------------------------------------------------------------------------------
# The application


@dataclass(frozen=True)
class AskResult:
    """One request as the application saw it: what it retrieved, what it answered, how long its root span
    lasted (``start_ns``/``end_ns`` as the SDK recorded them), and the error when the LLM call failed."""

    trace_id: str
    question: str
    answer: str | None
    retrieved_ids: list[str]
    retrieved_contents: list[str]
    reranked_ids: list[str] | None
    prompt_tokens: int | None
    completion_tokens: int | None
    start_ns: int
    end_ns: int
    service_version: str
    session_id: str | None = None
    user_id: str | None = None
    metadata: dict[str, Any] | None = None
    error: str | None = None

    @property
    def latency_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def context_ids(self) -> list[str]:
        """The passages put in front of the model, in the order it saw them."""
        return self.reranked_ids if self.reranked_ids is not None else self.retrieved_ids

    def project_line(self) -> dict[str, Any]:
        """The request as the team would have logged it in RAGSpine's own trace dialect, from what the
        application knows (not from its spans). Keys without a value are left out."""
        texts = dict(zip(self.retrieved_ids, self.retrieved_contents, strict=True))
        tags = {"session.id": self.session_id, "user.id": self.user_id}
        tags.update({key: str(value) for key, value in (self.metadata or {}).items()})
        tags = {key: value for key, value in tags.items() if value is not None}
        usage = None
        if self.prompt_tokens is not None or self.completion_tokens is not None:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        line = {
            "request_id": self.trace_id,
            "question": self.question,
            "answer": self.answer,
            "retrieved_ids": list(self.retrieved_ids),
            "reranked_ids": list(self.reranked_ids) if self.reranked_ids is not None else None,
            # The passages as the retriever ranked them (a reranker's order is its reranked_ids).
            "contexts": [{"id": doc_id, "text": texts[doc_id]} for doc_id in self.retrieved_ids],
            "latency_ms": self.latency_ms,
            "token_usage": usage,
            "tags": tags or None,
            "versions": {"index": self.service_version},
            "ts": iso_utc(self.start_ns),
            "ok": self.error is None,
        }
        return {key: value for key, value in line.items() if value is not None}


def iso_utc(time_ns: int) -> str:
    """``2026-11-28T13:05:00.123456+00:00``: nanoseconds since the epoch, truncated to microseconds."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    return moment.isoformat(timespec="microseconds")


_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class TracedRagApp:
    """The application under observation. Spans go to ``exporters`` (each behind a
    ``SimpleSpanProcessor``: one span per export call) and to ``processors`` as given (a
    ``BatchSpanProcessor``, say), through a ``TracerProvider`` of its own whose Resource names the
    service and its version. A context manager; :meth:`close` uninstruments the OpenAI client."""

    def __init__(
        self,
        corpus: Mapping[str, str],
        llm_base_url: str,
        *,
        service_version: str,
        exporters: Sequence[SpanExporter] = (),
        processors: Sequence[SpanProcessor] = (),
        top_k: int = 3,
        rerank: bool = False,
        service_name: str = "support-rag",
    ) -> None:
        self.corpus = dict(corpus)
        self.service_version = service_version
        self.top_k = top_k
        self.rerank = rerank
        self._instrumentor = OpenAIInstrumentor()  # a singleton: one instrumentation per process
        if self._instrumentor.is_instrumented_by_opentelemetry:
            raise RuntimeError("openai is instrumented already (another TracedRagApp open?): close it first")
        resource = Resource.create({SERVICE_NAME: service_name, SERVICE_VERSION: service_version})
        self.provider = TracerProvider(resource=resource)
        for exporter in exporters:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        for processor in processors:
            self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("ragspine.tests.traced_app", "0.1.0")
        self.client = openai.OpenAI(base_url=llm_base_url, api_key="test-key", max_retries=0, timeout=10.0)
        self._closed = False
        self._instrumentor.instrument(tracer_provider=self.provider)
        if not self._instrumentor.is_instrumented_by_opentelemetry:  # a dependency conflict, logged
            raise RuntimeError("OpenAIInstrumentor refused to instrument the installed openai")

    def __enter__(self) -> TracedRagApp:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Uninstrument, close the client, export what is pending and shut the exporters down."""
        if self._closed:
            return
        self._closed = True
        self._instrumentor.uninstrument()
        self.client.close()
        self.provider.shutdown()

    def flush(self) -> None:
        """Make the span processors export every ended span now."""
        self.provider.force_flush()

    def retrieve(self, question: str) -> list[tuple[str, str, float]]:
        """The ``top_k`` passages sharing most words with the question: (id, text, score), score the share
        of the question's words in the passage; ties by id."""
        asked = words(question)
        scored = [
            (doc_id, text, round(len(asked & words(text)) / max(len(asked), 1), 6))
            for doc_id, text in self.corpus.items()
        ]
        scored.sort(key=lambda doc: (-doc[2], doc[0]))
        return scored[: self.top_k]

    def ask(
        self,
        question: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AskResult:
        """Answer ``question``: retrieve, maybe rerank, ask the LLM. An LLM error is recorded on the root
        span (status ERROR) and returned in :attr:`AskResult.error`, never raised."""
        metadata = dict(metadata) if metadata is not None else None
        answer = error = None
        prompt_tokens = completion_tokens = None
        reranked: list[tuple[str, str, float]] | None = None
        with self._tracer.start_as_current_span("rag.query") as root:
            root.set_attributes(
                {
                    SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.CHAIN.value,
                    SpanAttributes.INPUT_VALUE: question,
                    SpanAttributes.INPUT_MIME_TYPE: OpenInferenceMimeTypeValues.TEXT.value,
                }
            )
            if session_id is not None:
                root.set_attribute(SpanAttributes.SESSION_ID, session_id)
            if user_id is not None:
                root.set_attribute(SpanAttributes.USER_ID, user_id)
            if metadata is not None:
                root.set_attribute(SpanAttributes.METADATA, json.dumps(metadata))
            retrieved = self._retrieve_span(question)
            contexts = retrieved
            if self.rerank:
                reranked = contexts = self._rerank_span(question, retrieved)
            passages = "\n\n".join(f"[{doc_id}] {text}" for doc_id, text, _ in contexts)
            messages = [
                {"role": "system", "content": f"Answer from these passages only.\n\n{passages}"},
                {"role": "user", "content": question},
            ]
            try:
                # As Phoenix's docs suggest: the instrumentor copies these onto the LLM span too.
                with using_attributes(session_id=session_id or "", user_id=user_id or "", metadata=metadata):
                    completion = self.client.chat.completions.create(model=MODEL, messages=messages)
            except openai.OpenAIError as exc:
                error = f"{type(exc).__name__}: {exc}"
                root.record_exception(exc)
                root.set_status(Status(StatusCode.ERROR, error))
            else:
                answer = completion.choices[0].message.content
                if completion.usage is not None:
                    prompt_tokens = completion.usage.prompt_tokens
                    completion_tokens = completion.usage.completion_tokens
                root.set_attributes(
                    {
                        SpanAttributes.OUTPUT_VALUE: answer or "",
                        SpanAttributes.OUTPUT_MIME_TYPE: OpenInferenceMimeTypeValues.TEXT.value,
                    }
                )
                root.set_status(Status(StatusCode.OK))
        assert isinstance(root, ReadableSpan) and root.start_time is not None and root.end_time is not None
        return AskResult(
            trace_id=format(root.get_span_context().trace_id, "032x"),
            question=question,
            answer=answer,
            retrieved_ids=[doc_id for doc_id, _, _ in retrieved],
            retrieved_contents=[text for _, text, _ in retrieved],
            reranked_ids=[doc_id for doc_id, _, _ in reranked] if reranked is not None else None,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            start_ns=root.start_time,
            end_ns=root.end_time,
            service_version=self.service_version,
            session_id=session_id,
            user_id=user_id,
            metadata=metadata,
            error=error,
        )

    def _retrieve_span(self, question: str) -> list[tuple[str, str, float]]:
        with self._tracer.start_as_current_span("retrieve") as span:
            span.set_attributes(
                {
                    SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.RETRIEVER.value,
                    SpanAttributes.INPUT_VALUE: question,
                }
            )
            retrieved = self.retrieve(question)
            span.set_attributes(document_attributes(SpanAttributes.RETRIEVAL_DOCUMENTS, retrieved))
            span.set_status(Status(StatusCode.OK))
        return retrieved

    def _rerank_span(
        self, question: str, retrieved: list[tuple[str, str, float]]
    ) -> list[tuple[str, str, float]]:
        """A stand-in reranker: the retrieved passages in reverse, scored by their new rank."""
        with self._tracer.start_as_current_span("rerank") as span:
            reranked = [
                (doc_id, text, round(1.0 - rank / len(retrieved), 6))
                for rank, (doc_id, text, _) in enumerate(reversed(retrieved))
            ]
            span.set_attributes(
                {
                    SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.RERANKER.value,
                    SpanAttributes.INPUT_VALUE: question,
                    RerankerAttributes.RERANKER_QUERY: question,
                    RerankerAttributes.RERANKER_TOP_K: self.top_k,
                    RerankerAttributes.RERANKER_MODEL_NAME: "reverse-order",
                    **document_attributes(RerankerAttributes.RERANKER_INPUT_DOCUMENTS, retrieved),
                    **document_attributes(RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS, reranked),
                }
            )
            span.set_status(Status(StatusCode.OK))
        return reranked


def document_attributes(prefix: str, documents: Sequence[tuple[str, str, float]]) -> dict[str, Any]:
    """``<prefix>.<i>.document.id/content/score``, the flattened keys OpenInference instrumentors write."""
    attributes: dict[str, Any] = {}
    for i, (doc_id, text, score) in enumerate(documents):
        attributes[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_ID}"] = doc_id
        attributes[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_CONTENT}"] = text
        attributes[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_SCORE}"] = score
    return attributes


# ---------------------------------------------------------------------------------------------------------
# The Collector's files


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """``spans`` as one OTLP/JSON ``ExportTraceServiceRequest``: protobuf JSON (camelCase, int64 as
    strings, enums as numbers) with the trace and span ids in hex, as the Collector writes them."""
    message = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in message.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _ids_to_hex(span)
                for link in span.get("links", []):
                    _ids_to_hex(link)
    return message


def _ids_to_hex(item: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if item.get(key):
            item[key] = base64.b64decode(item[key]).hex()


class CollectorFileExporter(SpanExporter):
    """Writes what the OpenTelemetry Collector writes with the ``otlp_json`` format: one
    ``ExportTraceServiceRequest`` a line, one line per export call.

    With ``path``: every line appended to that file (the Collector's file exporter); a ``.gz`` path gets
    one gzip member per call (concatenated members are one valid gzip stream, readable at any time).
    With ``partitioned_root``: one file per call at
    ``<root>/year=YYYY/month=MM/day=DD/hour=HH/minute=MM/<prefix>_<random>.json[.gz]`` (the S3 exporter's
    default partition format), the time from ``clock`` (UTC; the export time by default). ``files``
    lists the files written, in order."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        partitioned_root: str | Path | None = None,
        prefix: str = "traces",
        compress: bool = False,
        clock: Callable[[], datetime] | None = None,
        seed: int | None = None,
    ) -> None:
        if (path is None) == (partitioned_root is None):
            raise ValueError("give either path or partitioned_root")
        self.path = Path(path) if path is not None else None
        self.root = Path(partitioned_root) if partitioned_root is not None else None
        self.prefix = prefix
        self.compress = compress if self.root is not None else str(path).endswith(".gz")
        self.clock = clock or (lambda: datetime.now(UTC))
        self.files: list[Path] = []
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut:
            return SpanExportResult.FAILURE
        data = (json.dumps(otlp_json(spans), separators=(",", ":")) + "\n").encode("utf-8")
        if self.compress:
            data = gzip.compress(data, mtime=0)
        with self._lock:
            target = self.path if self.path is not None else self._partition_file()
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "ab") as out:
                out.write(data)
            if not self.files or self.files[-1] != target:
                self.files.append(target)
        return SpanExportResult.SUCCESS

    def _partition_file(self) -> Path:
        assert self.root is not None
        moment = self.clock()
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        folder = self.root / moment.strftime("year=%Y/month=%m/day=%d/hour=%H/minute=%M")
        suffix = ".json.gz" if self.compress else ".json"
        while True:  # the S3 exporter's names: a random 9-digit number; never overwrite
            target = folder / f"{self.prefix}_{self._random.randint(100_000_000, 999_999_999)}{suffix}"
            if not target.exists():
                return target

    def shutdown(self) -> None:
        self._shut = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# ---------------------------------------------------------------------------------------------------------
# Phoenix's span table

_INDEX = re.compile(r"^\d+$")


def phoenix_row(span: ReadableSpan) -> dict[str, Any]:
    """One row of Phoenix's span table (``get_spans_dataframe()``) for ``span``: the span's context,
    times (UTC, microseconds) and status, and its attributes under ``attributes.<key>``, the flattened
    lists (``retrieval.documents.0.document.id`` …) nested back into lists of objects and ``metadata``
    parsed from its JSON."""
    context = span.get_span_context()
    attributes = dict(span.attributes or {})
    assert span.start_time is not None and span.end_time is not None
    row: dict[str, Any] = {
        "name": span.name,
        "span_kind": attributes.get(SpanAttributes.OPENINFERENCE_SPAN_KIND, "UNKNOWN"),
        "parent_id": format(span.parent.span_id, "016x") if span.parent is not None else None,
        "start_time": iso_utc(span.start_time),
        "end_time": iso_utc(span.end_time),
        "status_code": span.status.status_code.name,
        "status_message": span.status.description or "",
        "context.span_id": format(context.span_id, "016x"),
        "context.trace_id": format(context.trace_id, "032x"),
    }
    for key, value in nest_attributes(attributes).items():
        if key == SpanAttributes.METADATA and isinstance(value, str):
            with contextlib.suppress(ValueError):  # not JSON: Phoenix keeps the string
                value = json.loads(value)
        row[f"attributes.{key}"] = value
    return row


def nest_attributes(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b.0.c.d": x, "a.b.1.c.d": y}`` → ``{"a.b": [{"c.d": x}, {"c.d": y}]}``: the first numeric
    segment of a key makes a list at the key before it; the rest is nested the same way within."""
    nested: dict[str, Any] = {}
    lists: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in flat.items():
        parts = key.split(".")
        at = next((i for i, part in enumerate(parts) if i > 0 and _INDEX.match(part)), None)
        if at is None or at == len(parts) - 1:
            nested[key] = list(value) if isinstance(value, tuple) else value
            continue
        head, index, rest = ".".join(parts[:at]), int(parts[at]), ".".join(parts[at + 1 :])
        lists.setdefault(head, {}).setdefault(index, {})[rest] = value
    for head, items in lists.items():
        nested[head] = [nest_attributes(items[index]) for index in sorted(items)]
    return nested


class PhoenixSpanTable(SpanExporter):
    """Collects the spans exported to it as rows of Phoenix's span table (:func:`phoenix_row`), in
    export order, and writes them as JSON Lines or Parquet."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        rows = [phoenix_row(span) for span in spans]
        with self._lock:
            self.rows.extend(rows)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass  # the rows stay readable after the provider shuts down

    def write_jsonl(self, path: str | Path) -> Path:
        """One JSON object a row; a span without an attribute has no such key."""
        path = Path(path)
        with open(path, "w", encoding="utf-8") as out:
            for row in self.rows:
                out.write(json.dumps(row) + "\n")
        return path

    def write_parquet(self, path: str | Path) -> Path:
        """One column per key of any row (missing → null); the nested lists as list<struct>, times as
        timestamp[us, UTC]. A column whose values pyarrow cannot type alike (metadata with an int in one
        row and text in another, say) is written as JSON text."""
        columns = list(dict.fromkeys(key for row in self.rows for key in row))
        arrays = []
        for column in columns:
            values = [row.get(column) for row in self.rows]
            if column in ("start_time", "end_time"):
                arrays.append(
                    pa.array([datetime.fromisoformat(v) for v in values], pa.timestamp("us", "UTC"))
                )
                continue
            try:
                arrays.append(pa.array(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                arrays.append(pa.array([None if v is None else json.dumps(v) for v in values], pa.string()))
        pq.write_table(pa.Table.from_arrays(arrays, names=columns), path)
        return Path(path)

"""What the span readers rely on in the traced application's output: OTLP/JSON lines as the Collector
writes them (hex ids, one root per trace, the OpenInference kinds and attributes, the service version on
the Resource), an LLM failure as an error on the root, the S3 exporter's partitions, and the columns of
Phoenix's span table."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.spans.traced_app import CollectorFileExporter, PhoenixSpanTable, StandInLLM, TracedRagApp

CORPUS = {
    "leave-policy#1": "Employees get 25 days of annual leave per calendar year.",
    "leave-policy#2": "Unused leave days carry over until the end of March.",
    "expenses#1": "Expenses are reimbursed within 30 days of the claim.",
    "expenses#2": "Travel expenses need a manager's approval before booking.",
}
LEAVE = "How many days of annual leave do employees get?"
CARRY = "Do unused leave days carry over?"
FAILING = "Which expenses need approval?"
ANSWERS = {LEAVE: "Employees get 25 days a year.", CARRY: "Yes, until the end of March."}

HEX32, HEX16 = re.compile(r"^[0-9a-f]{32}$"), re.compile(r"^[0-9a-f]{16}$")


@pytest.fixture
def llm():
    with StandInLLM(ANSWERS, fail={FAILING}) as server:
        yield server


def read_lines(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def spans_of(lines: list[dict]) -> list[tuple[dict, dict]]:
    """(resource attributes, span) for every span of every line."""
    return [
        (attributes(resource_spans["resource"]), span)
        for line in lines
        for resource_spans in line["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]


def attributes(item: dict) -> dict[str, Any]:
    """OTLP key/value attributes as ``{key: {"stringValue": …}}``."""
    return {pair["key"]: pair["value"] for pair in item.get("attributes", [])}


def by_kind(spans: list[dict]) -> dict[str, dict]:
    return {attributes(span)["openinference.span.kind"]["stringValue"]: span for span in spans}


def test_collector_lines_hold_one_rooted_trace_per_request(tmp_path: Path, llm: StandInLLM) -> None:
    path = tmp_path / "traces.jsonl"
    with TracedRagApp(
        CORPUS, llm.base_url, service_version="idx-7", exporters=[CollectorFileExporter(path)], rerank=True
    ) as app:
        results = [
            app.ask(LEAVE, session_id="s-1", user_id="u-1", metadata={"tenant": "acme", "shard": 2}),
            app.ask(CARRY),
        ]
        app.flush()
    lines = read_lines(path)
    assert len(lines) == 8  # SimpleSpanProcessor: one span a line, children before their root
    assert all(len(spans_of([line])) == 1 for line in lines)
    traces: dict[str, list[dict]] = defaultdict(list)
    for resource, span in spans_of(lines):
        assert HEX32.match(span["traceId"]) and HEX16.match(span["spanId"])
        assert resource["service.version"] == {"stringValue": "idx-7"}
        assert resource["service.name"] == {"stringValue": "support-rag"}
        traces[span["traceId"]].append(span)
    assert list(traces) == [result.trace_id for result in results]
    for result, spans in zip(results, traces.values(), strict=True):
        roots = [span for span in spans if "parentSpanId" not in span]
        assert len(roots) == 1
        ids = {span["spanId"] for span in spans}
        assert all(span["parentSpanId"] in ids for span in spans if span is not roots[0])
        kinds = by_kind(spans)
        assert set(kinds) == {"CHAIN", "RETRIEVER", "RERANKER", "LLM"}
        root = kinds["CHAIN"]
        assert root is roots[0] and root["status"] == {"code": 1}
        assert root["startTimeUnixNano"] == str(result.start_ns)
        assert root["endTimeUnixNano"] == str(result.end_ns)
        root_attributes = attributes(root)
        assert root_attributes["input.value"] == {"stringValue": result.question}
        assert root_attributes["output.value"] == {"stringValue": ANSWERS[result.question]}
        retriever = attributes(kinds["RETRIEVER"])
        assert [retriever[f"retrieval.documents.{i}.document.id"]["stringValue"] for i in range(3)] == (
            result.retrieved_ids
        )
        assert retriever["retrieval.documents.0.document.content"] == {
            "stringValue": result.retrieved_contents[0]
        }
        assert "doubleValue" in retriever["retrieval.documents.0.document.score"]
        reranker = attributes(kinds["RERANKER"])
        assert [reranker[f"reranker.output_documents.{i}.document.id"]["stringValue"] for i in range(3)] == (
            result.reranked_ids
        )
        assert result.reranked_ids == result.retrieved_ids[::-1]
        llm_span = attributes(kinds["LLM"])
        assert llm_span["llm.token_count.prompt"] == {"intValue": str(result.prompt_tokens)}
        assert llm_span["llm.token_count.completion"] == {"intValue": str(result.completion_tokens)}
        assert llm_span["llm.input_messages.1.message.content"] == {"stringValue": result.question}
        assert llm_span["llm.output_messages.0.message.content"] == {"stringValue": result.answer}
    first = attributes(by_kind(next(iter(traces.values())))["CHAIN"])
    assert first["session.id"] == {"stringValue": "s-1"} and first["user.id"] == {"stringValue": "u-1"}
    assert json.loads(first["metadata"]["stringValue"]) == {"tenant": "acme", "shard": 2}


def test_project_line_is_the_request_in_ragspines_dialect(llm: StandInLLM) -> None:
    with TracedRagApp(CORPUS, llm.base_url, service_version="idx-7", top_k=2) as app:
        result = app.ask(LEAVE, session_id="s-1", metadata={"shard": 2})
    line = result.project_line()
    assert line == {
        "request_id": result.trace_id,
        "question": LEAVE,
        "answer": ANSWERS[LEAVE],
        "retrieved_ids": ["leave-policy#1", "leave-policy#2"],
        "contexts": [
            {"id": doc_id, "text": CORPUS[doc_id]} for doc_id in ("leave-policy#1", "leave-policy#2")
        ],
        "latency_ms": (result.end_ns - result.start_ns) / 1e6,
        "token_usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": len(ANSWERS[LEAVE].split()),
        },
        "tags": {"session.id": "s-1", "shard": "2"},
        "versions": {"index": "idx-7"},
        "ts": line["ts"],
        "ok": True,
    }
    assert datetime.fromisoformat(line["ts"]) == datetime.fromtimestamp(result.start_ns // 1000 / 1e6, UTC)
    assert line["ts"].endswith("+00:00") and line["latency_ms"] > 0


def test_an_llm_failure_is_an_error_on_the_root(tmp_path: Path, llm: StandInLLM) -> None:
    path = tmp_path / "traces.jsonl.gz"
    batches = BatchSpanProcessor(CollectorFileExporter(path))
    with TracedRagApp(CORPUS, llm.base_url, service_version="idx-7", processors=[batches]) as app:
        result = app.ask(FAILING, user_id="u-2")
        app.flush()
    assert result.answer is None and result.prompt_tokens is None
    assert result.error is not None and result.error.startswith("InternalServerError")
    assert len(llm.requests) == 1  # max_retries=0: a 500 is one call
    (line,) = read_lines(path)  # one batch, one line
    kinds = by_kind([span for _, span in spans_of([line])])
    assert set(kinds) == {"CHAIN", "RETRIEVER", "LLM"}
    assert kinds["CHAIN"]["status"] == {"code": 2, "message": result.error}
    assert [event["name"] for event in kinds["CHAIN"]["events"]] == ["exception"]
    assert kinds["LLM"]["status"]["code"] == 2
    assert "output.value" not in attributes(kinds["CHAIN"])
    project_line = result.project_line()
    assert project_line["ok"] is False and "answer" not in project_line and "token_usage" not in project_line


def test_partitioned_exports_follow_the_s3_exporters_layout(tmp_path: Path, llm: StandInLLM) -> None:
    ticks = iter(
        datetime(2026, 11, 28, 13, 59, 40, tzinfo=UTC) + timedelta(seconds=10 * i) for i in range(99)
    )
    exporter = CollectorFileExporter(
        partitioned_root=tmp_path / "otel", prefix="traces", compress=True, clock=lambda: next(ticks), seed=7
    )
    with TracedRagApp(CORPUS, llm.base_url, service_version="idx-7", exporters=[exporter]) as app:
        app.ask(LEAVE)
        app.ask(CARRY)
    names = [path.relative_to(tmp_path / "otel").as_posix() for path in exporter.files]
    assert len(names) == 6 == len(set(names))  # one file per export call, one span each
    layout = re.compile(r"^year=2026/month=11/day=28/hour=(13|14)/minute=\d\d/traces_\d{9}\.json\.gz$")
    assert all(layout.match(name) for name in names), names
    assert {name.split("/")[3] for name in names} == {"hour=13", "hour=14"}
    assert all(len(spans_of(read_lines(path))) == 1 for path in exporter.files)


def test_span_table_has_phoenixs_columns(tmp_path: Path, llm: StandInLLM) -> None:
    table = PhoenixSpanTable()
    with TracedRagApp(CORPUS, llm.base_url, service_version="idx-7", exporters=[table], rerank=True) as app:
        result = app.ask(CARRY, session_id="s-3", metadata={"tenant": "acme"})
    rows = {row["span_kind"]: row for row in table.rows}
    assert set(rows) == {"CHAIN", "RETRIEVER", "RERANKER", "LLM"}
    for row in table.rows:
        assert {"name", "parent_id", "start_time", "end_time", "status_code", "status_message"} <= set(row)
        assert row["context.trace_id"] == result.trace_id and HEX16.match(row["context.span_id"])
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$", row["start_time"])
        assert row["status_code"] == "OK"
    root = rows["CHAIN"]
    assert root["parent_id"] is None and root["attributes.openinference.span.kind"] == "CHAIN"
    assert root["attributes.metadata"] == {"tenant": "acme"} and root["attributes.session.id"] == "s-3"
    assert root["attributes.input.value"] == CARRY and root["attributes.output.value"] == ANSWERS[CARRY]
    assert all(row["parent_id"] == root["context.span_id"] for row in table.rows if row is not root)
    documents = rows["RETRIEVER"]["attributes.retrieval.documents"]
    assert [doc["document.id"] for doc in documents] == result.retrieved_ids
    assert set(documents[0]) == {"document.id", "document.content", "document.score"}
    reranked = rows["RERANKER"]["attributes.reranker.output_documents"]
    assert [doc["document.id"] for doc in reranked] == result.reranked_ids
    llm_row = rows["LLM"]
    assert [m["message.role"] for m in llm_row["attributes.llm.input_messages"]] == ["system", "user"]
    assert llm_row["attributes.llm.output_messages"] == [
        {"message.role": "assistant", "message.content": ANSWERS[CARRY]}
    ]
    assert llm_row["attributes.llm.token_count.prompt"] == result.prompt_tokens

    jsonl = [
        json.loads(line) for line in table.write_jsonl(tmp_path / "spans.jsonl").read_text().splitlines()
    ]
    assert jsonl == table.rows
    assert "attributes.llm.model_name" not in jsonl[0]  # the retriever's row: absent, not null
    parquet = pq.read_table(table.write_parquet(tmp_path / "spans.parquet"))
    assert parquet.num_rows == 4
    assert set(parquet.column_names) == {key for row in table.rows for key in row}
    documents_type = parquet.schema.field("attributes.retrieval.documents").type
    assert pa.types.is_list(documents_type) and pa.types.is_struct(documents_type.value_type)
    assert parquet.schema.field("start_time").type == pa.timestamp("us", "UTC")


def test_one_app_at_a_time_and_close_uninstruments(llm: StandInLLM) -> None:
    original = openai.OpenAI.request
    with TracedRagApp(CORPUS, llm.base_url, service_version="idx-7"):
        assert openai.OpenAI.request is not original
        with pytest.raises(RuntimeError, match="instrumented already"):
            TracedRagApp(CORPUS, llm.base_url, service_version="idx-8")
    assert openai.OpenAI.request is original

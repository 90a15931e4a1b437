"""Benchmark: reading OpenTelemetry spans (OTLP/JSON) against the project's own trace dialect, per trace.

    python bench/bench_spans.py [--traces 333334] [--repeat 3]

Generates (once, cached under bench/data/) the same requests twice: as OTLP/JSON the way the Collector's
file exporter writes it (one ``ExportTraceServiceRequest`` per line holding a batch of 300 spans, hex
ids, int64 values as strings; three spans a request: a CHAIN root with the question, answer, session
and metadata, a RETRIEVER with five documents, an LLM span with token counts; the spans of a request
are not always in one batch), and as one trace line each in the project's dialect carrying the same
fields. Then times ``ragspine-eval check-traces`` on each as a separate process (the read, the grouping
and the canonical columns; the metrics of a trace file without gold are cheap beside them) and reports
wall time, peak RSS and the ratio per trace, as a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TOPICS = ["leave", "travel", "security", "expenses", "hardware", "privacy", "safety", "payroll"]
BATCH = 300


def _any(value):
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def _attributes(values: dict) -> list[dict]:
    return [{"key": key, "value": _any(value)} for key, value in values.items()]


def generate(n: int, seed: int = 7) -> tuple[Path, Path]:
    DATA.mkdir(exist_ok=True)
    spans_path, lines_path = DATA / f"spans-{n}.otlp.json", DATA / f"spans-{n}-as-traces.jsonl"
    if spans_path.exists() and lines_path.exists():
        return spans_path, lines_path
    rnd = random.Random(seed)
    resource = {"attributes": _attributes({"service.name": "support-bot", "service.version": "idx-42"})}
    pending: list[dict] = []
    t0 = 1_764_300_000_000_000_000
    with spans_path.open("w") as spans_out, lines_path.open("w") as lines_out:

        def flush(count: int) -> None:
            batch, pending[:] = pending[:count], pending[count:]
            request = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": batch}]}]}
            spans_out.write(json.dumps(request) + "\n")

        for i in range(n):
            trace_id, root = f"{rnd.getrandbits(128):032x}", f"{rnd.getrandbits(64):016x}"
            topic = rnd.choice(TOPICS)
            start = t0 + i * 50_000_000
            question = f"What does the {topic} policy say about case {i}?"
            docs = [f"{rnd.choice(TOPICS)}-{rnd.randrange(5000)}#{rnd.randrange(12)}" for _ in range(5)]
            texts = [f"Passage {d}: the {topic} rule {i} allows {rnd.randrange(2, 60)} days." for d in docs]
            answer = f"The {topic} rule {i} allows it [{docs[0]}]."
            prompt, completion = rnd.randrange(200, 900), rnd.randrange(10, 80)
            end = start + rnd.randrange(80, 900) * 1_000_000
            session = f"s{rnd.randrange(10_000)}"
            retrieval = {"openinference.span.kind": "RETRIEVER", "input.value": question}
            for rank, (doc, text) in enumerate(zip(docs, texts, strict=True)):
                retrieval[f"retrieval.documents.{rank}.document.id"] = doc
                retrieval[f"retrieval.documents.{rank}.document.content"] = text
                retrieval[f"retrieval.documents.{rank}.document.score"] = round(1 - rank / 10, 2)
            spans = [
                {
                    "traceId": trace_id,
                    "spanId": root,
                    "name": "rag.query",
                    "kind": 1,
                    "startTimeUnixNano": str(start),
                    "endTimeUnixNano": str(end),
                    "attributes": _attributes(
                        {
                            "openinference.span.kind": "CHAIN",
                            "input.value": question,
                            "output.value": answer,
                            "session.id": session,
                            "metadata": json.dumps({"topic": topic}),
                        }
                    ),
                    "status": {"code": 1},
                },
                {
                    "traceId": trace_id,
                    "spanId": f"{rnd.getrandbits(64):016x}",
                    "parentSpanId": root,
                    "name": "retrieve",
                    "kind": 1,
                    "startTimeUnixNano": str(start + 1_000_000),
                    "endTimeUnixNano": str(start + 30_000_000),
                    "attributes": _attributes(retrieval),
                    "status": {},
                },
                {
                    "traceId": trace_id,
                    "spanId": f"{rnd.getrandbits(64):016x}",
                    "parentSpanId": root,
                    "name": "ChatCompletion",
                    "kind": 1,
                    "startTimeUnixNano": str(start + 31_000_000),
                    "endTimeUnixNano": str(end - 1_000_000),
                    "attributes": _attributes(
                        {
                            "openinference.span.kind": "LLM",
                            "llm.model_name": "gpt-4o-mini",
                            "llm.token_count.prompt": prompt,
                            "llm.token_count.completion": completion,
                            "llm.token_count.total": prompt + completion,
                        }
                    ),
                    "status": {"code": 1},
                },
            ]
            # Spans end child first: the root comes last, as an SDK exports them.
            pending.extend(reversed(spans))
            while len(pending) >= BATCH:
                flush(BATCH)
            line = {
                "request_id": trace_id,
                "question": question,
                "answer": answer,
                "retrieved_ids": docs,
                "contexts": [{"id": d, "text": t} for d, t in zip(docs, texts, strict=True)],
                "latency_ms": (end - start) / 1e6,
                "token_usage": {"prompt_tokens": prompt, "completion_tokens": completion},
                "tags": {"session.id": session, "topic": topic},
                "versions": {"index": "idx-42"},
                "ok": True,
            }
            lines_out.write(json.dumps(line) + "\n")
        if pending:
            flush(len(pending))
    return spans_path, lines_path


def run(path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``check-traces`` on ``path``, as its own process."""
    command = [sys.executable, "-m", "ragspine_pipeline.cli", "check-traces", str(path)]
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"check-traces failed on {path}: {err.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=333_334)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spans, lines = generate(args.traces)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(
        f"files: {spans.name} {spans.stat().st_size / 1e6:.0f} MB, "
        f"{lines.name} {lines.stat().st_size / 1e6:.0f} MB"
    )
    print("| run | OTLP/JSON (3 spans a trace) | project dialect | ratio per trace |")
    print("|---|---|---|---|")
    for i in range(args.repeat):
        # Interleaved: a slower minute of the machine falls on both.
        otlp_wall, otlp_rss = run(spans)
        own_wall, own_rss = run(lines)
        print(
            f"| {i + 1} | {otlp_wall:.2f} s, {otlp_rss:.0f} MB | {own_wall:.2f} s, {own_rss:.0f} MB | "
            f"{otlp_wall / own_wall:.2f}× |"
        )


if __name__ == "__main__":
    main()

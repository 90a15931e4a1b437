"""A RAG service of someone else's, on loopback: it answers golden questions from a table of traces,
in the JSON shape its team chose, behind an optional bearer token, after an optional delay, and counts
what it was asked. The replay tests, the component tests and ``bench/bench_replay.py`` ask it over real
HTTP.

Shapes: ``trace`` replies with the trace as it is; ``sources`` replies as RAGSpine's own server does
(``{"request_id", "answer", "route", "answer_kind", "sources": [{"doc", "locator"}], "cache"}``: no
retrieved ids, a request id of its own, each cited chunk ``doc#locator`` as an object;
:data:`SOURCES_MAPPING`); ``nested`` replies ``{"data": {"reply": <answer_json>,
"sources": [{"id": …}], "meta": {"index": …}}}``, which a response mapping turns back into a trace
(:data:`NESTED_MAPPING`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl

from tests.loopback import LoopbackServer, send_json

NESTED_MAPPING = {
    "answer_json": "data.reply",
    "retrieved_ids": "data.sources[].id",
    "index_version": "data.meta.index",
}

SOURCES_MAPPING = {"answer": "answer", "citations": "sources[].join('#', [doc, locator])"}


class FakeRagService(LoopbackServer):
    def __init__(
        self,
        traces: dict[str, dict],
        *,
        shape: str = "trace",
        token: str | None = None,
        delay_s: float = 0.0,
        path: str = "/answer",
        fail: set[str] | None = None,
    ) -> None:
        self.traces = traces
        self.shape = shape
        self.token = token
        self.delay_s = delay_s
        self.path = path
        self.fail = set(fail or ())  # qids answered with 503, every time
        self.asked: Counter[str] = Counter()
        self.unauthorised = 0
        self.bodies: list[dict] = []
        self.arrivals: list[float] = []  # time.monotonic() of each question's arrival
        self._lock = threading.Lock()
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        return self.origin + self.path

    def arrived(self, body: dict) -> None:
        """Count a question when it arrives (before the delay), so a client killed while waiting for
        the answer has still asked it."""
        with self._lock:
            self.asked[_qid(body)] += 1
            self.bodies.append(body)
            self.arrivals.append(time.monotonic())

    def reply(self, body: dict) -> tuple[int, dict]:
        qid = _qid(body)
        if qid in self.fail:
            return 503, {"error": "busy"}
        trace = self.traces.get(qid)
        if trace is None:
            return 404, {"error": f"no such case {qid}"}
        if self.shape == "trace":
            return 200, trace
        if self.shape == "sources":
            answer = trace.get("answer_json") or {}
            cited = [chunk.split("#", 1) for chunk in answer.get("citations") or []]
            return 200, {
                "request_id": uuid.uuid4().hex[:12],
                "answer": answer.get("claim"),
                "route": "rag",
                "answer_kind": "answer" if cited else "refusal",
                "sources": [{"doc": doc, "locator": locator} for doc, locator in cited],
                "cache": {"hit": False},
            }
        return 200, {
            "data": {
                "reply": trace.get("answer_json"),
                "sources": [{"id": chunk} for chunk in trace.get("retrieved_ids") or []],
                "meta": {"index": trace.get("index_version")},
            }
        }

    def _handler(self):
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the client pools its connections

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                self._answer(path, dict(parse_qsl(query)))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(self.path, json.loads(body or b"{}"))

            def _answer(self, path: str, body: dict) -> None:
                if path != service.path:
                    return self._send(404, {"error": "no such route"})
                if (
                    service.token is not None
                    and self.headers.get("Authorization") != f"Bearer {service.token}"
                ):
                    with service._lock:
                        service.unauthorised += 1
                    return self._send(401, {"error": "unauthorised"})
                service.arrived(body)
                if service.delay_s:
                    time.sleep(service.delay_s)
                self._send(*service.reply(body))

            def _send(self, status: int, payload: dict) -> None:
                send_json(self, status, payload)

            def log_message(self, format: str, *args) -> None:
                pass

        return Handler


def _qid(body: dict) -> str:
    return str(body.get("qid") or body.get("id") or "")

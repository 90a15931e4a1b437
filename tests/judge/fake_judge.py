"""A fake OpenAI-compatible chat-completions server for the judge tests and benchmark.

A real HTTP/1.1 server on 127.0.0.1 (a free port) in a daemon thread, serving ``POST /v1/chat/completions``
in the OpenAI response shape. Replies come from a FIFO of scripted :class:`FakeReply` (status codes,
headers such as ``retry-after-ms``, delays, raw malformed bodies) and otherwise from ``reply_for``, which
returns the reply's content or a whole :class:`FakeReply` (a status per model, say). ``body_sizes`` holds
the size in bytes of every request body received, as it came over the wire.

Token counts are deterministic: ``prompt_tokens`` = total characters of the messages' string contents // 4,
``completion_tokens`` = ``len(content) // 4``.

Use it as a context manager, with ``start()``/``stop()``, or through the ``fake_judge`` pytest fixture
(registered for tests/judge by its conftest.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.loopback import chat_completion

DEFAULT_REPLY = '{"score": 4, "reason": "supported"}'


def default_reply_for(request_json: dict) -> str | FakeReply:
    return DEFAULT_REPLY


@dataclass(frozen=True)
class FakeReply:
    """One scripted reply. ``body`` (raw bytes) wins over everything else; a non-200 status without a body
    gets an OpenAI-style error object; a 200 without ``content`` uses ``reply_for``."""

    status: int = 200
    content: str | None = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    body: bytes | None = None


def count_prompt_tokens(request_json: dict) -> int:
    messages = request_json.get("messages") or []
    return (
        sum(
            len(m.get("content"))
            for m in messages
            if isinstance(m, dict) and isinstance(m.get("content"), str)
        )
        // 4
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the benchmark opens many connections at once
    judge: FakeJudge


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real endpoint
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls between small writes
    wbufsize = 1 << 16  # headers and body leave in one write, on flush()
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        judge = self.server.judge
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')
            return
        try:
            request_json = json.loads(raw)
        except ValueError:
            self._send(
                400, b'{"error": {"message": "request body is not JSON", "type": "invalid_request_error"}}'
            )
            return
        judge._enter(request_json, self.headers.get("Authorization"), len(raw))
        try:
            reply = judge._next_reply()
            time.sleep(judge.latency_s + reply.delay)
            self._send(*judge._render(reply, request_json))
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            self.close_connection = True
        finally:
            judge._leave()

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()


class FakeJudge:
    """The fake server. ``requests``/``authorizations`` are parallel snapshots of what was received."""

    def __init__(
        self, latency_s: float = 0.0, reply_for: Callable[[dict], str | FakeReply] = default_reply_for
    ) -> None:
        self.latency_s = latency_s
        self.reply_for = reply_for
        self._lock = threading.Lock()
        self._script: deque[FakeReply] = deque()
        self._requests: list[dict] = []
        self._authorizations: list[str | None] = []
        self._body_sizes: list[int] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._ids = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- configuration and observations --------------------------------------------------------------
    def script(self, *replies: FakeReply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def requests(self) -> list[dict]:
        with self._lock:
            return list(self._requests)

    @property
    def authorizations(self) -> list[str | None]:
        with self._lock:
            return list(self._authorizations)

    @property
    def body_sizes(self) -> list[int]:
        """Bytes of each request body received (parallel to ``requests``)."""
        with self._lock:
            return list(self._body_sizes)

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeJudge is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> FakeJudge:
        if self._server is None:
            self._server = _Server(("127.0.0.1", 0), _Handler)
            self._server.judge = self
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.05,), name="fake-judge", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> FakeJudge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler ---------------------------------------------------------------------------
    def _enter(self, request_json: dict, authorization: str | None, size: int) -> None:
        with self._lock:
            self._requests.append(request_json)
            self._authorizations.append(authorization)
            self._body_sizes.append(size)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _next_reply(self) -> FakeReply:
        with self._lock:
            return self._script.popleft() if self._script else FakeReply()

    def _render(self, reply: FakeReply, request_json: dict) -> tuple[int, bytes, dict]:
        if reply.body is not None:
            return reply.status, reply.body, reply.headers
        if reply.status != 200:
            error = {"message": f"fake judge error {reply.status}", "type": "server_error", "code": None}
            return reply.status, json.dumps({"error": error}).encode(), reply.headers
        content = reply.content if reply.content is not None else self.reply_for(request_json)
        if isinstance(content, FakeReply):  # reply_for chose the whole reply (its delay is not applied)
            if content.status == 200 and content.body is None and content.content is None:
                content = dataclasses.replace(content, content=DEFAULT_REPLY)
            return self._render(content, request_json)
        prompt_tokens, completion_tokens = count_prompt_tokens(request_json), len(content) // 4
        payload = chat_completion(
            f"chatcmpl-fake-{next(self._ids)}",
            request_json.get("model", "fake"),
            content,
            prompt_tokens,
            completion_tokens,
        )
        return 200, json.dumps(payload).encode(), reply.headers


@pytest.fixture
def fake_judge():
    """A started :class:`FakeJudge`, stopped after the test."""
    with FakeJudge() as judge:
        yield judge

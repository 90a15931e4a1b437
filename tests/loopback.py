"""The plumbing every loopback HTTP stand-in of the suite shares: a threading server on 127.0.0.1 at
a port the operating system picks, serving from a daemon thread until :meth:`LoopbackServer.stop`."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # an answer delayed past a client's timeout must not hold stop()
    block_on_close = False
    request_queue_size = 128  # many clients at once (a replay's 16 threads, several processes)

    def handle_error(self, request, client_address) -> None:
        pass  # a client that gave up (a timeout, a killed process) closes its socket: expected


class LoopbackServer:
    """Serves ``handler`` on loopback; a context manager, or :meth:`start` and :meth:`stop`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = QuietServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def origin(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
    """Answer ``handler``'s request with ``payload`` as JSON."""
    data = json.dumps(payload).encode("utf-8")
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def chat_completion(
    reply_id: str, model: str, content: str, prompt_tokens: int, completion_tokens: int
) -> dict:
    """The body of an OpenAI-compatible ``chat.completion`` answering ``content``."""
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }

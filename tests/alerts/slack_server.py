"""A stateful Slack Web API stand-in on loopback: what the delivery protocol needs of Slack, for real HTTP.

``chat.postMessage`` stores the message (channel, text, blocks, metadata) the moment the request has
arrived, as Slack does, *then* answers — after ``delay_s`` when set, so a client timeout leaves a
message that was posted but never acknowledged. A post with ``thread_ts`` is a reply in that thread: a
thread that is not a top-level message of the channel answers ``thread_not_found``, unstored.
``conversations.history`` returns the stored top-level messages of a channel ID (and replies posted with
``reply_broadcast``), newest first, paginated with a cursor, with their metadata only when
``include_all_metadata`` is set; ``conversations.replies`` the same of one thread, its parent first and
then its replies, oldest first; ``conversations.list`` resolves names to IDs. Knobs: ``rate_limit``
(the next posts answer 429 with a Retry-After, unstored), ``throttle_s`` (as Slack's per-channel limit:
a post sooner than this after the last stored one answers 429 with ``Retry-After: throttle_s``),
``delay_s``, ``hook`` (called with each stored message, before the answer), ``down`` (every call
answers HTTP 500, nothing stored: Slack having an outage).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.loopback import LoopbackServer

TOKEN = "xoxb-fake-slack-token"
CHANNELS = {"rag-alerts": "C0ALERTS"}


@dataclass
class Message:
    channel: str  # the channel ID
    ts: str
    text: str
    blocks: list
    metadata: dict | None
    thread_ts: str | None = None
    reply_broadcast: bool = False

    @property
    def alert_ids(self) -> list[str]:
        payload = (self.metadata or {}).get("event_payload") or {}
        return str(payload.get("alert_ids", "")).split()


@dataclass
class _State:
    messages: list[Message] = field(default_factory=list)
    rate_limited: list[float] = field(default_factory=list)  # Retry-After of the next posts
    delay_s: float = 0.0
    throttle_s: float = 0.0
    last_stored: float = float("-inf")
    hook: object = None
    calls: dict[str, int] = field(default_factory=dict)


class SlackServer(LoopbackServer):
    """Start with :meth:`start`, point ``SLACK_API_BASE_URL`` at :attr:`url`, read :attr:`messages`."""

    def __init__(self, token: str = TOKEN, channels: dict[str, str] | None = None) -> None:
        self.token = token
        self.channels = dict(CHANNELS if channels is None else channels)
        self.state = _State()
        self._lock = threading.Lock()
        self._clock = itertools.count(1)
        self.down = False
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        return self.origin + "/api/"

    @property
    def messages(self) -> list[Message]:
        with self._lock:
            return list(self.state.messages)

    def posted_ids(self) -> list[str]:
        """Every alert id of every stored message, with repeats: a duplicate post shows twice."""
        return [alert_id for message in self.messages for alert_id in message.alert_ids]

    def calls(self, method: str) -> int:
        with self._lock:
            return self.state.calls.get(method, 0)

    def rate_limit(self, *retry_after_s: float) -> None:
        with self._lock:
            self.state.rate_limited.extend(retry_after_s)

    def set(self, *, delay_s: float | None = None, throttle_s: float | None = None, hook=None) -> None:
        with self._lock:
            if delay_s is not None:
                self.state.delay_s = delay_s
            if throttle_s is not None:
                self.state.throttle_s = throttle_s
            self.state.hook = hook

    # -- the Web API ---------------------------------------------------------------------------

    def _call(self, method: str, args: dict, authorization: str) -> tuple[int, dict, dict, float]:
        """(status, headers, body, delay) of one call."""
        with self._lock:
            self.state.calls[method] = self.state.calls.get(method, 0) + 1
        if self.down:
            return 500, {}, {"ok": False, "error": "internal_error"}, 0.0
        if authorization != f"Bearer {self.token}":
            return 200, {}, {"ok": False, "error": "invalid_auth"}, 0.0
        if method == "chat.postMessage":
            return self._post(args)
        if method == "conversations.history":
            return 200, {}, self._history(args), 0.0
        if method == "conversations.replies":
            return 200, {}, self._history(args, thread=str(args.get("ts", ""))), 0.0
        if method == "conversations.list":
            channels = [{"id": cid, "name": name} for name, cid in self.channels.items()]
            return 200, {}, {"ok": True, "channels": channels, "response_metadata": {"next_cursor": ""}}, 0.0
        return 404, {}, {"ok": False, "error": "unknown_method"}, 0.0

    def _post(self, args: dict) -> tuple[int, dict, dict, float]:
        with self._lock:
            if self.state.rate_limited:
                wait = self.state.rate_limited.pop(0)
                return 429, {"Retry-After": f"{wait:g}"}, {"ok": False, "error": "ratelimited"}, 0.0
            if time.monotonic() - self.state.last_stored < self.state.throttle_s:
                wait = self.state.throttle_s
                return 429, {"Retry-After": f"{wait:g}"}, {"ok": False, "error": "ratelimited"}, 0.0
            channel = self._channel_id(str(args.get("channel", "")), create=True)
            thread_ts = args.get("thread_ts") or None
            if thread_ts and not any(
                m.ts == thread_ts and m.channel == channel and not m.thread_ts for m in self.state.messages
            ):
                return 200, {}, {"ok": False, "error": "thread_not_found"}, 0.0
            self.state.last_stored = time.monotonic()
            ts = f"{int(time.time())}.{next(self._clock):06d}"
            broadcast = str(args.get("reply_broadcast", "")).lower() in ("1", "true")
            message = Message(
                channel, ts, args.get("text", ""), args.get("blocks") or [], args.get("metadata"),
                thread_ts, broadcast,
            )  # fmt: skip
            self.state.messages.append(message)
            hook, delay = self.state.hook, self.state.delay_s
        if callable(hook):
            hook(message)
        return 200, {}, {"ok": True, "channel": channel, "ts": ts}, delay

    def _history(self, args: dict, thread: str | None = None) -> dict:
        """A page of the channel's history, or (``thread``) of one thread's messages."""
        channel = str(args.get("channel", ""))
        if channel not in self.channels.values():
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(args.get("oldest") or 0)
        limit = min(int(args.get("limit") or 100), 1000)
        start = int(args.get("cursor") or 0)
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        with self._lock:
            mine = [m for m in self.state.messages if m.channel == channel]
        if thread is None:  # the channel's history leaves out replies that were not broadcast
            found = [
                m for m in reversed(mine) if float(m.ts) > oldest and (not m.thread_ts or m.reply_broadcast)
            ]
        else:
            parent = [m for m in mine if m.ts == thread and not m.thread_ts]
            if not parent:
                return {"ok": False, "error": "thread_not_found"}
            found = parent + [m for m in mine if m.thread_ts == thread and float(m.ts) > oldest]
        page = found[start : start + limit]
        more = start + limit < len(found)
        rendered = [
            {
                "type": "message",
                "ts": m.ts,
                "text": m.text,
                **({"thread_ts": m.thread_ts} if m.thread_ts else {}),
                **({"metadata": m.metadata} if with_metadata else {}),
            }
            for m in page
        ]
        cursor = str(start + limit) if more else ""
        return {
            "ok": True,
            "messages": rendered,
            "has_more": more,
            "response_metadata": {"next_cursor": cursor},
        }

    def _channel_id(self, channel: str, create: bool) -> str:
        if channel in self.channels.values():
            return channel
        name = channel.removeprefix("#")
        if name not in self.channels and create:
            self.channels[name] = f"C{len(self.channels):08d}"
        return self.channels.get(name, "")

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                self._answer(parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    if "json" in (self.headers.get("Content-Type") or ""):
                        args = json.loads(raw)
                    else:
                        args = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
                except ValueError:  # a request cut short by a killed client: never processed
                    self.send_response(400)
                    self.end_headers()
                    return
                query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
                self._answer(urlsplit(self.path).path, {**query, **args})

            def _answer(self, path: str, args: dict) -> None:
                method = path.rsplit("/", 1)[-1]
                status, headers, body, delay = server._call(
                    method, args, self.headers.get("Authorization", "")
                )
                time.sleep(delay)
                payload = json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args) -> None:
                pass

        return Handler

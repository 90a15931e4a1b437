"""Slack's side of alert delivery: settings, a time budget, and a slack-sdk ``WebClient`` that posts
alerts and finds them again in a channel's history.

Configuration comes from the environment only: ``SLACK_BOT_TOKEN``, ``SLACK_CHANNEL`` (best the
channel's ID, ``C…``; a name works too) and, optionally, ``SLACK_API_BASE_URL`` (slack-sdk's
``base_url``: a proxy, or a test server). The bot needs ``chat:write``, and ``channels:history``
(``groups:history`` for a private channel) to confirm a delivery after a crash; with a channel name, also
``channels:read`` to look its ID up when no earlier delivery told it.

Every message carries Slack message metadata (``event_type`` ``ragspine_alert``, ``event_payload``
``{"alert_ids": "<id> <id> …"}``), so a later pass can tell from the channel's history (a reply: from its
thread, ``conversations.replies``) whether an unanswered post landed. slack-sdk's own retry handlers do the
retrying, bounded by a ``WaitBudget`` (``alerts.slack_budget``): a ``Retry-After`` or back-off wait
happens only when it fits, and each request's timeout is cut to what is left. A request that may have
reached Slack (a timeout, a connection lost while waiting for the answer) is never retried here. Every
failure is a :class:`DeliveryError` of one line; the token is never part of an error message, a log line
or the outbox. The delivery protocol itself is in ``alerts.delivery``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.error import URLError

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError

from ragspine_pipeline.alerts.blocks import message
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.slack_budget import (
    MIN_REQUEST_S,
    BoundedRateLimitRetryHandler,
    ServerErrorRetry,
    UnsentRequestRetry,
    WaitBudget,
    WithinBudget,
    retry_after,
    seconds_text,
)
from ragspine_pipeline.errors import InputError

DEFAULT_BASE_URL = WebClient.BASE_URL
DEFAULT_TTL_HOURS = 24.0
METADATA_EVENT = "ragspine_alert"
HISTORY_PAGES = 10  # of 200 messages: how far back a confirmation looks before it gives up


def seconds_from_env(name: str, default: float, minimum: float) -> float:
    """A number of seconds from the environment; a value that is not one is a one-line InputError."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InputError(name, f"expected a number of seconds, got {raw[:40]!r}") from None
    if not value >= minimum:
        raise InputError(name, f"expected at least {minimum:g} seconds, got {raw[:40]!r}")
    return value


def ttl_hours_from_env(env: Mapping[str, str] = os.environ) -> float:
    """``RAGSPINE_ALERT_TTL_HOURS`` (default 24): how long an undelivered alert is still worth posting."""
    raw = env.get("RAGSPINE_ALERT_TTL_HOURS")
    if not raw:
        return DEFAULT_TTL_HOURS
    try:
        hours = float(raw)
    except ValueError:
        raise ValueError(f"RAGSPINE_ALERT_TTL_HOURS must be a number of hours (got {raw!r})") from None
    if not hours > 0:
        raise ValueError(f"RAGSPINE_ALERT_TTL_HOURS must be positive (got {raw!r})")
    return hours


@dataclass(frozen=True)
class SlackSettings:
    """Where alerts go. ``repr`` never shows the token."""

    token: str | None = field(default=None, repr=False)
    channel: str | None = None
    base_url: str = DEFAULT_BASE_URL

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> SlackSettings:
        base_url = env.get("SLACK_API_BASE_URL") or DEFAULT_BASE_URL
        return cls(
            token=env.get("SLACK_BOT_TOKEN") or None,
            channel=env.get("SLACK_CHANNEL") or None,
            base_url=base_url if base_url.endswith("/") else base_url + "/",  # slack-sdk appends the method
        )

    @property
    def missing(self) -> str | None:
        """Why nothing can be delivered (None when token and channel are both set)."""
        absent = [
            name for name, v in (("SLACK_BOT_TOKEN", self.token), ("SLACK_CHANNEL", self.channel)) if not v
        ]
        return f"{' and '.join(absent)} not set: alerts stay in the outbox" if absent else None


class DeliveryError(Exception):
    """One failed Slack call, as one line without secrets. ``maybe_posted``: Slack did not answer, so it
    may have posted the message; ``answered``: Slack did answer (a 5xx after which it may still have
    stored the message), so the request is over and nothing more of it can land later; ``stop``: trying
    the next message in this pass is pointless (Slack unreachable or rate limiting, the budget spent)."""

    def __init__(
        self, message: str, *, maybe_posted: bool = False, answered: bool = False, stop: bool = False
    ) -> None:
        super().__init__(message)
        self.maybe_posted = maybe_posted
        self.answered = answered
        self.stop = stop or maybe_posted


@dataclass(frozen=True)
class Posted:
    ts: str | None
    channel: str  # the channel's ID as Slack answered it (the configured channel if it did not say)


class SlackSender:
    """Posts alerts, and finds them in the channel's history, with one configured ``WebClient``."""

    def __init__(
        self,
        settings: SlackSettings,
        timeout_s: float = 10,
        rate_limit_retries: int = 3,
        max_retry_after_s: float = 30,
        server_error_retries: int = 2,
        connection_retries: int = 2,
        budget: WaitBudget | None = None,
    ) -> None:
        if settings.missing:
            raise ValueError(settings.missing)
        self.settings = settings
        self.timeout_s = timeout_s
        self.budget = budget or WaitBudget()
        self.max_retry_after_s = max_retry_after_s
        self._handlers = [
            BoundedRateLimitRetryHandler(
                rate_limit_retries, max_retry_after_s, self.budget, self._fit_timeout
            ),
            ServerErrorRetry(server_error_retries, self.budget, self._fit_timeout),
            UnsentRequestRetry(connection_retries, self.budget, self._fit_timeout),
        ]
        self.client = WebClient(
            token=settings.token, base_url=settings.base_url, timeout=timeout_s, retry_handlers=self._handlers
        )

    def use_budget(self, budget: WaitBudget) -> None:
        """Spend ``budget`` from here on (one per delivery pass)."""
        self.budget = budget
        for handler in self._handlers:
            handler.budget = budget

    def post(self, alerts: Alert | Sequence[Alert], thread_ts: str | None = None) -> Posted:
        """Post one message covering ``alerts`` (one run's), with their ids in its metadata; with
        ``thread_ts``, as a reply in that thread only (not broadcast to the channel). Raises
        :class:`DeliveryError` when Slack did not take it or did not answer."""
        alerts = [alerts] if isinstance(alerts, Alert) else list(alerts)
        text, blocks = message(alerts)
        metadata = {
            "event_type": METADATA_EVENT,
            "event_payload": {"alert_ids": " ".join(a.id for a in alerts)},
        }
        reply = {"thread_ts": thread_ts, "reply_broadcast": False} if thread_ts else {}
        response = self._call(
            "post to",
            self.client.chat_postMessage,
            maybe_posted=True,
            channel=self.settings.channel,
            text=text,
            blocks=blocks,
            metadata=metadata,
            link_names=False,  # a bare "@channel" in an alert stays text, whatever the workspace default
            **reply,
        )
        channel = response.get("channel")
        return Posted(response.get("ts"), channel if isinstance(channel, str) else self.settings.channel)

    def posted_alerts(
        self, channel_id: str, since: float, wanted: set[str], thread_ts: str | None = None
    ) -> tuple[dict[str, str], bool]:
        """The ids of ``wanted`` that messages of ours in ``channel_id`` since ``since`` (Unix time) name
        in their metadata, each with its message's ``ts``; and whether that answer is complete (every
        wanted id found, or the history read to its end within :data:`HISTORY_PAGES` pages). With
        ``thread_ts``, the replies in that thread are read instead: the channel's history leaves them
        out."""
        found: dict[str, str] = {}
        cursor = None
        read, thread = self.client.conversations_history, {}
        if thread_ts:
            read, thread = self.client.conversations_replies, {"ts": thread_ts}
        for _ in range(HISTORY_PAGES):
            page = self._call(
                "read the history of",
                read,
                **thread,
                channel=channel_id,
                oldest=f"{since:.6f}",
                limit=200,
                include_all_metadata=True,
                cursor=cursor,
            )
            for ts, ids in _our_messages(page.get("messages")):
                for alert_id in ids & wanted:
                    found.setdefault(alert_id, ts)
            cursor = _next_cursor(page)
            if wanted <= found.keys() or not cursor:
                return found, True
        return found, False

    def channel_id(self, name: str) -> str | None:
        """The ID of the channel called ``name`` (``#`` optional), by ``conversations.list``."""
        wanted, cursor = name.removeprefix("#"), None
        for _ in range(HISTORY_PAGES):
            page = self._call(
                "list the channels of",
                self.client.conversations_list,
                types="public_channel,private_channel",
                exclude_archived=True,
                limit=1000,
                cursor=cursor,
            )
            for channel in page.get("channels") or []:
                if isinstance(channel, dict) and channel.get("name") == wanted and channel.get("id"):
                    return str(channel["id"])
            cursor = _next_cursor(page)
            if not cursor:
                return None
        return None

    def _call(self, doing: str, method: Callable, *, maybe_posted: bool = False, **kwargs):
        """One Web API call within the budget; every failure a :class:`DeliveryError`."""
        self._fit_timeout()
        if self.budget.remaining() < MIN_REQUEST_S:
            raise DeliveryError(self.budget.spent(), stop=True)
        for handler in self._handlers:
            handler.reset()
        try:
            return method(**kwargs)
        except SlackApiError as exc:
            raise self._answered(exc, maybe_posted) from None
        except (URLError, SlackRequestError) as exc:  # the request never reached Slack
            problem = f"cannot {doing} {self.settings.base_url}: {_reason(exc)}"
            raise DeliveryError(self._scrub(problem), stop=True) from None
        except Exception as exc:  # a timeout, a connection lost before the answer, an answer not JSON
            problem = f"no answer from {self.settings.base_url} ({_reason(exc)})"
            if maybe_posted:
                problem += ": Slack may have posted it; a later flush looks for it before posting again"
            raise DeliveryError(self._scrub(problem), maybe_posted=maybe_posted, stop=True) from None

    def _answered(self, exc: SlackApiError, maybe_posted: bool) -> DeliveryError:
        status = exc.response.status_code
        error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
        problem = f"Slack answered HTTP {status}: {error or 'no error code'}"
        if status == 429:
            problem += (
                f" ({self._rate_limited(retry_after(exc.response.headers or {}))}; left for the next flush)"
            )
        # A 5xx may come after Slack stored the message: confirm it before posting again.
        return DeliveryError(
            self._scrub(problem),
            maybe_posted=maybe_posted and status >= 500,
            answered=True,
            stop=status == 429,
        )

    def _rate_limited(self, wait: float) -> str:
        """Why a 429 was not waited out: Slack asked for more than the bound, the wait did not fit in
        what the budget had left (then it was not waited for at all), or the retries ran out."""
        handler = self._handlers[0]
        budget = f"this flush's {seconds_text(self.budget.seconds)} s budget"
        if wait > self.max_retry_after_s:
            bound = seconds_text(self.max_retry_after_s)
            return f"Retry-After {seconds_text(wait)} s: more than the {bound} s bound"
        if isinstance(handler, WithinBudget) and handler.declined is not None:
            wanted, left = handler.declined
            return f"Retry-After {seconds_text(wanted)} s does not fit in the {left:.1f} s left of {budget}"
        waited = handler.waited if isinstance(handler, WithinBudget) else []
        if waited:
            return (
                f"still rate limited after {len(waited)} wait(s) for Retry-After "
                f"({seconds_text(sum(waited))} s in all)"
            )
        return f"Retry-After {seconds_text(wait)} s"

    def _fit_timeout(self) -> None:
        """The next request may take no longer than the budget has left."""
        self.client.timeout = max(0.1, min(self.timeout_s, self.budget.remaining()))

    def _scrub(self, message: str) -> str:
        token = self.settings.token
        return " ".join((message.replace(token, "[token]") if token else message).split())


def _our_messages(messages) -> list[tuple[str, set[str]]]:
    """``(ts, alert ids)`` of the messages in a history page that carry our metadata."""
    out = []
    for msg in messages if isinstance(messages, list) else []:
        metadata = msg.get("metadata") if isinstance(msg, dict) else None
        if not isinstance(metadata, dict) or metadata.get("event_type") != METADATA_EVENT:
            continue
        payload = metadata.get("event_payload")
        ids = payload.get("alert_ids") if isinstance(payload, dict) else None
        if isinstance(ids, str) and isinstance(msg.get("ts"), str):
            out.append((msg["ts"], set(ids.split())))
    return out


def _next_cursor(page) -> str | None:
    meta = page.get("response_metadata")
    cursor = meta.get("next_cursor") if isinstance(meta, dict) else None
    return cursor if isinstance(cursor, str) and cursor else None


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the socket error
    return str(reason or exc) or type(exc).__name__

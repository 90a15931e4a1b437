"""Delivering the outbox to Slack with slack-sdk (``WebClient.chat_postMessage``).

Configuration comes from the environment only (SPEC §6): ``SLACK_BOT_TOKEN``, ``SLACK_CHANNEL`` and,
optionally, ``SLACK_API_BASE_URL`` (slack-sdk's ``base_url``: a proxy, or a test server). Retries are
slack-sdk's own handlers: HTTP 429 waits for ``Retry-After`` (up to a bound, beyond which the alert
simply stays pending for the next run), 5xx answers back off, connection errors are retried.

The alerts one run raised are posted as one message (``alerts.blocks.message``); a run still in
progress is left for the flush after it ends (the caller says which runs are finished). An alert that
waited longer than its time to live (``RAGSPINE_ALERT_TTL_HOURS``, default 24) is marked expired
instead of posted.

Nothing here raises because Slack is absent or failing: :func:`flush` records each failed attempt
with its error in the outbox and leaves the alert pending. The token is never part of an error
message, a log line or the outbox.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator

from ragspine_pipeline.alerts.blocks import message
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.outbox import Entry, Outbox

DEFAULT_BASE_URL = WebClient.BASE_URL
DEFAULT_TTL_HOURS = 24.0


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


class BoundedRateLimitRetryHandler(RateLimitErrorRetryHandler):
    """slack-sdk's 429 handler (it sleeps for ``Retry-After``), except when Slack asks for a longer
    wait than ``max_wait_s``: then the post fails now and the alert waits in the outbox instead of
    holding the run."""

    def __init__(self, max_retry_count: int, max_wait_s: float) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait_s = max_wait_s

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        if not super()._can_retry(state=state, request=request, response=response, error=error):
            return False
        retry_after = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), ["1"])
        try:
            return float(retry_after[0]) <= self.max_wait_s
        except (TypeError, ValueError):
            return True  # unreadable: slack-sdk falls back to about a second


class DeliveryError(Exception):
    """One failed post, as one line without secrets; ``unreachable`` when Slack did not answer at all."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class SlackSender:
    """Posts alerts with one configured ``WebClient``."""

    def __init__(
        self,
        settings: SlackSettings,
        timeout_s: int = 10,
        rate_limit_retries: int = 3,
        max_retry_after_s: float = 30,
        server_error_retries: int = 2,
        connection_retries: int = 2,
    ) -> None:
        if settings.missing:
            raise ValueError(settings.missing)
        self.settings = settings
        backoff = BackoffRetryIntervalCalculator(backoff_factor=0.5)
        self.client = WebClient(
            token=settings.token,
            base_url=settings.base_url,
            timeout=timeout_s,
            retry_handlers=[
                BoundedRateLimitRetryHandler(rate_limit_retries, max_retry_after_s),
                ServerErrorRetryHandler(max_retry_count=server_error_retries, interval_calculator=backoff),
                ConnectionErrorRetryHandler(max_retry_count=connection_retries, interval_calculator=backoff),
            ],
        )

    def post(self, alerts: Alert | Sequence[Alert]) -> str | None:
        """Post one message covering ``alerts`` (one run's); the message's ``ts``. Raises
        :class:`DeliveryError` when Slack did not take it."""
        text, blocks = message([alerts] if isinstance(alerts, Alert) else list(alerts))
        try:
            response = self.client.chat_postMessage(channel=self.settings.channel, text=text, blocks=blocks)
        except SlackApiError as exc:
            status = exc.response.status_code
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            raise DeliveryError(
                self._scrub(f"Slack answered HTTP {status}: {error or 'no error code'}")
            ) from None
        except Exception as exc:  # urllib's URLError, timeouts, an answer that is not JSON: not delivered
            problem = f"cannot post to {self.settings.base_url}: {_reason(exc)}"
            raise DeliveryError(self._scrub(problem), unreachable=True) from None
        return response.get("ts")

    def _scrub(self, message: str) -> str:
        token = self.settings.token
        return " ".join((message.replace(token, "[token]") if token else message).split())


@dataclass
class FlushResult:
    delivered: list[str] = field(default_factory=list)  # alert ids
    failed: dict[str, str] = field(default_factory=dict)  # alert id -> error of this attempt
    expired: list[str] = field(default_factory=list)  # alert ids past their time to live
    pending: int = 0  # still pending after this pass (failed, not attempted, or their run not finished)
    waiting: int = 0  # of those, alerts of runs still in progress
    messages: int = 0  # Slack messages posted
    set_aside: int = 0  # corrupt outbox lines moved aside during this pass
    skipped: str | None = None  # why nothing was attempted


def flush(
    outbox: Outbox,
    settings: SlackSettings | None = None,
    sender: SlackSender | None = None,
    *,
    finished: Callable[[str], bool] | None = None,
    ttl_hours: float = DEFAULT_TTL_HOURS,
    now: datetime | None = None,
) -> FlushResult:
    """Deliver every pending alert, oldest first, one message per run; record each delivery, failed
    attempt or expiry.

    ``finished(run_id)`` says whether a run has ended (None: every run has); the alerts of a run still
    in progress wait, so that the run's alerts go out together once it ends. Alerts older than
    ``ttl_hours`` are marked expired, never posted. Without a token or channel nothing is attempted
    (``skipped`` says why) and every alert stays pending. After the first connection failure the rest
    are not attempted in this pass: Slack is down, and each would only wait for its own timeouts.
    """
    settings = settings or SlackSettings.from_env()
    deadline = (now or datetime.now(UTC)) - timedelta(hours=ttl_hours)
    with outbox.delivering():
        view = outbox.read()
        result = FlushResult(set_aside=view.set_aside)
        pending = []
        for entry in view.pending:
            if _created(entry) < deadline:
                outbox.record_expiry(entry.alert.id, ttl_hours)
                result.expired.append(entry.alert.id)
            else:
                pending.append(entry)
        groups = _by_run(pending)
        ready = [
            g for g in groups if g[0].alert.run_id is None or finished is None or finished(g[0].alert.run_id)
        ]
        result.waiting = sum(len(g) for g in groups) - sum(len(g) for g in ready)
        result.pending = len(pending)
        if settings.missing and sender is None:
            result.skipped = settings.missing
            return result
        sender = sender or SlackSender(settings)
        for group in ready:
            ids = [entry.alert.id for entry in group]
            try:
                ts = sender.post([entry.alert for entry in group])
            except DeliveryError as exc:
                for alert_id in ids:
                    outbox.record_failure(alert_id, str(exc))
                    result.failed[alert_id] = str(exc)
                if exc.unreachable:
                    break
                continue
            for alert_id in ids:
                outbox.record_delivery(alert_id, sender.settings.channel or "", ts)
            result.delivered += ids
            result.messages += 1
        result.pending = len(pending) - len(result.delivered)
        return result


def _by_run(entries: list[Entry]) -> list[list[Entry]]:
    """Pending entries grouped by run (an alert without a run is a group of its own), in the order each
    group's first alert was queued."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.alert.run_id or f"alert:{entry.alert.id}", []).append(entry)
    return list(groups.values())


def _created(entry: Entry) -> datetime:
    try:
        created = datetime.fromisoformat(entry.alert.created_at)
    except ValueError:
        return datetime.now(UTC)  # unreadable: treat as new rather than drop it
    return created if created.tzinfo else created.replace(tzinfo=UTC)


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the socket error
    return str(reason or exc) or type(exc).__name__

"""Delivering the outbox to Slack with slack-sdk (``WebClient.chat_postMessage``).

Configuration comes from the environment only (SPEC §6): ``SLACK_BOT_TOKEN``, ``SLACK_CHANNEL`` and,
optionally, ``SLACK_API_BASE_URL`` (slack-sdk's ``base_url``: a proxy, or a test server). Retries are
slack-sdk's own handlers: HTTP 429 waits for ``Retry-After`` (up to a bound, beyond which the alert
simply stays pending for the next run), 5xx answers back off, connection errors are retried.

Nothing here raises because Slack is absent or failing: :func:`flush` records each failed attempt
with its error in the outbox and leaves the alert pending. The token is never part of an error
message, a log line or the outbox.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator

from ragspine_pipeline.alerts.blocks import blocks, fallback_text
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.outbox import Outbox

DEFAULT_BASE_URL = WebClient.BASE_URL


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

    def post(self, alert: Alert) -> str | None:
        """Post ``alert``; the message's ``ts``. Raises :class:`DeliveryError` when Slack did not take it."""
        try:
            response = self.client.chat_postMessage(
                channel=self.settings.channel, text=fallback_text(alert), blocks=blocks(alert)
            )
        except SlackApiError as exc:
            status = exc.response.status_code
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            raise DeliveryError(
                self._scrub(f"Slack answered HTTP {status}: {error or 'no error code'}")
            ) from None
        except (
            Exception
        ) as exc:  # urllib's URLError, timeouts, an answer that is not JSON: all "not delivered"
            message = f"cannot post to {self.settings.base_url}: {_reason(exc)}"
            raise DeliveryError(self._scrub(message), unreachable=True) from None
        return response.get("ts")

    def _scrub(self, message: str) -> str:
        token = self.settings.token
        return " ".join((message.replace(token, "[token]") if token else message).split())


@dataclass
class FlushResult:
    delivered: list[str] = field(default_factory=list)  # alert ids
    failed: dict[str, str] = field(default_factory=dict)  # alert id -> error of this attempt
    pending: int = 0  # still pending after this pass (failed, or not attempted)
    set_aside: int = 0  # corrupt outbox lines moved aside during this pass
    skipped: str | None = None  # why nothing was attempted


def flush(
    outbox: Outbox, settings: SlackSettings | None = None, sender: SlackSender | None = None
) -> FlushResult:
    """Deliver every pending alert, oldest first; record each delivery or failed attempt.

    Without a token or channel nothing is attempted (``skipped`` says why) and every alert stays
    pending. After the first connection failure the rest are not attempted in this pass: Slack is
    down, and each would only wait for its own timeouts.
    """
    settings = settings or SlackSettings.from_env()
    with outbox.delivering():
        view = outbox.read()
        result = FlushResult(set_aside=view.set_aside)
        pending = view.pending
        if settings.missing and sender is None:
            result.skipped, result.pending = settings.missing, len(pending)
            return result
        sender = sender or SlackSender(settings)
        for entry in pending:
            try:
                ts = sender.post(entry.alert)
            except DeliveryError as exc:
                outbox.record_failure(entry.alert.id, str(exc))
                result.failed[entry.alert.id] = str(exc)
                if exc.unreachable:
                    break
                continue
            outbox.record_delivery(entry.alert.id, sender.settings.channel or "", ts)
            result.delivered.append(entry.alert.id)
        result.pending = len(pending) - len(result.delivered)
        return result


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the socket error
    return str(reason or exc) or type(exc).__name__

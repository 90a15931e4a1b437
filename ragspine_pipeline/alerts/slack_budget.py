"""The time one delivery pass may spend with Slack, and slack-sdk's retry handlers bounded by it: a
``Retry-After`` or back-off wait happens only when it fits in what is left, and a request that may have
reached Slack (a timeout, a connection lost while waiting for the answer) is never retried."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.error import URLError

from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.interval_calculator import RetryIntervalCalculator

DEFAULT_BUDGET_S = 30.0
MIN_REQUEST_S = 1.0  # less time than this left in the budget: no new request is started

# The clock and the sleep every budget uses (looked up at each call: a test may put a fake clock here).
monotonic = time.monotonic
sleep = time.sleep


def seconds_text(seconds: float) -> str:
    """A number of seconds as a message shows it: plain digits at any size (``100000``, ``2.5``, ``0.1``),
    never an exponent that hides the arithmetic."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return str(seconds)
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


class WaitBudget:
    """The wall-clock time one delivery pass may spend with Slack, on the monotonic clock."""

    def __init__(self, seconds: float = DEFAULT_BUDGET_S) -> None:
        self.seconds = seconds
        self.start = monotonic()

    def elapsed(self) -> float:
        return max(0.0, monotonic() - self.start)

    def remaining(self) -> float:
        """What is left, as the budget minus the time spent (exact at any budget size: a deadline of
        ``start + seconds`` would lose the clock's digits to a large budget's)."""
        return max(0.0, self.seconds - self.elapsed())

    def fits(self, wait_s: float) -> bool:
        """Whether waiting ``wait_s`` still leaves time for one more request."""
        return wait_s + MIN_REQUEST_S <= self.remaining()

    def spent(self) -> str:
        return (
            f"the {seconds_text(self.seconds)} s this flush may spend with Slack are spent "
            "(RAGSPINE_ALERT_FLUSH_BUDGET_S); the rest waits for the next flush"
        )


class WithinBudget:
    """A slack-sdk retry handler whose wait happens only when it fits in the pass's budget; after it,
    ``on_wait`` cuts the next request's timeout to what is left."""

    budget: WaitBudget
    on_wait: Callable[[], None]
    _wait_s: float = 0.0
    # Of the last request: the waits made, and the wait declined (with what was left) when it did not fit.
    waited: list[float]
    declined: tuple[float, float] | None = None

    def reset(self) -> None:
        self.waited, self.declined = [], None

    def can_retry(self, *, state, request, response=None, error=None) -> bool:
        if not super().can_retry(state=state, request=request, response=response, error=error):
            return False
        self._wait_s = self._next_wait(state, response)
        left = self.budget.remaining()
        if self._wait_s + MIN_REQUEST_S <= left:
            return True
        self.declined = (self._wait_s, left)  # not waited for at all: the call fails now, and says so
        return False

    def prepare_for_next_attempt(self, *, state, request, response=None, error=None) -> None:
        state.next_attempt_requested = True
        sleep(self._wait_s)
        self.waited.append(self._wait_s)
        state.increment_current_attempt()
        self.on_wait()

    def _next_wait(self, state, response) -> float:
        return self.interval_calculator.calculate_sleep_duration(state.current_attempt)


class BoundedRateLimitRetryHandler(WithinBudget, RateLimitErrorRetryHandler):
    """slack-sdk's 429 handler: it waits for ``Retry-After`` — unless Slack asks for longer than
    ``max_wait_s`` or than the pass's budget has left: then the post fails now and the alert waits in
    the outbox instead of holding the run."""

    def __init__(
        self,
        max_retry_count: int,
        max_wait_s: float,
        budget: WaitBudget | None = None,
        on_wait: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait_s, self.budget, self.on_wait = max_wait_s, budget or WaitBudget(), on_wait
        self.reset()

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return super()._can_retry(state=state, request=request, response=response, error=error) and (
            retry_after(response.headers) <= self.max_wait_s
        )

    def _next_wait(self, state, response) -> float:
        return retry_after(response.headers)


def backoff() -> RetryIntervalCalculator:
    """The waits between retries of a server error or an unsent request: slack-sdk's exponential
    back-off (0.5 s, then 1 s), each plus up to a second of its random jitter."""
    return BackoffRetryIntervalCalculator(backoff_factor=0.5)


class ServerErrorRetry(WithinBudget, ServerErrorRetryHandler):
    def __init__(self, max_retry_count: int, budget: WaitBudget, on_wait: Callable[[], None]) -> None:
        super().__init__(max_retry_count, backoff())
        self.budget, self.on_wait = budget, on_wait
        self.reset()


class UnsentRequestRetry(WithinBudget, ConnectionErrorRetryHandler):
    """Retries only a request that never reached Slack: urllib raises URLError while connecting or
    sending. A connection lost while waiting for the answer (reset, closed, timed out) is not retried:
    Slack may have posted it, so the next pass looks in the channel's history first."""

    def __init__(self, max_retry_count: int, budget: WaitBudget, on_wait: Callable[[], None]) -> None:
        super().__init__(max_retry_count, backoff(), [URLError])
        self.budget, self.on_wait = budget, on_wait
        self.reset()


def retry_after(headers) -> float:
    """Slack's ``Retry-After`` in seconds (1 when absent or unreadable), from slack-sdk's header dict
    (a string per name) or its retry response (a list per name)."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    value = value[0] if isinstance(value, list) and value else value
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 1.0
    return seconds if 0 <= seconds < float("inf") else 1.0

"""Flush budgets honoured as stated, against the stateful Slack on loopback with a fake clock (the
budget's ``monotonic`` and ``sleep`` in ``alerts.slack_budget``): a Retry-After that fits is waited for, one
longer than what is left is not waited for at all and says so at once, and the message's arithmetic is
right at any budget size."""

from __future__ import annotations

import time

import pytest

from ragspine_pipeline.alerts import slack_budget
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.alerts.slack_budget import WaitBudget, seconds_text
from tests.alerts.test_delivery import queue, settings


class FakeClock:
    """The budget's clock: it moves only when the code under test sleeps (and records each sleep)."""

    def __init__(self) -> None:
        self.now = 5_000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(slack_budget, "monotonic", fake.monotonic)
    monkeypatch.setattr(slack_budget, "sleep", fake.sleep)
    return fake


def test_a_retry_after_that_fits_a_large_budget_is_waited_for(tmp_path, slack, clock):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    [alert] = queue(outbox)
    slack.rate_limit(30)
    start = time.monotonic()
    result = flush(outbox, settings(slack), budget_s=1e5)
    assert time.monotonic() - start < 10  # the wait was the fake clock's
    assert clock.sleeps == [30.0]  # Retry-After 30 s, waited once, exactly
    assert result.delivered == [alert.id] and result.pending == 0 and result.error is None
    assert slack.posted_ids() == [alert.id]


def test_a_retry_after_longer_than_what_is_left_is_not_waited_for_and_says_so(tmp_path, slack, clock):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    [alert] = queue(outbox)
    slack.rate_limit(30)
    result = flush(outbox, settings(slack), budget_s=10)
    assert clock.sleeps == []  # not waited for at all
    reason = result.failed[alert.id]
    assert "Retry-After 30 s does not fit in the 10.0 s left of this flush's 10 s budget" in reason
    assert result.pending == 1 and slack.messages == []


def test_retries_that_run_out_under_a_large_budget_say_so_not_that_the_wait_did_not_fit(
    tmp_path, slack, clock
):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    [alert] = queue(outbox)
    slack.rate_limit(30, 30, 30, 30)  # more 429s than the sender retries
    result = flush(outbox, settings(slack), budget_s=1e5)
    assert clock.sleeps == [30.0, 30.0, 30.0]
    reason = result.failed[alert.id]
    assert "does not fit" not in reason
    assert "still rate limited after 3 wait(s) for Retry-After (90 s in all)" in reason
    assert result.pending == 1 and slack.messages == []


def test_budget_arithmetic_is_exact_and_plain_at_any_size(clock):
    budget = WaitBudget(1e9)
    clock.sleep(91.6)
    assert budget.remaining() == pytest.approx(1e9 - 91.6)
    assert budget.fits(1e9 - 91.6 - 1) and not budget.fits(1e9 - 91.6)
    assert "the 1000000000 s this flush may spend" in budget.spent()
    assert [seconds_text(s) for s in (2, 2.5, 1e5, 1234567.0, 0.1)] == [
        "2",
        "2.5",
        "100000",
        "1234567",
        "0.1",
    ]

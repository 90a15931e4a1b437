"""The delivery protocol against a stateful Slack on loopback: a slow Slack, a full disk, a rate limit
and a budget never cause a second post of one alert, and never lose one. Tests taking the ``outbox``
fixture run on the file outbox and on PostgreSQL."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from ragspine_pipeline import files as files_module
from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.alerts.slack import SlackSender, SlackSettings
from ragspine_pipeline.errors import InputError
from tests.alerts.slack_server import TOKEN


def settings(slack, channel: str = "C0ALERTS") -> SlackSettings:
    return SlackSettings.from_env(
        {"SLACK_BOT_TOKEN": TOKEN, "SLACK_CHANNEL": channel, "SLACK_API_BASE_URL": slack.url}
    )


def queue(outbox: AlertOutbox, n: int = 1, error: str = "store unreachable") -> list[Alert]:
    alerts = [run_failure_alert("nightly_eval", f"run-{i}", "traces", error) for i in range(n)]
    for alert in alerts:
        assert outbox.observe(alert) is not None
    return alerts


class FullDisk:
    """Stands in for the outbox's one write function: lines matching ``when`` hit a full disk after
    half of their bytes were written, as a real ENOSPC can."""

    def __init__(self, monkeypatch, when: bytes = b"") -> None:
        self.when = when
        self.real = files_module._write_all
        monkeypatch.setattr(files_module, "_write_all", self)

    def __call__(self, fd: int, data: bytes) -> None:
        if self.when is None or self.when not in data:
            return self.real(fd, data)
        self.real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def freed(self) -> None:
        self.when = None


# -- a slow Slack ------------------------------------------------------------------------------------


def test_a_post_answered_after_the_client_timeout_is_confirmed_not_posted_again(outbox, slack):
    [alert] = queue(outbox)
    slack.set(delay_s=3)  # Slack stores the message at once and answers after the client gave up
    timed_out = flush(outbox, sender=SlackSender(settings(slack), timeout_s=1))
    assert timed_out.delivered == [] and timed_out.pending == 1
    assert "Slack may have posted it" in timed_out.failed[alert.id]
    assert len(slack.messages) == 1
    [entry] = outbox.read().entries
    assert entry.unconfirmed and entry.attempts == 1

    slack.set(delay_s=0)
    too_soon = flush(outbox, settings(slack))  # the attempt may still land: nothing is posted yet
    assert too_soon.pending == 1 and "RAGSPINE_ALERT_CONFIRM_AFTER_S" in too_soon.failed[alert.id]
    assert slack.calls("chat.postMessage") == 1 and slack.calls("conversations.history") == 0

    confirmed = flush(outbox, settings(slack), confirm_after_s=0)
    assert confirmed.delivered == confirmed.confirmed == [alert.id] and confirmed.messages == 0
    assert slack.calls("chat.postMessage") == 1 and slack.posted_ids() == [alert.id]
    [entry] = outbox.read().entries
    assert entry.status == "delivered" and entry.ts == slack.messages[0].ts and entry.confirmed
    assert flush(outbox, settings(slack), confirm_after_s=0).delivered == []
    assert slack.calls("chat.postMessage") == 1


def test_after_a_5xx_the_history_is_read_within_seconds_not_after_the_unanswered_wait(outbox, slack):
    """A 5xx may follow a stored message, so the alert is confirmed before it is posted again; but the
    request is over, so that happens on the next pass seconds later, not RAGSPINE_ALERT_CONFIRM_AFTER_S
    (120 s) later: an alert waits one delivery interval after Slack recovers."""
    [alert] = queue(outbox)
    slack.down = True
    failed = flush(outbox, settings(slack))
    assert failed.delivered == [] and "HTTP 500" in failed.failed[alert.id]
    [entry] = outbox.read().entries
    assert entry.unconfirmed and entry.answered
    sent = datetime.fromisoformat(entry.sending_at)

    slack.down = False
    held = flush(outbox, settings(slack), now=sent + timedelta(seconds=5))
    assert held.pending == 1 and "10 s old" in held.failed[alert.id]
    assert slack.calls("conversations.history") == 0
    posted = flush(outbox, settings(slack), now=sent + timedelta(seconds=15))
    assert posted.delivered == [alert.id] and posted.confirmed == [] and posted.messages == 1
    assert slack.calls("conversations.history") == 1 and slack.posted_ids() == [alert.id]


@pytest.mark.parametrize("channel", ["C0ALERTS", "#rag-alerts"])
def test_an_attempt_that_never_reached_slack_is_posted_again_after_looking(outbox, slack, channel):
    [alert] = queue(outbox)
    outbox.record_sending([alert.id], channel)  # a flush killed between persisting and posting
    result = flush(outbox, settings(slack, channel), confirm_after_s=0)
    assert result.delivered == [alert.id] and result.confirmed == [] and result.messages == 1
    assert slack.calls("conversations.history") == 1  # looked first, found nothing, posted once
    assert slack.calls("conversations.list") == (1 if channel.startswith("#") else 0)
    assert slack.posted_ids() == [alert.id]
    assert slack.messages[0].metadata == {
        "event_type": "ragspine_alert",
        "event_payload": {"alert_ids": alert.id},
    }


# -- a full disk -------------------------------------------------------------------------------------


def test_observe_on_a_full_disk_is_one_line_and_leaves_no_half_line(tmp_path, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    queue(outbox)
    before = outbox.path.read_bytes()
    disk = FullDisk(monkeypatch)
    alert = run_failure_alert("nightly_eval", "run-full", None, "boom")
    with pytest.raises(InputError) as caught:
        outbox.observe(alert)
    message = str(caught.value)
    assert "\n" not in message and "cannot queue the alert: No space left on device" in message
    assert outbox.path.read_bytes() == before  # the half-written line was taken back
    disk.freed()
    assert outbox.read().set_aside == 0
    assert outbox.observe(alert) is not None  # not queued, so still news once there is room


def test_an_alert_check_on_a_full_disk_warns_with_the_reason_and_raises_it_again_later(tmp_path, monkeypatch):
    from ragspine_pipeline.defs.resources import AlertsResource

    alerts = AlertsResource(outbox_path=str(tmp_path / "outbox.jsonl"))
    alert = run_failure_alert("nightly_eval", "run-full", None, "boom")
    disk = FullDisk(monkeypatch)
    check = alerts.alert_check(alert, log=None)
    assert check.passed is False
    assert "not queued" in check.description and "No space left on device" in check.description
    assert "\n" not in check.description
    disk.freed()
    check = alerts.alert_check(alert, log=None)  # the stream's state was not advanced: still news
    assert check.passed is True and check.metadata["new_alert"].value.startswith("run_failure")
    assert [e.alert.id for e in alerts.outbox().read().pending] == [alert.id]


def test_observe_on_a_real_full_file_system_is_one_line(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    try:
        outbox = Outbox(disk / "outbox.jsonl")
        queue(outbox)
        filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError) as full:  # take the rest of the 64 KiB
            while True:
                os.write(filler, b"x" * 4096)
        os.close(filler)
        assert full.value.errno == errno.ENOSPC
        alert = run_failure_alert("nightly_eval", "run-full", None, "x" * 400)
        with pytest.raises(InputError, match="No space left on device") as caught:
            for _ in range(20):  # until the outbox's last page is full too
                outbox.observe(run_failure_alert("nightly_eval", f"r-{_}", None, "x" * 400))
        assert "\n" not in str(caught.value)
        assert outbox.read().set_aside == 0  # every line whole
        (disk / "filler").unlink()
        assert outbox.observe(alert) is not None
    finally:
        subprocess.run(["umount", str(disk)], check=True)
        shutil.rmtree(disk, ignore_errors=True)


def test_no_room_to_record_the_attempt_means_no_post(tmp_path, slack, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    [alert] = queue(outbox)
    disk = FullDisk(monkeypatch, when=b'"event": "sending"')
    result = flush(outbox, settings(slack))
    assert slack.messages == [] and result.delivered == [] and result.pending == 1
    assert result.failed[alert.id] == result.error and "\n" not in result.error
    assert result.error.startswith("not posted:") and "No space left on device" in result.error
    assert outbox.read().set_aside == 0 and outbox.read().pending[0].sending_at is None
    disk.freed()
    assert flush(outbox, settings(slack)).delivered == [alert.id]
    assert slack.posted_ids() == [alert.id]


def test_a_delivery_that_cannot_be_recorded_is_confirmed_not_posted_again(tmp_path, slack, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    [alert] = queue(outbox)
    disk = FullDisk(monkeypatch, when=b'"event": "delivered"')
    posted = flush(outbox, settings(slack))
    assert posted.delivered == [alert.id] and "No space left on device" in posted.error
    assert outbox.read().pending[0].unconfirmed  # only the "sending" line made it to disk
    assert flush(outbox, settings(slack), confirm_after_s=0).confirmed == []  # still no room to record
    disk.freed()
    again = flush(outbox, settings(slack), confirm_after_s=0)
    assert again.confirmed == [alert.id] and again.messages == 0
    assert slack.posted_ids() == [alert.id]  # one post in all


# -- rate limits and the budget ----------------------------------------------------------------------


def test_a_long_retry_after_does_not_hold_the_flush_beyond_its_budget(tmp_path, slack, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alerts = queue(outbox, 3)
    slack.rate_limit(30)
    monkeypatch.setenv("RAGSPINE_ALERT_FLUSH_BUDGET_S", "2")
    start = time.monotonic()
    result = flush(outbox, settings(slack))
    assert time.monotonic() - start < 2
    assert result.delivered == [] and result.pending == 3 and slack.messages == []
    reason = result.failed[alerts[0].id]
    assert (
        "HTTP 429" in reason and "Retry-After 30 s does not fit in the" in reason and "2 s budget" in reason
    )
    assert outbox.read().pending[0].sending_at is None  # a 429 posted nothing: next time, post at once
    assert flush(outbox, settings(slack)).delivered == [a.id for a in alerts]


def test_waits_stop_when_the_budget_is_spent_and_the_rest_stays_pending(tmp_path, slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alerts = queue(outbox, 4)
    slack.set(throttle_s=1)  # Slack takes one message a second, and says so with Retry-After: 1
    start = time.monotonic()
    result = flush(outbox, settings(slack), budget_s=2.5)
    assert time.monotonic() - start < 3
    assert result.delivered == [a.id for a in alerts[:2]] and result.pending == 2  # the second waited 1 s
    assert "does not fit in the" in result.error and "2.5 s budget" in result.error
    assert flush(outbox, settings(slack)).pending == 0
    assert sorted(slack.posted_ids()) == sorted(a.id for a in alerts)  # each once


def test_a_timeout_counts_against_the_budget(tmp_path, slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    [alert] = queue(outbox)
    slack.set(delay_s=6)
    start = time.monotonic()
    result = flush(outbox, sender=SlackSender(settings(slack), timeout_s=10), budget_s=2)
    assert time.monotonic() - start < 3.5  # the request's timeout was cut to the budget
    assert result.pending == 1 and "no answer" in result.failed[alert.id]


def test_an_unconfirmed_alert_past_its_ttl_is_looked_for_before_it_expires(outbox, slack):
    [alert] = queue(outbox)
    slack.set(delay_s=2)
    flush(outbox, sender=SlackSender(settings(slack), timeout_s=1))
    later = datetime.now(UTC) + timedelta(hours=25)
    result = flush(outbox, settings(slack), ttl_hours=24, now=later)
    assert result.confirmed == [alert.id] and result.expired == []  # it did go out: say so
    assert slack.posted_ids() == [alert.id]


def test_an_alert_past_its_time_to_live_is_expired_kept_and_never_posted(outbox, slack):
    [old] = queue(outbox)
    later = datetime.now(UTC) + timedelta(hours=25)
    result = flush(outbox, settings(slack), ttl_hours=24, now=later)
    assert result.expired == [old.id] and result.delivered == [] and result.pending == 0
    assert slack.messages == []
    [entry] = outbox.read().entries
    assert entry.status == "expired" and entry.expired_at
    assert flush(outbox, settings(slack), ttl_hours=24, now=later).expired == []  # expired once


# -- what reaches Slack ------------------------------------------------------------------------------


def _texts(value, key: str = ""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v, key)
    elif isinstance(value, str) and key != "url":
        yield value


def test_mentions_and_links_from_the_data_arrive_escaped_in_text_and_blocks(tmp_path, slack):
    from ragspine_pipeline.alerts.builders import release_alert
    from ragspine_pipeline.decision.release import ReleaseDecision

    hostile = "<!channel> <@U123> <http://x|y>"
    decision = {
        "decision": "block",
        "index_version": f"ix-{hostile}",
        "golden_version": hostile,
        "run_id": "run-esc",
        "failed_gates": [
            {"metric": f"recall {hostile}", "value": 0.5, "op": ">=", "threshold": 0.9, "delta": -0.4}
        ],
        "failed_slices": [
            {"dimension": "workflow", "value": hostile, "n": 4, "releasable_rate": 0.2, "min_rate": 0.7}
        ],
        "regressions": [],
        "integrity": [{"detail": f"mixed index versions {hostile}"}],
    }
    outbox = Outbox(tmp_path / "outbox.jsonl")
    outbox.observe(
        release_alert(
            ReleaseDecision.model_validate(decision), "release:golden", "http://dagster", f"page {hostile}"
        )
    )
    outbox.observe(run_failure_alert("nightly_eval", "run-esc", "sut", f"SUT said {hostile}"))
    assert len(flush(outbox, settings(slack)).delivered) == 2
    [message] = slack.messages
    texts = [message.text, *_texts(message.blocks)]
    assert all("<" not in t and ">" not in t for t in texts), [t for t in texts if "<" in t or ">" in t]
    assert "&lt;!channel&gt;" in message.text and "&lt;@U123&gt;" in message.text
    blocks = " ".join(_texts(message.blocks))
    for shown in (
        "ix-&lt;!channel&gt;",
        "SUT said &lt;!channel&gt;",
        "&lt;http://x|y&gt;",
        "recall &lt;!channel",
    ):
        assert shown in blocks

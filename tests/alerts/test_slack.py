"""Delivery through slack-sdk against a fake Slack Web API on loopback (a real HTTP server)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import pytest

from ragspine_pipeline.alerts.builders import gate_alert
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.model import Finding
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.alerts.slack import SlackSender, SlackSettings
from tests.conftest import Reply

TOKEN = "xoxb-test-0000-secret-token"


def settings(url: str, token: str | None = TOKEN, channel: str | None = "#rag-alerts") -> SlackSettings:
    return SlackSettings.from_env(
        {"SLACK_BOT_TOKEN": token or "", "SLACK_CHANNEL": channel or "", "SLACK_API_BASE_URL": url}
    )


def queued(outbox: Outbox, stream: str = "release:golden", index: str = "ix-1", run_id: str = "r1"):
    finding = Finding(
        kind="gate",
        name="recall@k",
        value=0.8,
        reference=0.9,
        reference_kind="threshold",
        op=">=",
        delta=-0.1,
    )
    alert = gate_alert([finding], stream, "retrieval gates", run_id=run_id, index_version=index)
    assert outbox.observe(alert) is not None
    return alert


def test_a_pending_alert_is_posted_once_with_blocks_fallback_and_bearer_token(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alert = queued(outbox)
    result = flush(outbox, settings(fake_slack.url))
    assert result.delivered == [alert.id] and result.pending == 0
    [post] = fake_slack.posts
    assert post["channel"] == "#rag-alerts" and "recall@k" in post["text"] and post["blocks"]
    assert fake_slack.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    [entry] = outbox.read().entries
    assert not entry.pending and entry.ts == "1.000100"
    assert flush(outbox, settings(fake_slack.url)).delivered == []  # nothing pending: nothing posted
    assert len(fake_slack.posts) == 1


def test_a_429_with_retry_after_delays_but_does_not_lose_the_message(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    queued(outbox)
    fake_slack.script(Reply(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}))
    start = time.monotonic()
    result = flush(outbox, settings(fake_slack.url))
    assert time.monotonic() - start >= 1.0  # slack-sdk's handler waited for Retry-After
    assert len(result.delivered) == 1 and len(fake_slack.posts) == 2


def test_a_retry_after_beyond_the_bound_leaves_the_alert_pending_instead_of_waiting(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alert = queued(outbox)
    fake_slack.script(Reply(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "3600"}))
    start = time.monotonic()
    result = flush(outbox, settings(fake_slack.url))
    assert time.monotonic() - start < 5
    assert result.pending == 1 and "HTTP 429" in result.failed[alert.id]


@pytest.mark.usefixtures("quick_slack_retries")
def test_server_errors_are_retried_by_slack_sdk(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    queued(outbox)
    fake_slack.script(Reply(500, b"boom"), Reply(503, b"busy"))
    result = flush(outbox, settings(fake_slack.url))
    assert len(result.delivered) == 1 and len(fake_slack.posts) == 3


@pytest.mark.parametrize("error", ["channel_not_found", "invalid_auth"])
def test_an_error_payload_keeps_the_alert_pending_with_the_error(tmp_path, fake_slack, error):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alert = queued(outbox)
    fake_slack.script(Reply(200, {"ok": False, "error": error}))
    result = flush(outbox, settings(fake_slack.url))
    assert result.delivered == [] and result.pending == 1
    [entry] = outbox.read().pending
    assert entry.attempts == 1 and error in entry.last_error and entry.alert.id == alert.id
    assert TOKEN not in (tmp_path / "outbox.jsonl").read_text()


@pytest.mark.usefixtures("quick_slack_retries")
def test_with_slack_down_the_alert_waits_and_a_later_flush_delivers_it_once(
    tmp_path, fake_slack, closed_port
):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    first, second = queued(outbox), queued(outbox, stream="release:agent", run_id="r2")
    down = flush(outbox, settings(f"http://127.0.0.1:{closed_port}"))
    assert down.delivered == [] and down.pending == 2
    assert list(down.failed) == [first.id]  # Slack unreachable: the second is not tried in this pass
    assert "127.0.0.1" in down.failed[first.id] and TOKEN not in down.failed[first.id]

    back = flush(outbox, settings(fake_slack.url))
    assert back.delivered == [first.id, second.id] and back.pending == 0
    assert flush(outbox, settings(fake_slack.url)).delivered == []
    assert len(fake_slack.posts) == 2


def test_without_a_token_nothing_is_attempted_and_the_alert_stays_pending(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    queued(outbox)
    result = flush(outbox, settings(fake_slack.url, token=None))
    assert result.skipped and "SLACK_BOT_TOKEN" in result.skipped and result.pending == 1
    assert fake_slack.requests == []


def test_settings_never_show_the_token():
    shown = repr(SlackSettings.from_env({"SLACK_BOT_TOKEN": TOKEN, "SLACK_CHANNEL": "#c"}))
    assert TOKEN not in shown
    with pytest.raises(ValueError, match="SLACK_CHANNEL"):
        SlackSender(SlackSettings.from_env({"SLACK_BOT_TOKEN": TOKEN}))


@pytest.mark.usefixtures("quick_slack_retries")
def test_the_token_never_reaches_the_log_even_at_debug_level(tmp_path, fake_slack, closed_port, caplog):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    queued(outbox)
    with caplog.at_level(logging.DEBUG):
        flush(outbox, settings(f"http://127.0.0.1:{closed_port}"))
        fake_slack.script(Reply(200, {"ok": False, "error": "invalid_auth"}))
        flush(outbox, settings(fake_slack.url))
        flush(outbox, settings(fake_slack.url))
    assert "chat.postMessage" in caplog.text  # slack-sdk did log its requests ...
    assert TOKEN not in caplog.text  # ... without the token
    assert TOKEN not in (tmp_path / "outbox.jsonl").read_text()


def test_the_alerts_of_one_run_are_one_message(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    release = queued(outbox, stream="release:golden", run_id="r7")
    extraction = queued(outbox, stream="extraction", run_id="r7")
    other = queued(outbox, stream="release:agent", run_id="r8")
    result = flush(outbox, settings(fake_slack.url))
    assert result.messages == 2 and result.delivered == [release.id, extraction.id, other.id]
    first, second = fake_slack.posts
    assert first["text"].count("retrieval gates") == 2  # the second alert of run r7 is in the same message
    assert "divider" in [block["type"] for block in first["blocks"]]
    assert second["text"].startswith("retrieval gates: below baseline")
    ts = {entry.alert.id: entry.ts for entry in outbox.read().entries}
    assert ts[release.id] == ts[extraction.id] != ts[other.id]


def test_the_alerts_of_a_run_still_in_progress_wait_for_its_end(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alert = queued(outbox, run_id="running")
    waiting = flush(outbox, settings(fake_slack.url), finished=lambda run_id: run_id != "running")
    assert waiting.delivered == [] and waiting.pending == waiting.waiting == 1 and fake_slack.posts == []
    done = flush(outbox, settings(fake_slack.url), finished=lambda run_id: True)
    assert done.delivered == [alert.id] and len(fake_slack.posts) == 1


def test_an_alert_older_than_its_ttl_expires_unposted_and_stays_listed(tmp_path, fake_slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    old = queued(outbox, run_id="last-week")
    later = datetime.now(UTC) + timedelta(hours=25)
    result = flush(outbox, settings(fake_slack.url), ttl_hours=24, now=later)
    assert result.expired == [old.id] and result.delivered == [] and result.pending == 0
    assert fake_slack.posts == []
    [entry] = outbox.read().entries
    assert entry.status == "expired" and not entry.pending
    assert flush(outbox, settings(fake_slack.url)).delivered == []  # expired is final
    fresh = queued(outbox, run_id="today", index="ix-2")
    assert flush(outbox, settings(fake_slack.url), ttl_hours=24).delivered == [fresh.id]

"""`ragspine-eval alerts list` and `alerts flush`: the outbox from the command line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ragspine_pipeline import cli
from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.alerts.outbox import Outbox

TOKEN = "xoxb-cli-secret"


@pytest.mark.usefixtures("quick_slack_retries")
def test_flush_delivers_what_waited_while_slack_was_down(
    tmp_path, monkeypatch, fake_slack, closed_port, capsys
):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    outbox.observe(run_failure_alert("nightly_eval", "run-7", "production_traces", "store unreachable"))
    monkeypatch.setenv("RAGSPINE_ALERTS_OUTBOX", str(outbox.path))
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-alerts")

    monkeypatch.setenv("SLACK_API_BASE_URL", f"http://127.0.0.1:{closed_port}/api/")
    assert cli.main(["alerts", "flush"]) == 1
    assert "0 delivered, 1 pending" in capsys.readouterr().out
    assert cli.main(["alerts", "list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    [alert] = listed["alerts"]
    assert alert["status"] == "pending" and alert["attempts"] == 1
    assert f"127.0.0.1:{closed_port}" in alert["last_error"] and TOKEN not in alert["last_error"]

    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url + "/api")
    assert cli.main(["alerts", "flush"]) == 0
    assert "1 delivered, 0 pending" in capsys.readouterr().out
    assert cli.main(["alerts", "flush"]) == 0  # nothing left: nothing posted again
    assert [p["text"].split(":")[0] for p in fake_slack.posts] == ["Evaluation run failed"]
    assert fake_slack.requests[0].path == "/api/chat.postMessage"

    assert cli.main(["alerts", "list", "--outbox", str(outbox.path)]) == 0
    out = capsys.readouterr().out
    assert "0 pending, 1 delivered" in out and "Evaluation run failed: nightly_eval" in out


def test_flush_without_a_token_keeps_everything_pending(tmp_path, capsys):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    outbox.observe(run_failure_alert("nightly_eval", "run-8", None, "boom"))
    assert cli.main(["alerts", "flush", "--outbox", str(outbox.path)]) == 1
    captured = capsys.readouterr()
    assert "0 delivered, 1 pending" in captured.out and "SLACK_BOT_TOKEN" in captured.err


def test_connecting_slack_to_a_week_old_outbox_posts_nothing_old(tmp_path, monkeypatch, fake_slack, capsys):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    week_ago = (datetime.now(UTC) - timedelta(days=7)).isoformat(timespec="seconds")
    old = run_failure_alert("nightly_eval", "run-old", None, "store unreachable").model_copy(
        update={"created_at": week_ago}
    )
    outbox.observe(old)
    fresh = outbox.observe(run_failure_alert("nightly_eval", "run-new", None, "store unreachable again"))
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-alerts")
    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    assert cli.main(["alerts", "flush", "--outbox", str(outbox.path)]) == 0
    assert "1 delivered, 0 pending, 1 expired" in capsys.readouterr().out
    [post] = fake_slack.posts
    assert "store unreachable again" in post["text"]

    assert cli.main(["alerts", "list", "--outbox", str(outbox.path), "--format", "json"]) == 0
    statuses = {a["id"]: a["status"] for a in json.loads(capsys.readouterr().out)["alerts"]}
    assert statuses == {old.id: "expired", fresh.id: "delivered"}  # kept and listed, never posted
    assert cli.main(["alerts", "flush", "--outbox", str(outbox.path), "--ttl-hours", "0"]) == 2  # not a TTL
    assert "--ttl-hours must be positive" in capsys.readouterr().err

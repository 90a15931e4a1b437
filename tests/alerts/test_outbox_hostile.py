"""Hostile outbox and state files: every unreadable line is set aside and counted, never blocks an
alert; a path that is not a regular file is one line and exit 2, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import threading

import pytest

from ragspine_pipeline import cli, inputs
from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.alerts.slack import SlackSettings
from ragspine_pipeline.errors import InputError
from tests.alerts.slack_server import TOKEN

HOSTILE = {
    "nested 10,000 deep": b'{"event": "queued", "alert": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    "a 5,000-digit integer": b'{"event": "queued", "alert": {"id": "x", "n": ' + b"9" * 5_000 + b"}}",
    "not UTF-8": b'{"event": "queued", "alert": {"title": "\xff\xfe"}}',
    "longer than the line cap": b'{"event": "queued", "note": "' + b"a" * (inputs.MAX_LINE_BYTES + 1) + b'"}',
}


def test_hostile_lines_are_set_aside_and_counted_while_the_alerts_around_them_go_out(tmp_path, slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    before = outbox.observe(run_failure_alert("nightly_eval", "run-1", None, "before"))
    with open(outbox.path, "ab") as out:
        for line in HOSTILE.values():
            out.write(line + b"\n")
    after = outbox.observe(run_failure_alert("nightly_eval", "run-2", None, "after"))

    settings = SlackSettings.from_env(
        {"SLACK_BOT_TOKEN": TOKEN, "SLACK_CHANNEL": "C0ALERTS", "SLACK_API_BASE_URL": slack.url}
    )
    result = flush(outbox, settings)
    assert result.set_aside == len(HOSTILE) and result.delivered == [before.id, after.id]
    assert slack.posted_ids() == [before.id, after.id]

    aside = [json.loads(line) for line in outbox.corrupt_path.read_text().splitlines()]
    assert [a["line"] for a in aside] == [2, 3, 4, 5]
    reasons = [a["error"] for a in aside]
    assert "nested 10001 levels deep" in reasons[0]
    assert "too many digits" in reasons[1]
    assert "not UTF-8" in reasons[2]
    assert "longer than the" in reasons[3] and len(aside[3]["text"]) <= inputs.KEEP_BYTES
    assert outbox.path.stat().st_size < 10_000  # the outbox itself is clean again
    assert outbox.read().set_aside == 0 and len(outbox.read().delivered) == 2


def test_a_hostile_state_file_is_set_aside_and_costs_one_repeat_at_most(tmp_path):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    outbox.state_path.write_text('{"release:golden": ' + "[" * 5_000 + "]" * 5_000 + "}")
    alert = run_failure_alert("nightly_eval", "run-1", None, "boom")
    assert outbox.observe(alert) is not None
    assert outbox.state_path.with_suffix(".corrupt.json").exists()
    assert list(outbox.states()) == [alert.stream]


def _in_thread(call):
    """``call()``'s result (or exception), and an AssertionError when it has not returned within 10 s."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = call()
        except Exception as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "hung"
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.mark.parametrize("kind", ["directory", "FIFO"])
@pytest.mark.parametrize("command", ["flush", "list"])
def test_an_outbox_that_is_not_a_file_is_one_line_and_exit_2(tmp_path, capsys, kind, command):
    path = tmp_path / "outbox.jsonl"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    assert _in_thread(lambda: cli.main(["alerts", command, "--outbox", str(path)])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"not a regular file (a {kind})" in err


def test_a_state_file_that_is_not_a_file_is_one_line(tmp_path):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    os.mkfifo(outbox.state_path)
    with pytest.raises(InputError, match=r"not a regular file \(a FIFO\)") as caught:
        _in_thread(lambda: outbox.observe(run_failure_alert("nightly_eval", "run-1", None, "boom")))
    assert "\n" not in str(caught.value)

"""The queue's report matches what landed on a full disk: events appended durably are reported queued,
and a state the disk then refused is taken from them, so the same regression is never announced twice;
an append the disk refused queues nothing, changes no state, and the alert is news on the next call."""

from __future__ import annotations

import errno
import json

import pytest

from ragspine_pipeline import files as files_module
from ragspine_pipeline.alerts import outbox as outbox_module
from ragspine_pipeline.alerts.builders import release_alert
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.errors import InputError
from tests.alerts.test_outbox import STREAM, decision


def _no_room(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def queued(outbox: Outbox) -> list[dict]:
    """The ``queued`` events of the outbox file, in order."""
    events = [json.loads(line) for line in outbox.path.read_text().splitlines() if line.strip()]
    return [event for event in events if event["event"] == "queued"]


def test_a_full_disk_at_the_state_write_still_reports_queued_and_never_announces_twice(tmp_path, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    regression = release_alert(decision(gates=("recall@k",)), STREAM)
    with monkeypatch.context() as disk:
        disk.setattr(outbox_module, "write_text_atomically", _no_room)  # the events land, the state not
        first = outbox.observe(regression)
    assert first is not None and first.id == regression.id  # what landed is reported queued
    assert not outbox.state_path.exists()
    assert outbox.states()[STREAM].status == "failing"  # the state as the queued event carries it

    again = release_alert(decision(gates=("recall@k",)), STREAM)  # the next evaluation, same regression
    assert outbox.observe(again) is None
    assert [event["alert"]["id"] for event in queued(outbox)] == [regression.id]  # announced once
    assert outbox.state_path.exists()  # saved now, with the event it reflects
    assert json.loads(outbox.state_path.read_text())[STREAM]["queued_through"] == regression.id

    # The state still moves as it should: a new failure is news, a recovery is announced once.
    assert outbox.observe(release_alert(decision(gates=("recall@k", "precision")), STREAM)) is not None
    recovered = release_alert(decision(gates=()), STREAM)
    assert outbox.observe(recovered) is not None and outbox.observe(recovered) is None


def test_an_older_saved_state_does_not_outvote_a_newer_queued_event(tmp_path, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    assert outbox.observe(release_alert(decision(gates=("recall@k",)), STREAM)) is not None
    recovered = release_alert(decision(gates=()), STREAM)
    with monkeypatch.context() as disk:
        disk.setattr(outbox_module, "write_text_atomically", _no_room)
        assert outbox.observe(recovered) is not None  # queued; the saved state still says failing
    assert json.loads(outbox.state_path.read_text())[STREAM]["status"] == "failing"
    assert outbox.observe(recovered) is None  # the recovery is not announced a second time
    assert [event["alert"]["kind"] for event in queued(outbox)] == ["regression", "recovered"]


def test_a_full_disk_at_the_append_queues_nothing_and_the_alert_stays_news(tmp_path, monkeypatch):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    first = release_alert(decision(index="ix-1"), STREAM)
    assert outbox.observe(first) is not None
    state, events = outbox.state_path.read_bytes(), outbox.path.read_bytes()
    regression = release_alert(decision(index="ix-2"), STREAM)  # a new failing index: news
    with monkeypatch.context() as disk:
        disk.setattr(files_module, "_write_all", _no_room)
        with pytest.raises(InputError, match="cannot queue the alert: No space left on device") as caught:
            outbox.observe(regression)
    assert "\n" not in str(caught.value)
    assert outbox.state_path.read_bytes() == state and outbox.path.read_bytes() == events  # unchanged
    assert outbox.observe(regression) is not None  # still news once there is room
    assert [event["alert"]["index_version"] for event in queued(outbox)] == ["ix-1", "ix-2"]

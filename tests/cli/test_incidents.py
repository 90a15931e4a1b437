"""``ragspine-eval incidents list|accept``: the open production incidents of an outbox, and a person's
acceptance of a rate's new level — recorded who, when and why, replied in the incident's thread, and
refused in one line for a rate that is no open incident's."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.alerts.model import Drop
from ragspine_pipeline.alerts.nightly import drop_alert
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.cli import main

RATE = "retrieved_citation_rate@all traffic"


def a_drop(metric: str = "retrieved_citation_rate", slice_name: str = "all traffic") -> Drop:
    return Drop(
        metric=metric, slice=slice_name, nights=1, current=0.85, current_n=1000, trailing=0.90,
        trailing_n=14000, trailing_days=14, worse_by=0.05, p_value=1e-6, q_value=1e-5,
        level=1.249, level_variance=2e-5, tau2=1e-5,
    )  # fmt: skip


@pytest.fixture
def outbox(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGSPINE_ACTOR", "alice")
    path = tmp_path / "outbox.jsonl"
    drops = [a_drop(), a_drop(slice_name="workflow=expenses"), a_drop("production_compliance")]
    Outbox(path).observe(drop_alert("2026-03-01", drops, stream="svc/production"))
    return path


def test_list_shows_every_open_rate_with_the_level_it_dropped_from(outbox, capsys):
    assert main(["incidents", "list", "--outbox", str(outbox)]) == 0
    out = capsys.readouterr().out
    assert "svc/production: 2 open incident(s)" in out
    assert RATE in out and "since 2026-03-01" in out and "dropped from 0.9000" in out
    assert main(["incidents", "list", "--outbox", str(outbox), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["streams"]["svc/production"]
    assert {row["rate"] for row in rows} == {
        RATE, "retrieved_citation_rate@workflow=expenses", "production_compliance@all traffic"
    }  # fmt: skip


def test_accept_closes_what_it_names_and_records_who_and_why(outbox, capsys):
    code = main(
        [
            "incidents",
            "accept",
            "retrieved_citation_rate",
            "--reason",
            "new retriever",
            "--outbox",
            str(outbox),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "accepted retrieved_citation_rate as the new level (by alice: new retriever)" in out
    assert "still open: production_compliance" in out
    state = Outbox(outbox).states()["svc/production"]
    assert set(state.incidents) == {"production_compliance"}
    assert state.accepted[RATE].by == "alice" and state.accepted[RATE].since == "2026-03-01"
    queued = [json.loads(line) for line in outbox.read_text().splitlines()]
    accepted = [e["alert"] for e in queued if e.get("event") == "queued" and e["alert"]["kind"] == "accepted"]
    assert len(accepted) == 1 and accepted[0]["incidents"] == ["retrieved_citation_rate"]
    assert accepted[0]["accepted"]["closes"] is True  # the incident's last rates: it closes


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["no_such_rate@all traffic", "--reason", "x"], "is no open incident's rate on svc/production"),
        ([RATE, "--reason", "  "], "--reason must say why"),
        ([RATE, "--reason", "why\x1b[31m"], "printable"),
        ([RATE, "--reason", "x", "--stream", "other/production"], "no open incident on stream"),
    ],
)
def test_a_wrong_acceptance_is_one_line_and_changes_nothing(outbox, capsys, argv, says):
    before = outbox.read_bytes()
    assert main(["incidents", "accept", *argv, "--outbox", str(outbox)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert outbox.read_bytes() == before

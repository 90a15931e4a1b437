"""An incident is judged against the level it dropped from: one post while a lasting drop lasts, a
weekly "still below" reply, a recovery only when the rate is back (two nights running), and a person's
acceptance of a new level. Nights of daily summaries (as tests/scoring/test_significance.py draws them)
go through the drop tests and a real outbox (its state written and read back every night), as the
nightly asset does."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np
import pytest

from ragspine_pipeline.alerts.model import Drop
from ragspine_pipeline.alerts.nightly import acceptance_alert, drop_alert
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.alerts.streams import incident_rows
from ragspine_pipeline.scoring.significance import ALL_TRAFFIC, drop_tests

METRIC = "retrieved_citation_rate"
KEY = f"{METRIC}@{ALL_TRAFFIC}"
FIRST = date(2026, 1, 1)
WARMUP = 31
RATES = {METRIC: 0.90, "production_compliance": 0.97}  # two rates, two slices: fast enough for the suite


def simulate(seed: int, nights: int, points: list[float]) -> list[dict]:
    """Daily summaries of two slices of 500 traces; ``points[night]`` is how much lower the
    retrieved-citation rate is that night in both slices."""
    rng = np.random.default_rng(seed)
    days = []
    for night in range(nights):
        slices, totals = {}, {}
        for s in ("a", "b"):
            metrics = {}
            for metric, rate in RATES.items():
                p = rate - (points[night] if metric == METRIC else 0.0)
                x = int(rng.binomial(500, p))
                metrics[metric] = {"value": x / 500, "n": 500, "successes": x}
                totals[metric] = [a + b for a, b in zip(totals.get(metric, [0, 0]), (x, 500), strict=True)]
            slices[s] = {"n": 500, "metrics": metrics}
        day = (FIRST + timedelta(days=night)).isoformat()
        overall = {m: {"value": x / n, "n": n, "successes": x} for m, (x, n) in totals.items()}
        days.append({"day": day, "n": 1000, "metrics": overall, "slices": {"slice": slices}})
    return days


@dataclass
class Said:
    posts: list[str] = field(default_factory=list)  # nights a top-level regression message opened
    replies: list[str] = field(default_factory=list)  # nights of a reply (spread or still below)
    reminders: list[str] = field(default_factory=list)  # nights of a "still below" reply
    recoveries: list[str] = field(default_factory=list)
    acceptances: list[str] = field(default_factory=list)


def nightly(outbox: Outbox, days: list[dict], first: int, last: int, said: Said) -> None:
    """Nights ``first`` … ``last - 1`` of ``days``, judged and announced as the nightly asset does (the
    nights before ``first`` are their history)."""
    for i in range(first, last):
        before = outbox.states().get("production")
        night = drop_tests(
            days[i],
            days[:i],
            incidents=before.open_levels() if before else None,
            accepted=before.accepted_since() if before else None,
        )
        alert = drop_alert(days[i]["day"], [Drop.of(t) for t in night.alerts], returns=night.returns)
        outbox.observe(alert)
        count(outbox, before, said)


def count(outbox: Outbox, before, said: Said) -> None:
    """What the last observe queued: top-level posts, replies, recoveries, acceptances."""
    lines = outbox.path.read_text().splitlines() if outbox.path.exists() else []
    seen = count.seen.get(outbox.path, 0)
    count.seen[outbox.path] = len(lines)
    for line in lines[seen:]:
        event = json.loads(line)
        if event.get("event") != "queued":
            continue
        alert = event["alert"]
        night = alert.get("night") or ""
        was_open = before.incidents if before else {}
        if alert["kind"] == "recovered":
            said.recoveries.append(night)
        elif alert["kind"] == "accepted":
            said.acceptances.append(alert["title"])
        elif all(metric not in was_open for metric in alert["incidents"]):
            said.posts.append(night)
        else:
            said.replies.append(night)
            if "still below" in alert["title"]:
                said.reminders.append(night)


count.seen = {}


def lasting_drop(seed: int, nights: int, points: float = 0.05) -> list[dict]:
    """A history whose retrieved-citation rate drops by ``points`` in every slice for ``nights`` nights
    from night WARMUP, then comes back."""
    total = WARMUP + nights + 10
    return simulate(seed, total, [points if WARMUP <= i < WARMUP + nights else 0.0 for i in range(total)])


@pytest.mark.parametrize("seed", [1])
def test_a_lasting_drop_is_one_post_stays_open_while_it_lasts_and_recovers_when_it_is_back(tmp_path, seed):
    days = lasting_drop(seed, nights=30)
    outbox = Outbox(tmp_path / "outbox.jsonl")
    said = Said()
    nightly(outbox, days, WARMUP, WARMUP + 30, said)
    assert said.posts == [days[WARMUP]["day"]]  # the drop's first night, and only that post
    assert said.recoveries == []  # still down after 30 nights: no "Recovered"
    # A short reply a week while it stays open (30 nights: nights 7, 14, 21 and 28 after it opened).
    assert len(said.reminders) == 4
    state = outbox.states()["production"]
    assert KEY in state.open_levels()
    level = state.open_levels()[KEY]
    assert level.trailing == pytest.approx(0.90, abs=0.01)  # frozen at the level before the drop
    # The report's rows: the level it dropped from, and tonight 5 points below it.
    rows = {row["rate"]: row for row in incident_rows(state)}
    assert rows[KEY]["level"] == pytest.approx(0.90, abs=0.01) and rows[KEY]["status"] == "open"
    nightly(outbox, days, WARMUP + 30, WARMUP + 33, said)  # the rate is back from night WARMUP + 30
    assert said.recoveries == [days[WARMUP + 31]["day"]]  # its last two nights back at the level
    assert said.posts == [days[WARMUP]["day"]]
    assert "production" not in outbox.states() or not outbox.states()["production"].incidents


def test_a_slow_creep_stays_one_incident_until_the_rate_is_back(tmp_path):
    total = WARMUP + 40
    # One point a night down to ten, held there for 30 nights from the start, then back.
    points = [0.01 * min(i - WARMUP + 1, 10) if WARMUP <= i < WARMUP + 30 else 0.0 for i in range(total)]
    days = simulate(11, total, points)
    outbox = Outbox(tmp_path / "outbox.jsonl")
    said = Said()
    nightly(outbox, days, WARMUP, WARMUP + 30, said)
    assert len(said.posts) == 1 and said.recoveries == []
    nightly(outbox, days, WARMUP + 30, WARMUP + 33, said)
    assert len(said.recoveries) == 1


def test_a_person_accepts_the_new_level_which_closes_the_incident_as_accepted(tmp_path):
    days = lasting_drop(3, nights=40)
    outbox = Outbox(tmp_path / "outbox.jsonl")
    said = Said()
    nightly(outbox, days, WARMUP, WARMUP + 10, said)
    state = outbox.states()["production"]
    open_rates = sorted(state.open_levels())
    assert KEY in open_rates
    outbox.observe(acceptance_alert([METRIC], by="alice", reason="the new retriever cites less, on purpose"))
    count(outbox, state, said)
    assert said.acceptances and "Accepted as the new level" in said.acceptances[0]
    state = outbox.states()["production"]
    assert METRIC not in state.incidents
    accepted = state.accepted[KEY]
    assert (accepted.by, accepted.since) == ("alice", days[WARMUP]["day"])
    # Later nights compare the rate with the nights since it dropped: no new incident at the new level,
    # and no recovery either.
    nightly(outbox, days, WARMUP + 10, WARMUP + 35, said)
    assert len(said.posts) == 1 and said.recoveries == []


def test_the_reminder_and_the_acceptance_say_where_the_rate_stands_and_who_accepted_it(tmp_path):
    from ragspine_pipeline.alerts.blocks import fallback_text, message

    days = lasting_drop(4, nights=12)
    outbox = Outbox(tmp_path / "outbox.jsonl")
    nightly(outbox, days, WARMUP, WARMUP + 9, Said())
    queued = [e.alert for e in outbox.read().entries]
    reminder = next(a for a in queued if "still below" in a.title)
    text = json.dumps(message([reminder])[1])
    assert "Still below the level it dropped from" in text and "retrieved_citation_rate @ all traffic" in text
    assert re.search(r"@ all traffic 0\.8\d+ against 0\.(89|90)\d+ before 2026-02-0", fallback_text(reminder))
    outbox.observe(acceptance_alert([KEY], by="bob <!channel>", reason="a *smaller* index, on purpose"))
    accepted = outbox.read().entries[-1].alert
    text = json.dumps(message([accepted])[1])
    assert "Accepted by" in text and "&lt;!channel&gt;" in text and "<!channel>" not in text
    assert "compared with the nights since they dropped" in text


def test_a_slice_holds_its_incident_open_only_when_clearly_below_among_the_incidents_slices():
    """2.5 standard deviations under its level: clearly below for a lone slice (one-sided 1 %), not as
    one of eight judged together (Bonferroni: 3.02), so eight slices back hold no incident open by chance
    one night in twelve; 3.5 is below either way."""
    from ragspine_pipeline.scoring.drop_results import ReturnTest

    def slice_at(z: float) -> ReturnTest:
        return ReturnTest(metric="m", slice="s=1", nights=2, since="2026-11-01", trailing=0.9, recent_z=z)

    assert slice_at(2.5).below_among(1) and not slice_at(2.5).below_among(8)
    assert slice_at(3.5).below_among(8)

"""One production incident, one thread: a simulated outage through the real path — a night's drop tests
(``scoring.significance.DropTest``) → ``drop_alert`` → the outbox's ``observe`` → ``flush`` to a
loopback Slack — on both outboxes."""

from __future__ import annotations

from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.incidents import incident_thread
from ragspine_pipeline.alerts.model import Alert, Drop, drop_alert
from ragspine_pipeline.scoring.significance import DropTest
from tests.alerts.test_delivery import settings

STREAM = "svc/production"
X, Y = "retrieved_citation_rate", "refusal_rate"
ALL, S = "all traffic", "workflow=expenses"


def drop_test(metric: str, where: str, nights: int = 1, alert: bool = False) -> DropTest:
    """A tested rate: alerting ones 8 points worse than their trailing 0.90 (or, for the refusal rate,
    8 points higher than its trailing 0.05)."""
    trailing = 0.05 if metric == Y else 0.90
    worse = 0.08 if alert else 0.0
    current = trailing + worse if metric == Y else trailing - worse
    return DropTest(
        metric=metric, slice=where, nights=nights, current=current, current_n=1000 * nights,
        trailing=trailing, trailing_n=14000, trailing_days=14, worse_by=worse, tau2=1e-4,
        z=5.0 if alert else 0.0, p_value=1e-7 if alert else 0.5, q_value=1e-6 if alert else 0.9,
        significant=alert, alert=alert,
    )  # fmt: skip


def night(outbox: AlertOutbox, day: int, alerting: list[tuple[str, str, int]]) -> Alert | None:
    """Evaluate one night whose ``alerting`` (metric, slice, nights) tests alert, the rest not, as the
    nightly check does: every tested rate's one-night value is what a recovery says."""
    tests = [drop_test(m, where, nights, alert=(m, where, nights) in alerting)
             for m in (X, Y) for where in (ALL, S) for nights in (1, 3)]  # fmt: skip
    alert = drop_alert(
        f"2026-11-0{day}",
        [Drop.of(t) for t in tests if t.alert],
        stream=STREAM,
        run_id=f"night-{day}",
        runbook="Check the retriever.",
        measured={t.key: t.current for t in tests if t.nights == 1},
    )
    return outbox.observe(alert)


OUTAGE = [
    [(X, ALL, 1)],  # night 1: tonight's test of X in all traffic
    [(X, ALL, 3), (X, S, 3)],  # nights 2-3: the pooled test, in all traffic and in slice S
    [(X, ALL, 3), (X, S, 3)],
    [],  # night 4: nothing alerts
]


def test_an_outage_is_one_post_its_later_nights_and_its_recovery_replies_in_its_thread(outbox, slack):
    for day, alerting in enumerate(OUTAGE, start=1):
        assert night(outbox, day, alerting) is not None
        assert flush(outbox, settings(slack)).error is None
    opened, *replies = slack.messages
    assert opened.thread_ts is None and len(replies) == 3
    assert opened.text.startswith("Production metrics of 2026-11-01: 1 significant drop")
    assert all(reply.thread_ts == opened.ts and not reply.reply_broadcast for reply in replies)
    second, third, recovery = replies
    for day, reply in ((2, second), (3, third)):
        assert reply.text.startswith(f"Production metrics of 2026-11-0{day}: still 2 significant drops")
        assert "0.8200" in reply.text  # tonight's rate
    assert recovery.text.startswith(f"Recovered: {X} in production metrics of 2026-11-04")
    for where in (ALL, S):  # what recovered: every slice the incident announced, as it is tonight
        assert f"{X} @ {where} 0.9000 now (trailing 0.9000 when it dropped; was 0.8200)" in recovery.text
    assert incident_thread(outbox.read().entries, STREAM, incident=X) is None  # closed
    assert outbox.states()[STREAM].status == "ok" and outbox.states()[STREAM].incidents == {}


def test_an_unrelated_metric_opens_its_own_incident_and_thread(outbox, slack):
    nights = [
        [(X, ALL, 1)],
        [(X, ALL, 3), (X, S, 3), (Y, ALL, 1)],  # Y drops too: news
        [(X, ALL, 3), (X, S, 3), (Y, ALL, 3)],
        [],
    ]
    for day, alerting in enumerate(nights, start=1):
        night(outbox, day, alerting)
        flush(outbox, settings(slack))
    top = [m for m in slack.messages if m.thread_ts is None]
    assert len(top) == 2
    x_root, y_root = top
    assert X in x_root.text and Y in y_root.text and X not in y_root.text  # Y's post is about Y only
    in_x = [m for m in slack.messages if m.thread_ts == x_root.ts]
    in_y = [m for m in slack.messages if m.thread_ts == y_root.ts]
    assert len(in_x) == 3 and len(in_y) == 2  # X: nights 2, 3, its recovery; Y: night 3, its recovery
    assert in_y[0].text.startswith("Production metrics of 2026-11-03: still 1 significant drop")
    assert Y in in_y[0].text and X not in in_y[0].text
    assert in_x[-1].text.startswith(f"Recovered: {X}") and in_y[-1].text.startswith(f"Recovered: {Y}")
    assert Y not in in_x[-1].text and X not in in_y[-1].text  # each names what it closes


def test_a_night_evaluated_twice_replies_once_and_an_incident_can_open_again(outbox, slack):
    night(outbox, 1, OUTAGE[0])
    assert night(outbox, 2, OUTAGE[1]) is not None
    assert night(outbox, 2, OUTAGE[1]) is None  # the same night again: nothing new
    assert night(outbox, 3, []) is not None  # recovered
    assert night(outbox, 3, []) is None
    again = night(outbox, 4, OUTAGE[0])  # it comes back: a new incident, a new top-level post
    assert again is not None and again.incidents == [X]
    flush(outbox, settings(slack))
    roots = [m for m in slack.messages if m.thread_ts is None]
    assert len(slack.messages) == 4 and len(roots) == 2
    assert [m.thread_ts for m in slack.messages[1:3]] == [roots[0].ts] * 2


def test_a_later_night_whose_incident_has_no_known_post_is_a_top_level_post(outbox, slack):
    first = night(outbox, 1, OUTAGE[0])
    outbox.record_expiry([first.id], 24)  # never posted: nobody saw the incident open
    night(outbox, 2, OUTAGE[1])
    flush(outbox, settings(slack))
    [posted] = slack.messages
    assert posted.thread_ts is None and "still 2 significant drops" in posted.text

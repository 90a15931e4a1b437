"""One production incident, one thread: a simulated outage through the real path — a night's drop tests
(``scoring.significance.DropTest``) → ``drop_alert`` → the outbox's ``observe`` → ``flush`` to a
loopback Slack — on both outboxes."""

from __future__ import annotations

from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.incidents import incident_thread
from ragspine_pipeline.alerts.model import Alert, Drop
from ragspine_pipeline.alerts.nightly import drop_alert
from ragspine_pipeline.scoring.significance import DropTest, ReturnTest
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
        significant=alert, alert=alert, level=1.249, level_variance=2e-5,
    )  # fmt: skip


def returns(outbox: AlertOutbox, down: bool) -> list[ReturnTest]:
    """Each open incident's rate tonight against the level it dropped from: still down, or back."""
    state = outbox.states().get(STREAM)
    levels = state.open_levels() if state is not None else {}
    return [
        ReturnTest(
            metric=level.metric, slice=level.slice, nights=2, since=level.since, trailing=level.trailing,
            dropped_to=level.dropped_to, current=level.dropped_to if down else level.trailing,
            worse_by=0.08 if down else 0.0, z=5.0 if down else 0.0, back=not down, clearly_below=down,
        )
        for level in levels.values()
    ]  # fmt: skip


def night(
    outbox: AlertOutbox, day: int, alerting: list[tuple[str, str, int]], down: bool = True
) -> Alert | None:
    """Evaluate one night whose ``alerting`` (metric, slice, nights) tests alert, the rest not, and on
    which the open incidents' rates are still ``down`` or back, as the nightly check does: every tested
    rate's one-night value is what a recovery says."""
    tests = [drop_test(m, where, nights, alert=(m, where, nights) in alerting)
             for m in (X, Y) for where in (ALL, S) for nights in (1, 3)]  # fmt: skip
    alert = drop_alert(
        f"2026-11-{day:02d}",
        [Drop.of(t) for t in tests if t.alert],
        stream=STREAM,
        run_id=f"night-{day}",
        runbook="Check the retriever.",
        measured={t.key: t.current for t in tests if t.nights == 1},
        returns=returns(outbox, down),
    )
    return outbox.observe(alert)


OUTAGE = [
    [(X, ALL, 1)],  # night 1: tonight's test of X in all traffic
    [(X, ALL, 3), (X, S, 3)],  # nights 2-3: the pooled test, in all traffic and in slice S
    [(X, ALL, 3), (X, S, 3)],
]


def test_an_outage_is_one_post_and_its_recovery_replies_in_its_thread_naming_every_rate(outbox, slack):
    for day, alerting in enumerate(OUTAGE, start=1):
        assert (night(outbox, day, alerting) is not None) == (day == 1)  # later nights: nothing new
        assert flush(outbox, settings(slack)).error is None
    assert night(outbox, 4, [], down=False) is not None  # back at the level it dropped from
    flush(outbox, settings(slack))
    opened, recovery = slack.messages
    assert opened.thread_ts is None and opened.text.startswith(
        "Production metrics of 2026-11-01: 1 significant drop"
    )
    assert recovery.thread_ts == opened.ts and not recovery.reply_broadcast
    assert recovery.text.startswith(f"Recovered: {X} in production metrics of 2026-11-04")
    # What recovered: every rate of the incident, the slice that joined it quietly on night 2 too.
    assert f"{X} @ {ALL} 0.9000 now (trailing 0.9000 when it dropped; was 0.8200)" in recovery.text
    assert f"{X} @ {S} 0.9000 now (trailing 0.9000 when it dropped; was 0.8200)" in recovery.text
    assert incident_thread(outbox.read().entries, STREAM, incident=X) is None  # closed
    assert outbox.states()[STREAM].status == "ok" and outbox.states()[STREAM].incidents == {}


def test_an_incident_still_down_says_so_once_a_week_in_its_thread(outbox, slack):
    night(outbox, 1, OUTAGE[0])
    for day in range(2, 16):  # two weeks still down, its tests against the trailing nights quiet
        night(outbox, day, [])
    flush(outbox, settings(slack))
    opened, *replies = slack.messages
    assert [r.thread_ts for r in replies] == [opened.ts, opened.ts]  # nights 8 and 15
    for day, reply in zip((8, 15), replies, strict=True):
        assert reply.text.startswith(f"Production metrics of 2026-11-{day:02d}: {X} still below its level of")
        assert f"{X} @ {ALL} 0.8200 against 0.9000 before 2026-11-01" in reply.text


def test_an_unrelated_metric_opens_its_own_incident_and_thread(outbox, slack):
    nights = [
        [(X, ALL, 1)],
        [(X, ALL, 3), (X, S, 3), (Y, ALL, 1)],  # Y drops too: news
        [(X, ALL, 3), (X, S, 3), (Y, ALL, 3)],
    ]
    for day, alerting in enumerate(nights, start=1):
        night(outbox, day, alerting)
        flush(outbox, settings(slack))
    night(outbox, 4, [], down=False)
    flush(outbox, settings(slack))
    top = [m for m in slack.messages if m.thread_ts is None]
    assert len(top) == 2
    x_root, y_root = top
    assert X in x_root.text and Y in y_root.text and X not in y_root.text  # Y's post is about Y only
    in_x = [m for m in slack.messages if m.thread_ts == x_root.ts]
    in_y = [m for m in slack.messages if m.thread_ts == y_root.ts]
    assert len(in_x) == 1 and len(in_y) == 1  # each its recovery
    assert in_x[-1].text.startswith(f"Recovered: {X}") and in_y[-1].text.startswith(f"Recovered: {Y}")
    assert Y not in in_x[-1].text and X not in in_y[-1].text  # each names what it closes


def test_a_night_evaluated_twice_says_nothing_twice_and_an_incident_can_open_again(outbox, slack):
    night(outbox, 1, OUTAGE[0])
    assert night(outbox, 2, [], down=True) is None  # still down: nothing new
    assert night(outbox, 3, [], down=False) is not None  # back over its last nights: recovered
    assert night(outbox, 3, [], down=False) is None  # the same night again: nothing new
    again = night(outbox, 4, OUTAGE[0])  # it comes back: a new incident, a new top-level post
    assert again is not None and again.incidents == [X]
    flush(outbox, settings(slack))
    roots = [m for m in slack.messages if m.thread_ts is None]
    assert len(slack.messages) == 3 and len(roots) == 2
    assert slack.messages[1].thread_ts == roots[0].ts


def test_a_later_message_whose_incident_has_no_known_post_is_a_top_level_post(outbox, slack):
    first = night(outbox, 1, OUTAGE[0])
    outbox.record_expiry([first.id], 24)  # never posted: nobody saw the incident open
    night(outbox, 2, [], down=False)
    flush(outbox, settings(slack))
    [posted] = slack.messages
    assert posted.thread_ts is None and posted.text.startswith(f"Recovered: {X}")


def test_a_mix_change_that_becomes_a_real_drop_says_so_once_in_its_thread(outbox, slack):
    """Announced as a change of the traffic mix alone, an incident whose rate at the usual mix then falls
    replies once that it dropped (not a quiet join), and says nothing more the next night."""
    from ragspine_pipeline.scoring.drop_results import USUAL_MIX

    shift = "workflow=expenses grew from 12.5 % to 36.0 %"
    fell = f"traffic mix changed ({shift}) and the rate at the usual mix fell 3.0 points"
    notes = [
        {ALL: f"traffic mix changed: {shift}"},
        {ALL: fell, USUAL_MIX: None},
        {ALL: fell, USUAL_MIX: None},
    ]
    queued = []
    for day, noted in enumerate(notes, start=1):
        drops = [Drop.of(drop_test(X, where, 3, alert=True)).model_copy(update={"note": note})
                 for where, note in noted.items()]  # fmt: skip
        alert = drop_alert(f"2026-11-{day:02d}", drops, stream=STREAM, returns=returns(outbox, True))
        queued.append(outbox.observe(alert))
        flush(outbox, settings(slack))
    assert [q is not None for q in queued] == [True, True, False]
    opened, dropped = slack.messages
    assert opened.thread_ts is None and "traffic mix changed: workflow=expenses" in opened.text
    assert dropped.thread_ts == opened.ts
    assert dropped.text.startswith(
        f"Production metrics of 2026-11-02: {X} dropped, not only the traffic mix moved"
    )
    assert "the rate at the usual mix fell 3.0 points" in dropped.text
    assert not outbox.states()[STREAM].incidents[X].mix_alone

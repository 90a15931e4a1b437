"""A regression's story in one Slack thread: a blocked release is posted with three worst cases of distinct
causes and links to the run's pages; the release that ships again is a reply in that thread naming what
recovered. Against the stateful Slack on loopback; tests taking the ``outbox`` fixture run on the file
outbox and on PostgreSQL."""

from __future__ import annotations

import re

import pytest

from ragspine_pipeline.alerts.blocks import message
from ragspine_pipeline.alerts.builders import (
    gate_alert,
    release_alert,
    retry_succeeded_alert,
    run_failure_alert,
)
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.incidents import closing, incident_thread, open_regressions
from ragspine_pipeline.alerts.model import Alert, Drop, Finding, with_report_links
from ragspine_pipeline.alerts.nightly import drop_alert
from ragspine_pipeline.alerts.slack import SlackSender
from ragspine_pipeline.decision.causes import release_causes
from ragspine_pipeline.decision.release import ReleaseDecision
from tests.alerts.test_delivery import settings
from tests.decision.test_causes import scored

STREAM = "release:golden"
UI = "http://dagster.example:3000"
REPORTS = "https://reports.example.com/rag/"
BLOCK_RUN, SHIP_RUN = "run-block-1", "run-ship-2"


def blocked(run_id: str = BLOCK_RUN, gates: tuple[str, ...] = ("releasable_rate",)) -> dict:
    """A release that blocks on ``gates``, a slice and a baseline regression, with the causes of real
    per-case results whose failing cases stop at three different stages."""
    gold, grounded, layered = scored()
    return {
        "decision": "block",
        "index_version": "ix-7",
        "golden_version": "g-1",
        "run_id": run_id,
        "failed_gates": [
            {"metric": m, "value": 0.5, "op": ">=", "threshold": 0.9, "delta": -0.4} for m in gates
        ],
        "failed_slices": [
            {"dimension": "workflow", "value": "expenses", "n": 12, "releasable_rate": 0.5, "min_rate": 0.75}
        ],
        "regressions": [{"metric": "context_recall", "baseline": 0.95, "current": 0.8, "delta": -0.15}],
        "causes": release_causes(gold, grounded.cases, layered),
    }


def shipping(run_id: str = SHIP_RUN) -> dict:
    """The same release shipping again, with the run's figures (every gate's and metric's value)."""
    return {
        "decision": "ship",
        "index_version": "ix-8",
        "golden_version": "g-1",
        "run_id": run_id,
        "gates": [{"metric": "releasable_rate", "op": ">=", "threshold": 0.9, "value": 0.93, "pass": True}],
        "metrics": {"releasable_rate": 0.93, "context_recall": 0.96, "precision": None},
    }


def queue(outbox: AlertOutbox, decision: dict) -> Alert:
    alert = with_report_links(
        release_alert(ReleaseDecision.model_validate(decision), STREAM, UI, "Fix the first failed stage."),
        REPORTS,
    )
    queued = outbox.observe(alert)
    assert queued is not None
    return queued


def buttons(blocks: list[dict]) -> dict[str, str]:
    return {
        button["text"]["text"]: button["url"]
        for block in blocks
        if block["type"] == "actions"
        for button in block["elements"]
    }


def links(run_id: str) -> dict[str, str]:
    return {
        "Open the run in Dagster": f"{UI}/runs/{run_id}",
        "Open the report": f"https://reports.example.com/rag/runs/{run_id}/slice_report.html",
        "Open the case explorer": f"https://reports.example.com/rag/runs/{run_id}/case_explorer.html",
    }


def section(blocks: list[dict], starts: str) -> str:
    return next(b["text"]["text"] for b in blocks if "text" in b and b["text"]["text"].startswith(starts))


def test_a_block_then_its_recovery_make_one_thread_with_links_and_distinct_causes(outbox, slack):
    block = queue(outbox, blocked())
    first = flush(outbox, settings(slack))
    assert first.delivered == [block.id] and first.messages == 1
    [posted] = slack.messages
    assert posted.thread_ts is None and posted.alert_ids == [block.id]
    [entry] = outbox.read().entries
    assert entry.ts == posted.ts  # the ts Slack answered is kept for the alert
    worst = section(posted.blocks, "*Worst cases*")
    stages = re.findall(r"^• \S+ \(([a-z ]+)", worst, flags=re.MULTILINE)
    assert stages == ["admissibility", "candidate retrieval", "answer faithfulness"]  # three causes
    assert buttons(posted.blocks) == links(BLOCK_RUN)

    recovery = queue(outbox, shipping())
    extraction = gate_alert(  # the same run's other news: a channel falls
        [Finding(kind="channel", name="color_mapping", value=0.775, reference=0.95,
                 reference_kind="baseline", op=">=", delta=-0.175, n=40, correct=31)],
        "extraction", "Extraction channels", run_id=SHIP_RUN,
    )  # fmt: skip
    assert outbox.observe(extraction) is not None
    second = flush(outbox, settings(slack))
    assert sorted(second.delivered) == sorted([recovery.id, extraction.id]) and second.messages == 2
    top, reply = slack.messages[1:]
    assert top.alert_ids == [extraction.id] and top.thread_ts is None  # the run's message, top level
    assert re.search(r"color_mapping\s+0\.7750 \(31/40\)", section(top.blocks, "*Channels below"))
    assert reply.alert_ids == [recovery.id]
    assert reply.thread_ts == posted.ts and not reply.reply_broadcast
    assert reply.text.startswith(f"Recovered: release ships on index ix-8 (run {SHIP_RUN})")
    for said in (
        "releasable_rate 0.9300 now (needs &gt;= 0.9000; was 0.5000)",
        "context_recall 0.9600 now (baseline &gt;= 0.9500; was 0.8000)",
        "slice workflow=expenses holds again (needs &gt;= 0.7500; was 0.5000, n=12)",
    ):
        assert said in reply.text and said in section(reply.blocks, "*Recovered*")
    assert buttons(reply.blocks) == links(SHIP_RUN)
    entries = {e.alert.id: e for e in outbox.read().entries}
    assert entries[recovery.id].ts == reply.ts and entries[recovery.id].thread_ts == posted.ts
    assert flush(outbox, settings(slack)).delivered == [] and len(slack.messages) == 3


def test_a_recovery_whose_regression_has_no_known_message_is_part_of_the_runs_message(outbox, slack):
    block = queue(outbox, blocked())
    outbox.record_delivery([block.id], "C0ALERTS", None)  # delivered before the outbox kept its ts
    recovery = queue(outbox, shipping())
    assert flush(outbox, settings(slack)).delivered == [recovery.id]
    [posted] = slack.messages
    assert posted.thread_ts is None and posted.alert_ids == [recovery.id]
    assert "releasable_rate 0.9300 now" in posted.text  # still says what recovered


def test_a_regression_and_its_recovery_flushed_together_still_make_one_thread(outbox, slack):
    block, recovery = queue(outbox, blocked()), queue(outbox, shipping())
    assert flush(outbox, settings(slack)).delivered == [block.id, recovery.id]
    parent, reply = slack.messages
    assert parent.alert_ids == [block.id] and reply.alert_ids == [recovery.id]
    assert reply.thread_ts == parent.ts


def test_recoveries_of_one_run_closing_regressions_of_one_message_are_one_reply(outbox, slack):
    channel = Finding(kind="channel", name="color_mapping", value=0.775, reference=0.95,
                      reference_kind="baseline", op=">=", delta=-0.175, n=40, correct=31)  # fmt: skip
    block = queue(outbox, blocked())
    fell = outbox.observe(gate_alert([channel], "extraction", "Extraction channels", run_id=BLOCK_RUN))
    flush(outbox, settings(slack))
    back = gate_alert(
        [], "extraction", "Extraction channels", run_id=SHIP_RUN, measured={"color_mapping": 0.98}
    )
    recovery, channel_back = queue(outbox, shipping()), outbox.observe(back)
    assert flush(outbox, settings(slack)).messages == 1
    parent, reply = slack.messages
    assert sorted(parent.alert_ids) == sorted([block.id, fell.id])
    assert sorted(reply.alert_ids) == sorted([recovery.id, channel_back.id]) and reply.thread_ts == parent.ts
    said = " ".join(b["text"]["text"] for b in reply.blocks if b["type"] == "section" and "text" in b)
    assert "color_mapping 0.9800 now" in said and "releasable_rate 0.9300 now" in said
    assert reply.text.endswith("Also: Recovered: Extraction channels.")


def test_an_unanswered_reply_is_found_in_its_thread_not_posted_again(outbox, slack):
    queue(outbox, blocked())
    flush(outbox, settings(slack))
    recovery = queue(outbox, shipping())
    slack.set(delay_s=3)  # Slack stores the reply and answers after the client gave up
    timed_out = flush(outbox, sender=SlackSender(settings(slack), timeout_s=1))
    assert timed_out.pending == 1 and "Slack may have posted it" in timed_out.failed[recovery.id]
    slack.set(delay_s=0)
    confirmed = flush(outbox, settings(slack), confirm_after_s=0)
    assert confirmed.confirmed == [recovery.id] and confirmed.messages == 0
    assert slack.calls("conversations.replies") == 1  # the channel's history leaves replies out
    assert slack.posted_ids().count(recovery.id) == 1
    entry = next(e for e in outbox.read().entries if e.alert.id == recovery.id)
    assert entry.confirmed and entry.thread_ts == slack.messages[0].ts == slack.messages[1].thread_ts


def test_a_reply_never_posted_is_looked_for_in_its_thread_then_posted_there(outbox, slack):
    block = queue(outbox, blocked())
    flush(outbox, settings(slack))
    recovery = queue(outbox, shipping())
    parent = slack.messages[0].ts
    outbox.record_sending([recovery.id], "C0ALERTS", parent)  # a flush killed before it posted
    result = flush(outbox, settings(slack), confirm_after_s=0)
    assert result.delivered == [recovery.id] and result.confirmed == [] and result.messages == 1
    assert slack.calls("conversations.replies") == 1 and slack.calls("conversations.history") == 0
    assert slack.messages[1].thread_ts == parent and slack.posted_ids() == [block.id, recovery.id]


# -- the incident and its thread -----------------------------------------------------------------------


def test_the_open_incident_of_a_stream_and_its_thread(outbox, slack):
    view = outbox.read
    assert incident_thread(view().entries, STREAM) is None
    first = queue(outbox, blocked())
    assert [e.alert.id for e in open_regressions(view().entries, STREAM)] == [first.id]
    assert incident_thread(view().entries, STREAM) is None  # not posted yet
    flush(outbox, settings(slack))
    assert incident_thread(view().entries, STREAM) == slack.messages[0].ts
    assert incident_thread(view().entries, STREAM, channel="C0OTHER") is None  # a ts names one channel
    assert incident_thread(view().entries, "release:agent") is None

    worse = queue(outbox, blocked("run-block-3", gates=("releasable_rate", "precision")))  # new failure
    flush(outbox, settings(slack))
    assert incident_thread(view().entries, STREAM) == slack.messages[1].ts  # the latest regression
    recovery = queue(outbox, shipping())
    closed = open_regressions(view().entries, STREAM, until=recovery.id)
    assert [e.alert.id for e in closed] == [first.id, worse.id]
    assert open_regressions(view().entries, STREAM) == []  # recovered: no incident open
    assert incident_thread(view().entries, STREAM) is None
    flush(outbox, settings(slack))
    reply = slack.messages[2]
    assert reply.thread_ts == slack.messages[1].ts
    assert (
        "precision holds again (needs &gt;= 0.9000; was 0.5000)" in reply.text
    )  # both regressions' failures


# -- what each recovery says ---------------------------------------------------------------------------


def test_a_recovered_extraction_channel_says_its_accuracy_now_and_its_cells_then():
    channel = Finding(kind="channel", name="color_mapping", value=0.775, reference=0.95,
                      reference_kind="baseline", op=">=", delta=-0.175, n=40, correct=31)  # fmt: skip
    fell = gate_alert([channel], "svc/extraction", "Extraction channels", run_id="r1")
    back = gate_alert([], "svc/extraction", "Extraction channels", run_id="r2",
                      measured={"color_mapping": 0.975, "mechanism": None})  # fmt: skip
    text, blocks = message([closing(back, [fell])])
    said = "color_mapping 0.9750 now (baseline &gt;= 0.9500; was 0.7750 (31/40))"
    assert said in text and said in section(blocks, "*Recovered*")
    assert "Every gate, slice and baselined metric holds again." in section(blocks, "*Recovered*")


def test_a_recovered_production_rate_says_tonight_against_the_trailing_value_it_dropped_from():
    drop = Drop(metric="compliance", slice="channel=api", nights=1, current=0.85, current_n=400,
                trailing=0.95, trailing_n=5600, trailing_days=14, worse_by=0.1, p_value=2e-9,
                q_value=3e-8)  # fmt: skip
    fell = drop_alert("2026-11-22", [drop], stream="svc/production", run_id="n-1")
    back = drop_alert("2026-11-23", [], stream="svc/production", run_id="n-2",
                      measured={"compliance@channel=api": 0.94})  # fmt: skip
    text, blocks = message([closing(back, [fell])])
    said = "compliance @ channel=api 0.9400 now (trailing 0.9500 when it dropped; was 0.8500)"
    assert said in text and text.startswith("Recovered: production metrics of 2026-11-23 (run n-2)")
    assert "No production rate is significantly worse" in section(blocks, "*Recovered*")


def test_a_recovery_with_nothing_known_to_close_says_what_it_said_before():
    back = release_alert(ReleaseDecision.model_validate(shipping()), STREAM)
    assert closing(back, []) is back and back.recovered == []
    text, blocks = message([back])
    assert text == f"Recovered: release ships on index ix-8 (run {SHIP_RUN})"
    assert "Every gate, slice and baselined metric holds again." in [
        b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b
    ]


@pytest.mark.parametrize("kind", ["run_failure", "no run", "no url"])
def test_report_links_need_a_run_with_a_report_and_a_base_url(kind):
    from ragspine_pipeline.alerts.builders import run_failure_alert

    alert = {
        "run_failure": run_failure_alert("nightly_eval", "r-1", None, "boom"),
        "no run": gate_alert([], "extraction", "Extraction channels"),
        "no url": release_alert(ReleaseDecision.model_validate(shipping()), STREAM),
    }[kind]
    linked = with_report_links(alert, None if kind == "no url" else REPORTS)
    assert linked.report_url is None and linked.explorer_url is None


def test_a_failed_run_and_its_retry_that_succeeds_make_one_thread(outbox, slack):
    """A run fails (its alert at the top level); its retry (another run, the first one its root) fails
    too, then a third attempt succeeds: the second failure and the success are replies in the first
    failure's thread, and the last word says the retry succeeded, with its decision — not "failed"."""
    first = run_failure_alert("reeval_on_index_rebuild", "run-1", "golden_traces", "ConnectionError: down")
    assert outbox.observe(first) is not None
    assert flush(outbox, settings(slack)).messages == 1
    again = run_failure_alert(
        "reeval_on_index_rebuild", "run-2", None, "lost with its host", root_run_id="run-1"
    )
    assert again.stream == first.stream and outbox.observe(again) is not None
    done = retry_succeeded_alert("reeval_on_index_rebuild", "run-3", "run-1", "ship", UI)
    assert outbox.observe(done) is not None
    flush(outbox, settings(slack))
    parent, *replies = slack.messages
    assert parent.thread_ts is None and parent.alert_ids == [first.id]
    assert [r.thread_ts for r in replies] == [parent.ts] * len(replies) and replies
    assert replies[-1].alert_ids == [done.id]
    assert "Evaluation run succeeded on retry: reeval_on_index_rebuild (release decision: ship)" in (
        replies[-1].text
    )
    assert "A retry of the failed run succeeded" in str(replies[-1].blocks)
    # Once recovered, a retry's later success says nothing more.
    assert outbox.observe(retry_succeeded_alert("reeval_on_index_rebuild", "run-4", "run-1", None)) is None

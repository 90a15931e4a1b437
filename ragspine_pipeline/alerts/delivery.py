"""Delivering the outbox to Slack, at most once per alert.

The alerts one run raised are posted as one message (``alerts.blocks.message``); a run still in progress
is left for the flush after it ends (the caller says which runs are finished). A recovery is the
exception: it is posted as a reply in the thread of the regression it closes (``alerts.incidents``: the
latest of the stream's open regressions that Slack took in this channel), after the run's other alerts —
the run's recoveries of one thread in one reply; without such a thread it is part of the run's message.
So is a later night of a production incident (``streams.incident_news``): a reply in the incident's
thread, with the recoveries of that thread, or part of the run's message when no thread is known.
Either way it names what recovered. An alert that waited longer than its time to live
(``RAGSPINE_ALERT_TTL_HOURS``, default 24) is marked expired instead of posted.

The delivery protocol, which survives a crash at any point, a full disk and a slow Slack:

1. Before a message is posted, a ``sending`` event with its alert ids is appended to the outbox and
   fsynced. If that fails (ENOSPC, EDQUOT, EIO, …) nothing is posted: the alerts stay pending and the
   pass stops with a one-line error.
2. The message carries Slack message metadata: ``event_type`` ``ragspine_alert``, ``event_payload``
   ``{"alert_ids": "<id> <id> …"}``.
3. Slack's answer is recorded: its ``ts`` as ``delivered``; an answer that proves nothing was posted (an
   error payload, a 4xx or 429, a connection refused before the request was sent) as ``failed``, and
   the next pass posts again; no answer (a timeout, a connection lost after the request went out) or a
   5xx (Slack may have stored the message before failing) as ``failed`` *unconfirmed*, and the pass
   stops there.
4. An unconfirmed alert — after a timeout, a kill between 1 and 3, or a delivery that could not be
   recorded — is never posted blindly. Once its attempt is older than ``RAGSPINE_ALERT_CONFIRM_AFTER_S``
   (default 120 s: a slow request may still land) — or, when Slack did answer with a 5xx, than
   :data:`ANSWERED_SETTLE_S` (10 s: that request is over, so an outage of Slack delays the alert by a
   delivery interval after its recovery, not by two minutes) — the next pass reads the channel's
   history since the attempt (``conversations.history`` with ``include_all_metadata``, from five
   minutes before it, at most :data:`HISTORY_PAGES` pages; for a reply, ``conversations.replies`` of
   the thread its ``sending`` event names): a message naming the alert in its metadata is recorded as
   the delivery, with its ``ts``; only a history read to the end without it lets the alert be posted
   again.
   A history that cannot be read leaves the alert pending, with the reason.
5. Every pass has a budget of wall-clock time with Slack (``RAGSPINE_ALERT_FLUSH_BUDGET_S``, default
   30 s, or ``flush(budget_s=…)``): a Retry-After or back-off wait happens only when it fits (one that
   does not is not waited for at all: the post fails at once, saying how long Slack asked for and how
   much of the budget was left), each request's timeout is cut to what is left, and once it is spent
   the remaining alerts stay pending and ``FlushResult.error`` says so. Retries that run out while
   Slack still rate-limits say that instead.

Nothing here raises because Slack is absent or failing, or because the disk is full: failed attempts are
recorded with their error and the alerts stay pending. The token is never part of an error message, a
log line or the outbox.

Passes never post the same alert twice because each holds ``outbox.delivering(due)``: the file outbox
lets one pass run at a time; the PostgreSQL outbox lets passes on several hosts run at once, each on the
batches (one run's alerts, or one alert without a run) it claimed — those ``due`` says it has something
to do with: their run has ended, or an alert in them outlived its time to live. A batch another pass
holds is left to that pass; a batch whose run is still going is left for the pass after the run ends.

Slack settings and the client are in ``alerts.slack``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ragspine_pipeline.alerts.events import AlertOutbox, Entry, OutboxView, batches
from ragspine_pipeline.alerts.incidents import alert_incident, closing, open_regressions, thread_root
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.slack import (
    DEFAULT_TTL_HOURS,
    HISTORY_PAGES,
    DeliveryError,
    SlackSender,
    SlackSettings,
    seconds_from_env,
)
from ragspine_pipeline.alerts.slack_budget import DEFAULT_BUDGET_S, MIN_REQUEST_S, WaitBudget
from ragspine_pipeline.errors import InputError

DEFAULT_CONFIRM_AFTER_S = 120.0
# After a 5xx the request is over (only its outcome is unknown): the history can say within seconds.
ANSWERED_SETTLE_S = 10.0
HISTORY_MARGIN_S = 300  # how much earlier than the recorded attempt history is read (clock skew)
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")


@dataclass
class FlushResult:
    delivered: list[str] = field(default_factory=list)  # alert ids (those confirmed in Slack included)
    confirmed: list[str] = field(default_factory=list)  # of those, found in the channel's history
    failed: dict[str, str] = field(default_factory=dict)  # alert id -> why this pass did not deliver it
    expired: list[str] = field(default_factory=list)  # alert ids past their time to live
    pending: int = 0  # still pending after this pass (failed, not attempted, or their run not finished)
    waiting: int = 0  # of those, alerts of runs still in progress
    messages: int = 0  # Slack messages posted
    set_aside: int = 0  # corrupt outbox lines moved aside during this pass
    skipped: str | None = None  # why nothing was attempted
    error: str | None = None  # why the pass stopped early: a full disk, the budget spent, Slack down


def flush(
    outbox: AlertOutbox,
    settings: SlackSettings | None = None,
    sender: SlackSender | None = None,
    *,
    finished: Callable[[str], bool] | None = None,
    ttl_hours: float = DEFAULT_TTL_HOURS,
    now: datetime | None = None,
    budget_s: float | None = None,
    confirm_after_s: float | None = None,
) -> FlushResult:
    """Deliver every pending alert, oldest first, one message per run, by the protocol of this module;
    record each delivery, failed attempt or expiry.

    ``finished(run_id)`` says whether a run has ended (None: every run has); the alerts of a run still
    in progress wait, so that the run's alerts go out together once it ends. Alerts older than
    ``ttl_hours`` are marked expired, never posted. Without a token or channel nothing is attempted
    (``skipped`` says why) and every alert stays pending. ``budget_s`` (default
    ``RAGSPINE_ALERT_FLUSH_BUDGET_S`` or 30) bounds the time spent with Slack; ``confirm_after_s``
    (default ``RAGSPINE_ALERT_CONFIRM_AFTER_S`` or 120) is how old an unanswered attempt must be before
    the channel's history is trusted to show it. After the first failure that says more attempts are
    pointless (Slack unreachable, rate limiting, no answer, a full disk, the budget spent) the rest
    are not attempted in this pass. On an outbox that passes share (PostgreSQL), the counts cover the
    batches this pass claimed.
    """
    settings = settings or SlackSettings.from_env()
    if budget_s is None:
        budget_s = seconds_from_env("RAGSPINE_ALERT_FLUSH_BUDGET_S", DEFAULT_BUDGET_S, MIN_REQUEST_S)
    if confirm_after_s is None:
        confirm_after_s = seconds_from_env("RAGSPINE_ALERT_CONFIRM_AFTER_S", DEFAULT_CONFIRM_AFTER_S, 0)
    now = now or datetime.now(UTC)
    deadline = now - timedelta(hours=ttl_hours)

    def due(batch: list[Entry]) -> bool:  # a batch this pass may post, expire or confirm
        return _finished(batch, finished) or any(_created(entry) < deadline for entry in batch)

    with outbox.delivering(due):
        budget = WaitBudget(budget_s)
        view = outbox.read()
        result = FlushResult(set_aside=view.set_aside)
        if not settings.missing or sender is not None:
            sender = sender or SlackSender(settings)
            sender.use_budget(budget)
        held = _confirm(outbox, sender, view, now, confirm_after_s, result)
        live, confirmed = [], set(result.delivered)
        for entry in view.pending:
            if entry.alert.id in confirmed:
                continue
            if _created(entry) < deadline:
                if _record(result, outbox.record_expiry, [entry.alert.id], ttl_hours):
                    result.expired.append(entry.alert.id)
                continue  # an expiry that could not be recorded is retried next pass, never posted
            live.append(entry)
        groups = list(batches(live).values())
        ready = [g for g in groups if _finished(g, finished)]
        result.waiting = sum(len(g) for g in groups) - sum(len(g) for g in ready)
        result.pending = len(live)
        if sender is None:
            result.skipped = settings.missing
            return result
        posted = _post(
            outbox, sender, [g for g in ready if not held.intersection(e.alert.id for e in g)], view, result
        )
        result.pending = len(live) - posted
        return result


def _confirm(
    outbox: AlertOutbox,
    sender: SlackSender | None,
    view: OutboxView,
    now: datetime,
    confirm_after_s: float,
    result: FlushResult,
) -> set[str]:
    """Settle the unconfirmed alerts of ``view`` by the channel's history: record those found there as
    delivered (into ``result``); return the ids that must not be posted in this pass (too recent to
    tell, or the history could not say)."""
    held: set[str] = set()
    by_place: dict[tuple[str, str | None], list[Entry]] = {}  # (target, thread): where to look
    for entry in view.pending:
        if not entry.unconfirmed:
            continue
        held.add(entry.alert.id)
        if sender is None:
            continue  # nothing is attempted without Slack settings; FlushResult.skipped says why
        wait = min(ANSWERED_SETTLE_S, confirm_after_s) if entry.answered else confirm_after_s
        if (now - _time(entry.sending_at, entry)).total_seconds() < wait:
            how = "Slack answered with an error" if entry.answered else "without an answer"
            setting = "" if entry.answered else " (RAGSPINE_ALERT_CONFIRM_AFTER_S)"
            result.failed[entry.alert.id] = (
                f"posted at {entry.sending_at}, {how}: Slack's history is checked once that attempt is "
                f"{wait:g} s old{setting}"
            )
            continue
        held.discard(entry.alert.id)
        place = (entry.target or sender.settings.channel or "", entry.thread_ts)
        by_place.setdefault(place, []).append(entry)
    for (target, thread_ts), entries in by_place.items():
        ids = {entry.alert.id for entry in entries}
        try:
            channel = _channel_id(target, view, sender)
            since = min(_time(entry.sending_at, entry) for entry in entries).timestamp() - HISTORY_MARGIN_S
            found, complete = sender.posted_alerts(channel, since, ids, thread_ts)
        except DeliveryError as exc:
            held |= ids
            result.failed.update(
                dict.fromkeys(ids, f"cannot tell whether Slack took the last attempt: {exc}")
            )
            continue
        for ts in sorted(set(found.values())):
            with_ts = sorted(i for i, t in found.items() if t == ts)
            if _record(result, outbox.record_delivery, with_ts, channel, ts, target, True, thread_ts):
                result.confirmed += with_ts
            else:
                held.update(with_ts)
            result.delivered += with_ts  # it is in Slack either way; an unrecorded one is found again
        if not complete:
            missing = ids - found.keys()
            held |= missing
            reason = f"not found in the last {HISTORY_PAGES} pages of the channel's history; not posted again"
            result.failed.update(dict.fromkeys(missing, reason))
    return held


def _channel_id(target: str, view: OutboxView, sender: SlackSender) -> str:
    """The ID of the channel ``target`` names: itself when it is one, else what an earlier delivery to it
    answered, else what ``conversations.list`` says."""
    if _CHANNEL_ID.match(target):
        return target
    known = view.channel_ids.get(target) or sender.channel_id(target)
    if not known:
        raise DeliveryError(f"no channel {target!r} found; set SLACK_CHANNEL to the channel's ID (C…)")
    return known


@dataclass
class _Message:
    """One Slack message to post: its entries, the alerts as they are rendered, the thread it replies in."""

    entries: list[Entry]
    alerts: list[Alert]
    thread_ts: str | None = None


def _messages(batch: list[Entry], view: OutboxView, target: str) -> list[_Message]:
    """The messages of one batch: its alerts as one message, but its recoveries whose regressions have a
    known thread in the channel of ``target`` as one reply in each such thread, after it. Every recovery
    says what it closes."""
    channel = target if _CHANNEL_ID.match(target) else view.channel_ids.get(target)
    messages: dict[str | None, _Message] = {None: _Message([], [])}  # by thread; None: the top level
    for entry in batch:
        alert, thread_ts = entry.alert, None
        incident = alert_incident(alert)
        if alert.kind == "recovered":
            closed = open_regressions(view.entries, alert.stream, until=alert.id, incident=incident)
            alert = closing(alert, [regression.alert for regression in closed])
            thread_ts = thread_root(closed, channel) if channel else None
        elif incident is not None and channel:  # a later night of an incident: a reply in its thread
            thread_ts = thread_root(open_regressions(view.entries, alert.stream, alert.id, incident), channel)
        elif alert.kind == "run_failure" and channel:  # a retry that failed too: in the first's thread
            thread_ts = thread_root(open_regressions(view.entries, alert.stream, alert.id), channel)
        message = messages.setdefault(thread_ts, _Message([], [], thread_ts))
        message.entries.append(entry)
        message.alerts.append(alert)
    return [message for message in messages.values() if message.entries]


def _post(
    outbox: AlertOutbox, sender: SlackSender, groups: list[list[Entry]], view: OutboxView, result: FlushResult
) -> int:
    """Post each group's messages (:func:`_messages`) by steps 1–3 of the protocol; how many alerts were
    delivered."""
    target = sender.settings.channel or ""
    delivered = 0
    # Lazily: a batch's threads are looked up after the batches before it were posted.
    for message in (m for group in groups for m in _messages(group, view, target)):
        ids = [entry.alert.id for entry in message.entries]
        if sender.budget.remaining() < MIN_REQUEST_S:
            result.error = sender.budget.spent()
            break
        try:
            outbox.record_sending(ids, target, message.thread_ts)
        except InputError as exc:
            result.error = f"not posted: {exc}"
            result.failed.update(dict.fromkeys(ids, result.error))
            break
        try:
            posted = sender.post(message.alerts, message.thread_ts)
        except DeliveryError as exc:
            # Unrecorded, a definite failure still reads as unconfirmed: the next pass looks, then posts.
            _record(result, outbox.record_failure, ids, str(exc), exc.maybe_posted, exc.answered)
            result.failed.update(dict.fromkeys(ids, str(exc)))
            if exc.stop:
                result.error = result.error or str(exc)
                break
            continue
        result.delivered += ids
        result.messages += 1
        delivered += len(ids)
        # What this pass read, brought up to date: a recovery later in the pass replies in this thread.
        view.channel_ids.setdefault(target, posted.channel)
        for entry in message.entries:
            entry.ts, entry.channel, entry.thread_ts = posted.ts, posted.channel, message.thread_ts
        recorded = (ids, posted.channel, posted.ts, target, False, message.thread_ts)
        if not _record(result, outbox.record_delivery, *recorded):
            break  # the disk is full: the "sending" line makes the next pass confirm instead of repost
    return delivered


def _record(result: FlushResult, write: Callable[..., None], *args) -> bool:
    """Run one outbox write; a refused write (a full disk) becomes the pass's error instead of an
    exception, so what was done so far is still reported."""
    try:
        write(*args)
    except InputError as exc:
        result.error = result.error or str(exc)
        return False
    return True


def _finished(batch: list[Entry], finished: Callable[[str], bool] | None) -> bool:
    """Whether the run of ``batch`` (one run's alerts, or one alert without a run) has ended."""
    run_id = batch[0].alert.run_id
    return not run_id or finished is None or finished(run_id)


def _created(entry: Entry) -> datetime:
    return _time(entry.alert.created_at, None)


def _time(text: str | None, entry: Entry | None) -> datetime:
    """An ISO time as an aware datetime; unreadable, the alert's creation (or now: treat it as new)."""
    try:
        when = datetime.fromisoformat(text or "")
    except ValueError:
        return _created(entry) if entry is not None else datetime.now(UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)

"""A regression's story in one Slack thread: which regressions of a stream are still open, the thread they
were posted in, and what a recovery closes.

An *incident* of a stream is the regressions announced on it since its last recovery (the outbox's own
order: each ``queued`` event, oldest first). A recovery closes the incident open when it was queued.
A stream of production drops has one incident per metric instead (``streams.incident_news``): its
alerts name the incidents they open, continue or close (``Alert.incidents``), and each incident is
followed on its own — a night that spreads it or reminds of it replies in its thread, as its recovery
does, and as an acceptance of its rates' new level does (the last one closes it).
Everything here reads the outbox's events (``alerts.events``) — the ``ts`` Slack answered for each
message is on its ``delivered`` event — so it works the same on both outboxes, and on alerts delivered
before threads existed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ragspine_pipeline.alerts.events import Entry
from ragspine_pipeline.alerts.model import Alert, Recovery


def open_regressions(
    entries: Iterable[Entry], stream: str, until: str | None = None, incident: str | None = None
) -> list[Entry]:
    """The regressions of ``stream``'s incident, oldest first: those queued after its last recovery and
    before the alert with id ``until`` (a recovery: the regressions it closes), or to the end of the
    outbox (the incident open now; empty when the stream recovered since). ``incident``: the incident
    of that metric on a stream of production drops (None: the stream's alerts that name none)."""
    regressions: list[Entry] = []
    for entry in entries:
        if entry.alert.id == until:
            break
        if entry.alert.stream != stream or not _of(entry.alert, incident):
            continue
        if entry.alert.kind == "recovered" or (entry.alert.accepted and entry.alert.accepted.closes):
            regressions = []
        elif entry.alert.kind in ("regression", "run_failure"):  # a failed run's retry may recover it
            regressions.append(entry)
    return regressions


def incident_thread(
    entries: Iterable[Entry],
    stream: str,
    channel: str | None = None,
    until: str | None = None,
    incident: str | None = None,
) -> str | None:
    """The Slack thread of ``stream``'s open incident (see :func:`open_regressions` for ``until`` and
    ``incident``): the ``ts`` of the root of the message that carried its latest regression Slack took —
    in ``channel`` (a channel ID) when given, since a ``ts`` names a message of one channel only. None
    when no such message is known (none delivered, expired, delivered before the outbox kept it, another
    channel)."""
    return thread_root(open_regressions(entries, stream, until, incident), channel)


def alert_incident(alert: Alert) -> str | None:
    """The one incident ``alert`` continues or closes (None: it names none, or opens several)."""
    return alert.incidents[0] if len(alert.incidents) == 1 else None


def _of(alert: Alert, incident: str | None) -> bool:
    return incident in alert.incidents if incident is not None else not alert.incidents


def thread_root(regressions: Sequence[Entry], channel: str | None = None) -> str | None:
    """The thread to reply in about ``regressions`` (an incident, oldest first): see
    :func:`incident_thread`."""
    for entry in reversed(regressions):
        if entry.ts and (channel is None or entry.channel == channel):
            return entry.thread_ts or entry.ts
    return None


def closing(recovery: Alert, closed: Sequence[Alert]) -> Alert:
    """``recovery`` saying what it closes: one :class:`Recovery` per metric, channel, slice or rate that
    the ``closed`` regressions (oldest first) announced — as the latest of them said it — and every rate
    of a production incident (its rates joined quietly: the recovery's return tests name them), with the
    recovering run's value where it has one. The same alert when nothing is known to be closed."""
    rows: dict[str, Recovery] = {}
    for alert in reversed(closed):
        for row in _announced(alert, recovery.incidents):
            rows.setdefault(f"{row.kind}:{row.name}", row)
    for r in recovery.returns:
        was = r.trailing if r.dropped_to is None else r.dropped_to
        rows.setdefault(f"rate:{r.key}", Recovery(name=r.key, kind="rate", was=was, trailing=r.trailing))
    recovered = [row.model_copy(update={"now": recovery.measured.get(row.name)}) for row in rows.values()]
    return recovery.model_copy(update={"recovered": recovered}) if recovered else recovery


def _announced(alert: Alert, incidents: Sequence[str] = ()) -> list[Recovery]:
    """What a regression said was wrong, as rows of what may recover: metrics and channels (a gate and
    a baseline of one metric are one row), then slices, then production rates (only those of
    ``incidents``' metrics, when given: an alert that opened several incidents)."""
    rows = [
        Recovery(name=r.name, kind=r.kind, was=r.value, gate=r.gate, baseline=r.baseline, counts=r.counts)
        for r in alert.metric_rows()
    ]
    rows += [
        Recovery(name=f.name, kind="slice", was=f.value, gate=(f.op, f.reference), n=f.n)
        for f in alert.failed_slices
    ]
    rows += [
        Recovery(name=d.name, kind="rate", was=d.current, trailing=d.trailing)
        for d in alert.drops
        if not incidents or d.metric in incidents
    ]
    return rows

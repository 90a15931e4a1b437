"""What an alert outbox records and what it means: the events, their fold into each alert's status,
the per-stream memory that makes an alert news, and the interface every outbox offers.

An outbox is an append-only log of events, one JSON object each, in the order they were written,
each durable before anything that depends on it happens:

* ``queued`` (the whole alert): written *before* anyone tries to deliver it, so an alert is never lost.
* ``sending`` (``ids``, ``target``, ``thread_ts`` for a reply): written *before* the message carrying
  these alerts is posted; a post whose ``sending`` event cannot be written does not happen.
* ``delivered`` (``ids``, ``channel``, ``ts``, ``target``, ``thread_ts`` for a reply): Slack answered with
  the message's ``ts``, or a later pass found the message in the channel's history or in the thread
  (``confirmed``). The ``ts`` of every alert's message is kept so: a recovery replies in the thread of
  the regression it closes (``alerts.incidents``).
* ``failed`` (``ids``, ``error``, ``unconfirmed``): an attempt that did not deliver. ``unconfirmed`` means
  Slack never answered (a timeout, a lost connection): it may have posted the message all the same.
* ``expired`` (``ids``, ``ttl_hours``): waited longer than its time to live; kept and listed, never posted,
  so connecting Slack to an old outbox does not page anyone about last week.

Every event carries ``at`` (UTC, ISO 8601). An alert is pending until it is delivered or expired. A
pending alert whose last ``sending`` is followed by no definite answer (a crash, a timeout, a delivery
that could not be recorded) is *unconfirmed*: the delivery pass (``alerts.delivery.flush``) looks for it
in Slack before it posts it again. Events written by earlier versions (one ``id`` instead of ``ids``)
still read; so do events without ``thread_ts`` (written before threads: no reply).

The unit of delivery is a *batch*: the alerts of one run, or one alert without a run
(:func:`batch_key`); a batch is posted as one Slack message, and each of its recoveries whose regression
has a known thread as a reply there.

Both outboxes — the JSONL file (``alerts.outbox.Outbox``) and PostgreSQL
(``alerts.pg_outbox.PostgresOutbox``) — write these events through :class:`AlertOutbox`, fold them with
:func:`fold` and decide news with :func:`observed`; they differ in storage and in how processes share it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.streams import StreamState, now
from ragspine_pipeline.errors import InputError

EVENTS = ("queued", "sending", "delivered", "failed", "expired")


def queued_event(alert: Alert) -> dict:
    return {"event": "queued", "alert": alert.model_dump(mode="json")}


def stamped(event: dict) -> dict:
    """``event`` as it is stored: with the time it was written."""
    return {**event, "at": now()}


def batch_key(alert: Alert) -> str:
    """The batch ``alert`` is delivered in: its run (``run:<id>`` never collides with an alert id's
    ``alert:<id>``, whatever the run id), or itself when it has no run."""
    return f"run:{alert.run_id}" if alert.run_id else f"alert:{alert.id}"


@dataclass
class Entry:
    """One alert and what happened to it so far."""

    alert: Alert
    line: int  # where its ``queued`` event is: a line of the file, an event id in PostgreSQL
    delivered_at: str | None = None
    channel: str | None = None  # the channel's ID, as Slack answered
    ts: str | None = None
    attempts: int = 0
    last_error: str | None = None
    expired_at: str | None = None
    sending_at: str | None = None  # the last attempt to post it, while its outcome is unknown
    target: str | None = None  # the channel that attempt posted to, as configured (a name or an ID)
    confirmed: bool = False  # delivered, as found in the channel's history after an unanswered attempt
    thread_ts: str | None = None  # the thread its last attempt or its delivery replied in (None: top level)
    answered: bool = False  # its unconfirmed last attempt was answered (a 5xx), not left without answer

    @property
    def pending(self) -> bool:
        return self.delivered_at is None and self.expired_at is None

    @property
    def unconfirmed(self) -> bool:
        """Pending, but Slack may have taken its last attempt: look before posting it again."""
        return self.pending and self.sending_at is not None

    @property
    def status(self) -> str:
        return "delivered" if self.delivered_at else "expired" if self.expired_at else "pending"


@dataclass
class OutboxView:
    """The outbox's alerts in order, how many corrupt events this read set aside, and the channel IDs
    Slack answered for each configured channel (``target`` → ``C…``)."""

    entries: list[Entry] = field(default_factory=list)
    set_aside: int = 0
    channel_ids: dict[str, str] = field(default_factory=dict)

    @property
    def pending(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.pending]

    @property
    def delivered(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.delivered_at]

    @property
    def expired(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.expired_at]


@dataclass
class ReadOnlyView(OutboxView):
    """What a read-only read returns: the view, and how many unreadable lines it left where they are
    (``set_aside`` stays 0: nothing was moved)."""

    corrupt: int = 0


def batches(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """``entries`` by batch (:func:`batch_key`), in the order each batch's first entry comes."""
    grouped: dict[str, list[Entry]] = {}
    for entry in entries:
        grouped.setdefault(batch_key(entry.alert), []).append(entry)
    return grouped


def fold(
    data: bytes | str, name: str, number: int, entries: dict[str, Entry], channel_ids: dict[str, str]
) -> str | None:
    """Fold one stored event (JSON text; ``number`` is where it is, for messages) into ``entries`` and
    what it says about channel IDs; the reason it cannot be read, or None. Blank text is no event."""
    if not data.strip():
        return None
    try:
        event = inputs.loads(data, name, number)
    except InputError as exc:
        return exc.message
    except (ValueError, RecursionError) as exc:  # whatever the parser still refuses: this event only
        return f"not JSON: {' '.join(str(exc).split())[:200]}"
    if not isinstance(event, dict):
        return "not a JSON object"
    kind = event.get("event")
    if kind == "queued":
        try:
            alert = Alert.model_validate(event.get("alert"))
        except ValidationError as exc:
            return f"not an alert: {exc.errors(include_url=False)[0]['msg']}"
        entries.setdefault(alert.id, Entry(alert, number))
        return None
    ids = event.get("ids", [event.get("id")])
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i in entries for i in ids):
        return f"unknown event {kind!r} or alert id {ids!r}"[:300]
    if kind not in EVENTS:
        return f"unknown event {kind!r}"[:300]
    at = event.get("at") if isinstance(event.get("at"), str) else None
    for entry in (entries[i] for i in ids):
        _apply(entry, kind, event, at)
    if kind == "delivered" and isinstance(event.get("target"), str) and isinstance(event.get("channel"), str):
        channel_ids[event["target"]] = event["channel"]
    return None


def _apply(entry: Entry, kind: str, event: dict, at: str | None) -> None:
    thread_ts = event.get("thread_ts") if isinstance(event.get("thread_ts"), str) else None
    if kind == "sending":
        entry.sending_at, entry.answered = at or now(), False
        entry.target = event.get("target") if isinstance(event.get("target"), str) else None
        entry.thread_ts = thread_ts
    elif kind == "delivered":
        entry.delivered_at, entry.channel, entry.ts = at or now(), event.get("channel"), event.get("ts")
        entry.confirmed = event.get("confirmed") is True
        entry.sending_at, entry.thread_ts = None, thread_ts
    elif kind == "expired":
        entry.expired_at = at or now()
    elif kind == "failed":
        entry.attempts += 1
        entry.last_error = str(event.get("error"))
        if event.get("unconfirmed") is not True:
            entry.sending_at = None  # Slack answered: the attempt is known not to have posted
        else:
            entry.answered = event.get("answered") is True


Due = Callable[[list[Entry]], bool]
"""Whether a delivery pass has anything to do with a batch, given its pending entries."""


class AlertOutbox(ABC):
    """An outbox as the rest of the code uses it: queue news, record what delivery did, read it back.

    ``path`` names the outbox in messages and metadata, and never holds a secret. Every ``record_*``
    is durable when it returns; a write the store refuses is a one-line InputError and nothing of it
    is kept. An outbox may hold connections: :meth:`close` it, or use it as a context manager.
    """

    path: str | Path

    @abstractmethod
    def observe(self, alert: Alert) -> Alert | None:
        """Queue what of ``alert`` is news for its stream (see :func:`observed`); return the first alert
        queued (``alert`` itself, or the first part of a night of production drops), or None.

        The stream's state is updated either way. Raises a one-line InputError when the alert's events
        cannot be written: then nothing is queued and its stream's state is unchanged, so the next
        evaluation announces it. Once the events landed the alert is queued, whatever happens to the
        state's own write (the state is then rebuilt from the events, so nothing is announced twice).
        """

    def record_sending(self, ids: Sequence[str], target: str, thread_ts: str | None = None) -> None:
        """Persist that a message with ``ids`` is about to be posted to ``target`` (as a reply in
        ``thread_ts``, when given); an InputError means it was not persisted, and the message must not
        be posted."""
        event = {"event": "sending", "ids": list(ids), "target": target}
        self._record(_in_thread(event, thread_ts), "record the attempt")

    def record_delivery(
        self,
        ids: Sequence[str],
        channel: str,
        ts: str | None,
        target: str | None = None,
        confirmed: bool = False,
        thread_ts: str | None = None,
    ) -> None:
        event = {"event": "delivered", "ids": list(ids), "channel": channel, "ts": ts, "target": target}
        event = _in_thread({**event, "confirmed": True} if confirmed else event, thread_ts)
        self._record(event, "record the delivery")

    def record_failure(
        self, ids: Sequence[str], error: str, unconfirmed: bool = False, answered: bool = False
    ) -> None:
        event = {"event": "failed", "ids": list(ids), "error": error, "unconfirmed": unconfirmed}
        if unconfirmed and answered:  # a 5xx: Slack answered, nothing of that request can land later
            event["answered"] = True
        self._record(event, "record the failed attempt")

    def record_expiry(self, ids: Sequence[str], ttl_hours: float) -> None:
        self._record({"event": "expired", "ids": list(ids), "ttl_hours": ttl_hours}, "record the expiry")

    @abstractmethod
    def delivering(self, due: Due | None = None) -> AbstractContextManager[None]:
        """Held for a whole delivery pass, so that no two passes post the same alert. ``due`` says
        which batches the pass has anything to do with (None: every batch with pending alerts); an
        outbox may leave the others to other passes."""

    @abstractmethod
    def read(self) -> OutboxView:
        """Every alert with its delivery status; inside :meth:`delivering`, the pending ones this pass
        may deliver."""

    @abstractmethod
    def states(self) -> dict[str, StreamState]:
        """The last announced condition of every stream."""

    @abstractmethod
    def _record(self, event: dict, doing: str) -> None:
        """Append one event (:func:`stamped`) durably; a refusal is an InputError saying ``doing``."""

    def close(self) -> None:
        """Release what the outbox holds open (nothing, for a file)."""
        return None

    def __enter__(self) -> AlertOutbox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _in_thread(event: dict, thread_ts: str | None) -> dict:
    """``event`` naming the thread its message replies in; a top-level message's event has no field."""
    return {**event, "thread_ts": thread_ts} if thread_ts else event


def dumps(event: dict, ascii_only: bool = False) -> str:
    """One event as JSON text; ``ascii_only`` escapes every other character (a store whose encoding
    is not UTF-8 keeps it as is)."""
    return json.dumps(event, ensure_ascii=ascii_only, allow_nan=False)

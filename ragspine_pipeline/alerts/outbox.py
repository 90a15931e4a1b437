"""The persistent outbox and the de-duplication state next to it.

``outbox.jsonl`` is an append-only log of events, one JSON object a line, each appended and fsynced
under the lock before anything that depends on it happens:

* ``queued`` (the whole alert): written *before* anyone tries to deliver it, so an alert is never lost.
* ``sending`` (``ids``, ``target``): written *before* the message carrying these alerts is posted; a post
  whose ``sending`` line cannot be written does not happen.
* ``delivered`` (``ids``, ``channel``, ``ts``, ``target``): Slack answered with the message's ``ts``, or a
  later pass found the message in the channel's history (``confirmed``).
* ``failed`` (``ids``, ``error``, ``unconfirmed``): an attempt that did not deliver. ``unconfirmed`` means
  Slack never answered (a timeout, a lost connection): it may have posted the message all the same.
* ``expired`` (``ids``, ``ttl_hours``): waited longer than its time to live; kept and listed, never posted,
  so connecting Slack to an old outbox does not page anyone about last week.

An alert is pending until it is delivered or expired. A pending alert whose last ``sending`` is followed
by no definite answer (a crash, a timeout, a delivery that could not be recorded) is *unconfirmed*: the
delivery pass (``alerts.delivery.flush``) looks for it in Slack before it posts it again. Lines written by
earlier versions (one ``id`` instead of ``ids``) still read.

``alert_state.json`` (same folder) remembers, per stream, whether the last evaluation was failing and
with which failures, so the same regression is announced once, a new failure or a new failing index
version is announced again, and a recovery is announced once. The event is appended before the state
is saved: a full disk loses neither (the alert is not queued and stays news for the next evaluation).

Several processes may share one outbox (a run, the run-failure sensor, the CLI): every read-modify-
write holds an exclusive ``flock`` on ``.outbox.lock``; a delivery pass holds ``.flush.lock`` so two
flushes never post the same alert twice. Every line is read through ``ragspine_pipeline.inputs`` (bounded
length and nesting, strict UTF-8): a line that cannot be read — torn by a crash, nested thousands deep,
a number of thousands of digits, not UTF-8, longer than the line cap — is moved to
``outbox.corrupt.jsonl`` (with its line number and the reason) and counted; it never blocks another
alert. An outbox, state or lock path that is not a regular file (a directory, a FIFO) is a one-line
:class:`~ragspine_pipeline.errors.InputError`, as is a write the disk refuses.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.alerts.model import MODEL_CONFIG, Alert
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer, write_text_atomically

DEFAULT_OUTBOX = "var/alerts/outbox.jsonl"
STATE_FILE = "alert_state.json"
EVENTS = ("queued", "sending", "delivered", "failed", "expired")


class StreamState(BaseModel):
    """The last announced condition of one stream."""

    model_config = MODEL_CONFIG

    status: Literal["failing", "ok"]
    failures: list[str] = []
    index_version: str | None = None
    alert_id: str | None = None
    updated_at: str


def is_news(previous: StreamState | None, alert: Alert) -> bool:
    """Whether ``alert`` says something its stream has not said yet.

    A regression is news unless the stream is already failing on the same index version with no
    failure that was not announced then; a recovery is news only right after a failure; a run
    failure is its own stream, so it is always news once.
    """
    if alert.kind == "recovered":
        return previous is not None and previous.status == "failing"
    if previous is None or previous.status != "failing":
        return True
    if alert.index_version != previous.index_version:
        return True
    return bool(set(alert.failure_keys) - set(previous.failures))


@dataclass
class Entry:
    """One alert and what happened to it so far."""

    alert: Alert
    line: int
    delivered_at: str | None = None
    channel: str | None = None  # the channel's ID, as Slack answered
    ts: str | None = None
    attempts: int = 0
    last_error: str | None = None
    expired_at: str | None = None
    sending_at: str | None = None  # the last attempt to post it, while its outcome is unknown
    target: str | None = None  # the channel that attempt posted to, as configured (a name or an ID)
    confirmed: bool = False  # delivered, as found in the channel's history after an unanswered attempt

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
    """The outbox's alerts in order, how many corrupt lines this read set aside, and the channel IDs
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


class Outbox:
    """``outbox.jsonl`` (append-only events), its state file and its lock, in one folder."""

    def __init__(self, path: str | Path = DEFAULT_OUTBOX) -> None:
        self.path = Path(path)
        self.state_path = self.path.with_name(STATE_FILE)
        self.corrupt_path = self.path.with_name(f"{self.path.stem}.corrupt.jsonl")
        self._lock_path = self.path.with_name(".outbox.lock")
        self._flush_lock_path = self.path.with_name(".flush.lock")

    # -- writing -------------------------------------------------------------------------------

    def observe(self, alert: Alert) -> Alert | None:
        """Queue ``alert`` if it is news for its stream (see :func:`is_news`); return it, or None.

        The stream's state is updated either way: a shrinking set of failures is remembered, so a
        failure that comes back later is news again. Raises a one-line InputError when the outbox or
        its state cannot be written (a full disk): then the alert is not queued and its stream's
        state is unchanged, so the next evaluation announces it.
        """
        with _flock(self._lock_path):
            states = self._states()
            previous = states.get(alert.stream)
            news = is_news(previous, alert)
            if alert.kind == "recovered":
                state = StreamState(status="ok", alert_id=alert.id if news else None, updated_at=_now())
            else:
                state = StreamState(
                    status="failing",
                    failures=alert.failure_keys,
                    index_version=alert.index_version,
                    alert_id=alert.id if news or previous is None else previous.alert_id,
                    updated_at=_now(),
                )
            if news:
                self._append({"event": "queued", "alert": alert.model_dump(mode="json")}, "queue the alert")
            states[alert.stream] = state
            self._write_states(states)
        return alert if news else None

    def record_sending(self, ids: Sequence[str], target: str) -> None:
        """Persist that a message with ``ids`` is about to be posted to ``target``; an InputError means
        it was not persisted, and the message must not be posted."""
        with _flock(self._lock_path):
            self._append({"event": "sending", "ids": list(ids), "target": target}, "record the attempt")

    def record_delivery(
        self,
        ids: Sequence[str],
        channel: str,
        ts: str | None,
        target: str | None = None,
        confirmed: bool = False,
    ) -> None:
        event = {"event": "delivered", "ids": list(ids), "channel": channel, "ts": ts, "target": target}
        with _flock(self._lock_path):
            self._append({**event, "confirmed": True} if confirmed else event, "record the delivery")

    def record_failure(self, ids: Sequence[str], error: str, unconfirmed: bool = False) -> None:
        event = {"event": "failed", "ids": list(ids), "error": error, "unconfirmed": unconfirmed}
        with _flock(self._lock_path):
            self._append(event, "record the failed attempt")

    def record_expiry(self, ids: Sequence[str], ttl_hours: float) -> None:
        with _flock(self._lock_path):
            self._append({"event": "expired", "ids": list(ids), "ttl_hours": ttl_hours}, "record the expiry")

    @contextmanager
    def delivering(self) -> Iterator[None]:
        """Held for a whole delivery pass: a second flusher waits instead of posting the same alerts."""
        with _flock(self._flush_lock_path):
            yield

    # -- reading -------------------------------------------------------------------------------

    def read(self) -> OutboxView:
        """Every alert with its delivery status; corrupt lines are set aside first (and counted).

        Raises a one-line InputError when the outbox is not a regular file (a directory, a FIFO).
        """
        with _flock(self._lock_path):
            if not os.path.lexists(self.path):
                return OutboxView()
            view = OutboxView()
            entries: dict[str, Entry] = {}
            corrupt: list[tuple[int, bytes, str]] = []
            with inputs.open_regular(self.path, "alert outbox") as stream:
                for line in inputs.iter_lines(stream):
                    problem = _fold(line, str(self.path), entries, view.channel_ids)
                    if problem:
                        corrupt.append((line.number, line.data, problem))
            view.entries = list(entries.values())
            view.set_aside = self._set_aside(corrupt) if corrupt else 0
            return view

    def states(self) -> dict[str, StreamState]:
        with _flock(self._lock_path):
            return self._states()

    # -- files ---------------------------------------------------------------------------------

    def _append(self, event: dict, doing: str) -> None:
        """Append one event as one whole line and fsync it; any OS error (ENOSPC, EDQUOT, EIO) is a
        one-line InputError and leaves no part of the line behind."""
        line = json.dumps({**event, "at": _now()}, ensure_ascii=False, allow_nan=False) + "\n"
        try:
            _append_line(self.path, line.encode("utf-8"))
        except OSError as exc:
            raise InputError(str(self.path), f"cannot {doing}: {exc.strerror or exc}") from None

    def _set_aside(self, corrupt: list[tuple[int, bytes, str]]) -> int:
        """Move the corrupt lines to ``corrupt_path`` and rewrite the outbox without them; how many were
        moved. When the disk refuses, they stay where they are (every read skips them) until a later
        read can move them."""
        at = _now()
        records = "".join(
            json.dumps(
                {"line": n, "error": problem, "text": data.decode("utf-8", "replace"), "set_aside_at": at}
            )
            + "\n"
            for n, data, problem in corrupt
        )
        bad = {number for number, _data, _problem in corrupt}
        try:
            _append_line(self.corrupt_path, records.encode("utf-8"))
            with (
                inputs.open_regular(self.path, "alert outbox") as stream,
                atomic_writer(self.path, "alert outbox") as out,
            ):
                for line in inputs.iter_lines(stream):
                    if line.number not in bad and line.data.strip():
                        out.buffer.write(line.data + b"\n")
        except (OSError, InputError):
            return 0
        return len(corrupt)

    def _states(self) -> dict[str, StreamState]:
        if not os.path.lexists(self.state_path):
            return {}
        inputs.check_regular(self.state_path, "alert state")  # a directory or FIFO: the user's to fix
        try:
            raw = inputs.loads(inputs.read_text(self.state_path, "alert state"), str(self.state_path))
            return {stream: StreamState.model_validate(state) for stream, state in raw.items()}
        except (InputError, ValueError, AttributeError, ValidationError):
            # An unreadable state costs at most one repeated message; it must not stop alerting.
            try:
                self.state_path.replace(self.state_path.with_suffix(".corrupt.json"))
            except OSError as exc:
                raise InputError(str(self.state_path), f"cannot set aside: {exc.strerror}") from None
            return {}

    def _write_states(self, states: dict[str, StreamState]) -> None:
        text = json.dumps({k: v.model_dump(mode="json") for k, v in sorted(states.items())}, indent=2)
        write_text_atomically(self.state_path, text + "\n", "alert state")


def _fold(line: inputs.Line, name: str, entries: dict[str, Entry], channel_ids: dict[str, str]) -> str | None:
    """Fold one outbox line into ``entries`` (and what it says about channel IDs); the reason it cannot
    be read, or None."""
    if line.too_long:
        return inputs.too_long_message(line.length)
    if not line.data.strip():
        return None
    try:
        event = inputs.loads(line.data, name, line.number)
    except InputError as exc:
        return exc.message
    except (ValueError, RecursionError) as exc:  # whatever the parser still refuses: this line only
        return f"not JSON: {' '.join(str(exc).split())[:200]}"
    if not isinstance(event, dict):
        return "not a JSON object"
    kind = event.get("event")
    if kind == "queued":
        try:
            alert = Alert.model_validate(event.get("alert"))
        except ValidationError as exc:
            return f"not an alert: {exc.errors(include_url=False)[0]['msg']}"
        entries.setdefault(alert.id, Entry(alert, line.number))
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
    if kind == "sending":
        entry.sending_at = at or _now()
        entry.target = event.get("target") if isinstance(event.get("target"), str) else None
    elif kind == "delivered":
        entry.delivered_at, entry.channel, entry.ts = at or _now(), event.get("channel"), event.get("ts")
        entry.confirmed = event.get("confirmed") is True
        entry.sending_at = None
    elif kind == "expired":
        entry.expired_at = at or _now()
    elif kind == "failed":
        entry.attempts += 1
        entry.last_error = str(event.get("error"))
        if event.get("unconfirmed") is not True:
            entry.sending_at = None  # Slack answered: the attempt is known not to have posted


def _append_line(path: Path, data: bytes) -> None:
    """Append ``data`` (whole lines) to the regular file ``path`` and fsync it. A failed write or fsync
    truncates the file back to where it was, so a full disk leaves no half line; a crash may, and then
    the next line starts on a line of its own (the torn one is set aside by the next read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """The one place the outbox writes bytes: all of ``data``, or an OSError (a short write is retried,
    and a disk that takes nothing more raises ENOSPC)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _open_regular(path: Path) -> int:
    """A read-write, appending descriptor on ``path`` (created if absent) when it is a regular file;
    never blocks on a FIFO."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if os.path.lexists(path):
        inputs.check_regular(path, "alert outbox")
    fd = os.open(path, flags, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(str(path), "cannot write: not a regular file")
    return fd


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if absent), released when the block ends or the process
    dies; a lock path that cannot be opened is a one-line InputError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise InputError(str(path), f"cannot lock the alert outbox: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

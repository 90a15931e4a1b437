"""The persistent outbox and the de-duplication state next to it (SPEC §6).

Every alert is appended to ``outbox.jsonl`` *before* anyone tries to deliver it, and its delivery (or
each failed attempt, with the error) is appended after, so an alert is never lost: whatever is not
marked delivered is pending, and the next run or ``ragspine-eval alerts flush`` sends it — unless it
waited longer than its time to live: then it is marked ``expired`` (kept and listed, never posted), so
connecting Slack to an old outbox does not page anyone about last week.

``alert_state.json`` (same folder) remembers, per stream, whether the last evaluation was failing and
with which failures, so the same regression is announced once, a new failure or a new failing index
version is announced again, and a recovery is announced once.

Several processes may share one outbox (a run, the run-failure sensor, the CLI): every read-modify-
write holds an exclusive ``flock`` on ``.outbox.lock``; a delivery pass holds ``.flush.lock`` so two
flushes never post the same alert twice. A line that does not parse is moved to
``outbox.corrupt.jsonl`` (with its line number) and counted; it never blocks new alerts.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from ragspine_pipeline.alerts.model import MODEL_CONFIG, Alert
from ragspine_pipeline.files import write_text_atomically

DEFAULT_OUTBOX = "var/alerts/outbox.jsonl"
STATE_FILE = "alert_state.json"


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
    channel: str | None = None
    ts: str | None = None
    attempts: int = 0
    last_error: str | None = None
    expired_at: str | None = None

    @property
    def pending(self) -> bool:
        return self.delivered_at is None and self.expired_at is None

    @property
    def status(self) -> str:
        return "delivered" if self.delivered_at else "expired" if self.expired_at else "pending"


@dataclass
class OutboxView:
    """The outbox's alerts in order, and how many corrupt lines this read set aside."""

    entries: list[Entry] = field(default_factory=list)
    set_aside: int = 0

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
        failure that comes back later is news again.
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
                self._append({"event": "queued", "alert": alert.model_dump(mode="json")})
            states[alert.stream] = state
            self._write_states(states)
        return alert if news else None

    def record_delivery(self, alert_id: str, channel: str, ts: str | None) -> None:
        with _flock(self._lock_path):
            self._append({"event": "delivered", "id": alert_id, "channel": channel, "ts": ts})

    def record_failure(self, alert_id: str, error: str) -> None:
        with _flock(self._lock_path):
            self._append({"event": "failed", "id": alert_id, "error": error})

    def record_expiry(self, alert_id: str, ttl_hours: float) -> None:
        with _flock(self._lock_path):
            self._append({"event": "expired", "id": alert_id, "ttl_hours": ttl_hours})

    @contextmanager
    def delivering(self) -> Iterator[None]:
        """Held for a whole delivery pass: a second flusher waits instead of posting the same alerts."""
        with _flock(self._flush_lock_path):
            yield

    # -- reading -------------------------------------------------------------------------------

    def read(self) -> OutboxView:
        """Every alert with its delivery status; corrupt lines are set aside first (and counted)."""
        with _flock(self._lock_path):
            if not self.path.exists():
                return OutboxView()
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            entries: dict[str, Entry] = {}
            corrupt: list[tuple[int, str, str]] = []
            for number, text in enumerate(lines, 1):
                if not text.strip():
                    continue
                problem = _apply(text, number, entries)
                if problem:
                    corrupt.append((number, text, problem))
            if corrupt:
                self._set_aside(lines, corrupt)
            return OutboxView(list(entries.values()), len(corrupt))

    def states(self) -> dict[str, StreamState]:
        with _flock(self._lock_path):
            return self._states()

    # -- files ---------------------------------------------------------------------------------

    def _append(self, event: dict) -> None:
        event = {**event, "at": _now()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(event, ensure_ascii=False, allow_nan=False) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if _ends_without_newline(fd):
                line = "\n" + line  # a crash left half a line: keep ours on a line of its own
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def _set_aside(self, lines: list[str], corrupt: list[tuple[int, str, str]]) -> None:
        bad = {number for number, _text, _problem in corrupt}
        with open(self.corrupt_path, "a", encoding="utf-8") as out:
            for number, text, problem in corrupt:
                record = {"line": number, "error": problem, "text": text, "set_aside_at": _now()}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        kept = [text for number, text in enumerate(lines, 1) if number not in bad and text.strip()]
        write_text_atomically(self.path, "".join(f"{text}\n" for text in kept), "alert outbox")

    def _states(self) -> dict[str, StreamState]:
        try:
            raw = json.loads(self.state_path.read_text(encoding="utf-8"))
            return {stream: StreamState.model_validate(state) for stream, state in raw.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, AttributeError, ValidationError):
            # An unreadable state costs at most one repeated message; it must not stop alerting.
            self.state_path.replace(self.state_path.with_suffix(".corrupt.json"))
            return {}

    def _write_states(self, states: dict[str, StreamState]) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({k: v.model_dump(mode="json") for k, v in sorted(states.items())}, indent=2)
        write_text_atomically(self.state_path, text + "\n", "alert state")


def _apply(text: str, number: int, entries: dict[str, Entry]) -> str | None:
    """Fold one outbox line into ``entries``; the reason it cannot be read, or None."""
    try:
        event = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
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
    entry = entries.get(event.get("id")) if isinstance(event.get("id"), str) else None
    if kind not in ("delivered", "failed", "expired") or entry is None:
        return f"unknown event {kind!r} or alert id {event.get('id')!r}"
    if kind == "delivered":
        entry.delivered_at, entry.channel, entry.ts = event.get("at"), event.get("channel"), event.get("ts")
    elif kind == "expired":
        entry.expired_at = event.get("at")
    else:
        entry.attempts += 1
        entry.last_error = str(event.get("error"))
    return None


def _ends_without_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

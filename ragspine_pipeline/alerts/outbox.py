"""The alert outbox in one folder: ``outbox.jsonl``, the de-duplication state next to it, their locks;
and :func:`open_outbox`, which opens this or the PostgreSQL outbox by its location.

``outbox.jsonl`` holds the events of ``alerts.events`` (what they are and how they fold), one JSON
object a line, each appended and fsynced under the lock before anything that depends on it happens.

``alert_state.json`` (same folder) remembers, per stream, whether the last evaluation was failing and
with which failures, so the same regression is announced once, a new failure or a new failing index
version is announced again, and a recovery is announced once. The event is appended before the state
is saved: a full disk loses neither (the alert is not queued and stays news for the next evaluation).

Several processes on one host may share one outbox (a run, the run-failure sensor, the CLI): every
read-modify-write holds an exclusive ``flock`` on ``.outbox.lock``; a delivery pass holds
``.flush.lock`` so two flushes never post the same alert twice. Processes on several hosts share the
PostgreSQL outbox instead (``alerts.pg_outbox``). Every line is read through ``ragspine_pipeline.inputs``
(bounded length and nesting, strict UTF-8): a line that cannot be read — torn by a crash, nested
thousands deep, a number of thousands of digits, not UTF-8, longer than the line cap — is moved to
``outbox.corrupt.jsonl`` (with its line number and the reason) and counted; it never blocks another
alert. An outbox, state or lock path that is not a regular file (a directory, a FIFO) is a one-line
:class:`~ragspine_pipeline.errors.InputError`, as is a write the disk refuses.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.alerts.events import (
    AlertOutbox,
    Due,
    Entry,
    OutboxView,
    StreamState,
    fold,
    now,
    observed,
    queued_event,
    stamped,
)
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import append_durably, atomic_output, jsonl_lines, write_text_atomically

DEFAULT_OUTBOX = "var/alerts/outbox.jsonl"
STATE_FILE = "alert_state.json"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_outbox(location: str | Path) -> AlertOutbox:
    """The outbox at ``location``: PostgreSQL for a ``postgresql://`` or ``postgres://`` URI (its
    password from libpq's environment, ``PGPASSWORD`` or ``~/.pgpass``, never from the URI), the JSONL
    file at that path otherwise. Opening connects to nothing; psycopg2 is imported only here, only for
    PostgreSQL."""
    if isinstance(location, str) and location.lower().startswith(POSTGRES_SCHEMES):
        from ragspine_pipeline.alerts.pg_outbox import PostgresOutbox

        return PostgresOutbox(location)
    return Outbox(location)


class Outbox(AlertOutbox):
    """``outbox.jsonl`` (append-only events), its state file and its lock, in one folder."""

    def __init__(self, path: str | Path = DEFAULT_OUTBOX) -> None:
        self.path = Path(path)
        self.state_path = self.path.with_name(STATE_FILE)
        self.corrupt_path = self.path.with_name(f"{self.path.stem}.corrupt.jsonl")
        self._lock_path = self.path.with_name(".outbox.lock")
        self._flush_lock_path = self.path.with_name(".flush.lock")

    # -- writing -------------------------------------------------------------------------------

    def observe(self, alert: Alert) -> Alert | None:
        """Queue ``alert`` if it is news for its stream; return it, or None (see
        :meth:`AlertOutbox.observe`). A full disk is a one-line InputError: the alert is not queued and
        its stream's state is unchanged."""
        with _flock(self._lock_path):
            states = self._states()
            news, states[alert.stream] = observed(states.get(alert.stream), alert)
            if news:  # the night's parts in one write: all of them are queued, or none
                self._append([queued_event(part) for part in news], "queue the alert")
            self._write_states(states)
        return news[0] if news else None

    def _record(self, event: dict, doing: str) -> None:
        with _flock(self._lock_path):
            self._append([event], doing)

    @contextmanager
    def delivering(self, due: Due | None = None) -> Iterator[None]:
        """Held for a whole delivery pass: a second flusher waits instead of posting the same alerts.
        Every pending alert is this pass's (``due`` is not needed: no other pass runs meanwhile)."""
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
                    problem = (
                        inputs.too_long_message(line.length)
                        if line.too_long
                        else fold(line.data, str(self.path), line.number, entries, view.channel_ids)
                    )
                    if problem:
                        corrupt.append((line.number, line.data, problem))
            view.entries = list(entries.values())
            view.set_aside = self._set_aside(corrupt) if corrupt else 0
            return view

    def states(self) -> dict[str, StreamState]:
        with _flock(self._lock_path):
            return self._states()

    # -- files ---------------------------------------------------------------------------------

    def _append(self, events: list[dict], doing: str) -> None:
        """Append events, one whole line each, in one write and fsync it; any OS error (ENOSPC, EDQUOT,
        EIO) is a one-line InputError and leaves no part of the lines behind."""
        line = "".join(jsonl_lines([stamped(event) for event in events], self.path))
        try:
            append_durably(self.path, line.encode("utf-8"), "alert outbox")
        except OSError as exc:
            raise InputError(str(self.path), f"cannot {doing}: {exc.strerror or exc}") from None

    def _set_aside(self, corrupt: list[tuple[int, bytes, str]]) -> int:
        """Move the corrupt lines to ``corrupt_path`` and rewrite the outbox without them; how many were
        moved. When the disk refuses, they stay where they are (every read skips them) until a later
        read can move them."""
        at = now()
        records = "".join(
            jsonl_lines(
                (
                    {"line": n, "error": problem, "text": data.decode("utf-8", "replace"), "set_aside_at": at}
                    for n, data, problem in corrupt
                ),
                self.corrupt_path,
            )
        )
        bad = {number for number, _data, _problem in corrupt}
        try:
            append_durably(self.corrupt_path, records.encode("utf-8"), "alert outbox")
            with (
                inputs.open_regular(self.path, "alert outbox") as stream,
                atomic_output(self.path, "alert outbox") as out,
            ):
                for line in inputs.iter_lines(stream):
                    if line.number not in bad and line.data.strip():
                        out.write(line.data + b"\n")
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

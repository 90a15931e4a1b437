"""The alert outbox in one folder: ``outbox.jsonl``, the de-duplication state next to it, their locks;
and :func:`open_outbox`, which opens this or the PostgreSQL outbox by its location.

``outbox.jsonl`` holds the events of ``alerts.events`` (what they are and how they fold), one JSON
object a line, each appended and fsynced under the lock before anything that depends on it happens.

``alert_state.json`` (same folder) remembers, per stream, whether the last evaluation was failing and
with which failures, so the same regression is announced once, a new failure or a new failing index
version is announced again, and a recovery is announced once. The events are appended before the state
is saved, and the last queued event of a call carries the stream's state after it (``stream_state``,
with ``stream``); the state file names, per stream, the last such event it reflects
(``queued_through``). So the queue's answer is what landed: a full disk at the append queues nothing
and changes no state (the alert stays news for the next evaluation); a full disk at the state write,
after the events landed, still reports the alert queued, and the next call takes the stream's state
from that event (the state file does not reflect it), so the same regression is not announced twice.

Several processes on one host may share one outbox (a run, the run-failure sensor, the CLI): every
read-modify-write holds an exclusive ``flock`` on ``.outbox.lock``; a delivery pass holds
``.flush.lock`` so two flushes never post the same alert twice. Processes on several hosts share the
PostgreSQL outbox instead (``alerts.pg_outbox``). Every line is read through ``ragspine_pipeline.inputs``
(bounded length and nesting, strict UTF-8): a line that cannot be read — torn by a crash, nested
thousands deep, a number of thousands of digits, not UTF-8, longer than the line cap — is moved to
``outbox.corrupt.jsonl`` (with its line number and the reason) and counted; it never blocks another
alert. An outbox, state or lock path that is not a regular file (a directory, a FIFO) is a one-line
:class:`~ragspine_pipeline.errors.InputError`, as is a write the disk refuses.

The state, the corrupt lines and the locks live beside the outbox's *resolved* path (symbolic links
followed), and only there: an outbox path that names something other than a regular file (a device such
as ``/dev/zero``, a FIFO, a directory), or a new path whose folder this process cannot write, is a
one-line InputError before anything is created. Reading for a read-only command (``read(read_only=True)``,
:meth:`Outbox.states`) writes nothing at all: no lock file is created (an existing one is taken
shared), no corrupt line is moved (they are counted in ``ReadOnlyView.corrupt``), no state rewritten.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from ragspine_pipeline import inputs
from ragspine_pipeline.alerts.events import (  # ReadOnlyView: also this module's
    AlertOutbox,
    Due,
    Entry,
    OutboxView,
    ReadOnlyView,
    fold,
    queued_event,
    stamped,
)
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.streams import StreamState, now, observed
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import (
    append_durably,
    atomic_output,
    in_system_folder,
    jsonl_lines,
    write_text_atomically,
)

V = TypeVar("V", bound=OutboxView)

DEFAULT_OUTBOX = "var/alerts/outbox.jsonl"
STATE_FILE = "alert_state.json"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
QUEUED_THROUGH = "queued_through"  # in a stream's saved state: the last queued event it reflects
_STATE_MARK = b'"stream_state"'  # what a queued event that carries its stream's state holds

log = logging.getLogger(__name__)


# libpq's keyword form (``host=db port=5432 dbname=evals user=u password=…``): at least two of its keys.
KEYWORD_DSN = re.compile(
    r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|sslmode)\s*=\s*\S.*?"
    r"\s(?:host|hostaddr|port|dbname|user|password|sslmode)\s*=",
    re.IGNORECASE,
)
_PASSWORDS = (
    re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE),  # keyword form
    re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@\[\]]*:)([^\s@/]+)(?=@)", re.IGNORECASE),  # user:password@
)


def without_passwords(text: str) -> str:
    """``text`` with every password of a PostgreSQL location in it (``password=…``, ``//user:…@``)
    replaced by ``***``: what may be shown of a location or of an error quoting one."""
    for pattern in _PASSWORDS:
        text = pattern.sub(lambda m: m.group(1) + "***", text)
    return text


def open_outbox(location: str | Path) -> AlertOutbox:
    """The outbox at ``location``: PostgreSQL for a ``postgresql://`` or ``postgres://`` URI (its
    password from libpq's environment, ``PGPASSWORD`` or ``~/.pgpass``, never from the URI), the JSONL
    file at that path otherwise. Opening connects to nothing; psycopg2 is imported only here, only for
    PostgreSQL."""
    if isinstance(location, str) and location.lower().startswith(POSTGRES_SCHEMES):
        from ragspine_pipeline.alerts.pg_outbox import PostgresOutbox

        return PostgresOutbox(location)
    if isinstance(location, str) and KEYWORD_DSN.search(location):  # never a file name, never shown whole
        raise InputError(
            without_passwords(location),
            "a keyword-form PostgreSQL location: give the outbox as postgresql://user@host:port/database "
            "(the password from PGPASSWORD or ~/.pgpass)",
        )
    return Outbox(location)


class Outbox(AlertOutbox):
    """``outbox.jsonl`` (append-only events), its state file and its lock, in one folder."""

    def __init__(self, path: str | Path = DEFAULT_OUTBOX) -> None:
        self.path = Path(path)
        # Everything the outbox keeps sits beside the file it resolves to, never beside a link to it.
        self._real = Path(os.path.realpath(self.path))
        self.state_path = self._real.with_name(STATE_FILE)
        self.corrupt_path = self._real.with_name(f"{self._real.stem}.corrupt.jsonl")
        self._lock_path = self._real.with_name(".outbox.lock")
        self._flush_lock_path = self._real.with_name(".flush.lock")

    # -- writing -------------------------------------------------------------------------------

    def observe(self, alert: Alert) -> Alert | None:
        """Queue ``alert`` if it is news for its stream; return it, or None (see
        :meth:`AlertOutbox.observe`). A full disk at the append is a one-line InputError: the alert is
        not queued and its stream's state is unchanged. Once the events have landed the alert is queued,
        whatever the state write does: a state that cannot be saved is taken from the last queued event
        by the next call (module docstring)."""
        self._place(writing=True)
        with _flock(self._lock_path):
            states, marks = self._states(repair=True)
            news, state = observed(states.get(alert.stream), alert)
            states[alert.stream] = state
            if news:  # the night's parts in one write: all of them are queued, or none
                events = [queued_event(part) for part in news]
                carried = {"stream": alert.stream, "stream_state": state.model_dump(mode="json")}
                events[-1] = {**events[-1], **carried}
                self._append(events, "queue the alert")
                marks[alert.stream] = news[-1].id
            try:
                self._write_states(states, marks)
            except InputError as exc:
                if not news:
                    raise  # nothing landed: not queued, the state as it was
                log.warning("alert queued, but its stream's state was not saved (%s): the next "
                            "evaluation reads it from the queued event", exc)  # fmt: skip
        return news[0] if news else None

    def _record(self, event: dict, doing: str) -> None:
        self._place(writing=True)
        with _flock(self._lock_path):
            self._append([event], doing)

    @contextmanager
    def delivering(self, due: Due | None = None) -> Iterator[None]:
        """Held for a whole delivery pass: a second flusher waits instead of posting the same alerts.
        Every pending alert is this pass's (``due`` is not needed: no other pass runs meanwhile)."""
        self._place(writing=True)
        with _flock(self._flush_lock_path):
            yield

    # -- reading -------------------------------------------------------------------------------

    def read(self, read_only: bool = False) -> OutboxView:
        """Every alert with its delivery status; corrupt lines are set aside first (and counted). With
        ``read_only`` (a read command) nothing is written: no lock file is created, the corrupt lines
        stay where they are and are only counted (:class:`ReadOnlyView`).

        Raises a one-line InputError when the outbox is not a regular file (a directory, a FIFO).
        """
        exists = self._place(writing=not read_only)
        if read_only:
            if not exists:
                return ReadOnlyView()
            with _shared_flock(self._lock_path):
                view, corrupt = self._fold(ReadOnlyView())
            view.corrupt = len(corrupt)
            return view
        with _flock(self._lock_path):
            if not os.path.lexists(self._real):
                return OutboxView()
            view, corrupt = self._fold(OutboxView())
            view.set_aside = self._set_aside(corrupt) if corrupt else 0
            return view

    def states(self) -> dict[str, StreamState]:
        """The last announced condition of every stream, read only: nothing is created or rewritten (an
        unreadable state file reads as none; a state the disk refused is taken from its queued event)."""
        if not self._place(writing=False) and not os.path.lexists(self.state_path):
            return {}
        with _shared_flock(self._lock_path):
            return self._states(repair=False)[0]

    def _fold(self, view: V) -> tuple[V, list[tuple[int, bytes, str]]]:
        entries: dict[str, Entry] = {}
        corrupt: list[tuple[int, bytes, str]] = []
        with inputs.open_regular(self._real, "alert outbox") as stream:
            for line in inputs.iter_lines(stream):
                problem = (
                    inputs.too_long_message(line.length)
                    if line.too_long
                    else fold(line.data, str(self.path), line.number, entries, view.channel_ids)
                )
                if problem:
                    corrupt.append((line.number, line.data, problem))
        view.entries = list(entries.values())
        return view, corrupt

    def _place(self, writing: bool) -> bool:
        """Whether the outbox exists, after checking its path may be one: a regular file, or (to write)
        a new file in a folder this process can write. Anything else — a device, a FIFO, a directory, a
        folder that is not ours to write — is a one-line InputError, before anything is created."""
        try:
            mode = os.stat(self._real).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise InputError(str(self.path), f"cannot use the alert outbox: {exc.strerror or exc}") from None
        if mode is not None:
            if not stat.S_ISREG(mode):
                raise InputError(
                    str(self.path),
                    f"cannot use the alert outbox: not a regular file ({inputs.file_kind(mode)})",
                )
            return True
        if writing and in_system_folder(self._real):
            raise InputError(
                str(self.path), "cannot create the alert outbox in a system folder (/dev, /proc, /sys)"
            )
        if writing:
            folder = self._real.parent
            while not os.path.lexists(folder) and folder != folder.parent:
                folder = folder.parent
            if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
                raise InputError(
                    str(self.path), f"cannot create the alert outbox: '{folder}' is not a folder this "
                    "process can write",
                )  # fmt: skip
        return False

    # -- files ---------------------------------------------------------------------------------

    def _append(self, events: list[dict], doing: str) -> None:
        """Append events, one whole line each, in one write and fsync it; any OS error (ENOSPC, EDQUOT,
        EIO) is a one-line InputError and leaves no part of the lines behind."""
        line = "".join(jsonl_lines([stamped(event) for event in events], self.path))
        try:
            append_durably(self._real, line.encode("utf-8"), "alert outbox")
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
                inputs.open_regular(self._real, "alert outbox") as stream,
                atomic_output(self._real, "alert outbox") as out,
            ):
                for line in inputs.iter_lines(stream):
                    if line.number not in bad and line.data.strip():
                        out.write(line.data + b"\n")
        except (OSError, InputError):
            return 0
        return len(corrupt)

    def _states(self, repair: bool) -> tuple[dict[str, StreamState], dict[str, str]]:
        """Every stream's state and the last queued event each reflects (``queued_through``), brought up
        to date from the queued events the state file does not reflect (a state write the disk refused).
        With ``repair``, an unreadable state file is moved aside (to ``alert_state.corrupt.json``);
        without it nothing is written and it reads as empty."""
        states: dict[str, StreamState] = {}
        marks: dict[str, str] = {}
        if os.path.lexists(self.state_path):
            inputs.check_regular(self.state_path, "alert state")  # a directory or FIFO: the user's to fix
            try:
                raw = inputs.loads(inputs.read_text(self.state_path, "alert state"), str(self.state_path))
                for stream, state in raw.items():
                    states[stream] = StreamState.model_validate(state)
                    mark = state.get(QUEUED_THROUGH)
                    if isinstance(mark, str):
                        marks[stream] = mark
            except (InputError, ValueError, AttributeError, ValidationError):
                # An unreadable state costs at most one repeat (the queued events rebuild what they carry).
                states, marks = {}, {}
                if repair:
                    try:
                        self.state_path.replace(self.state_path.with_suffix(".corrupt.json"))
                    except OSError as exc:
                        raise InputError(str(self.state_path), f"cannot set aside: {exc.strerror}") from None
        for stream, (alert_id, state) in self._carried_states().items():
            if marks.get(stream) != alert_id:  # queued, but the state file was not saved after it
                states[stream], marks[stream] = state, alert_id
        return states, marks

    def _carried_states(self) -> dict[str, tuple[str, StreamState]]:
        """``{stream: (alert id, state)}`` of the last queued event of each stream that carries its
        stream's state; unreadable lines are skipped (a read sets them aside)."""
        found: dict[str, tuple[str, StreamState]] = {}
        if not os.path.lexists(self._real):
            return found
        with inputs.open_regular(self._real, "alert outbox") as stream:
            for line in inputs.iter_lines(stream):
                if line.too_long or _STATE_MARK not in line.data:
                    continue
                try:
                    event = inputs.loads(line.data, str(self.path), line.number)
                    alert = event["alert"]
                    if event.get("event") == "queued" and isinstance(event.get("stream"), str):
                        state = StreamState.model_validate(event["stream_state"])
                        found[event["stream"]] = (str(alert["id"]), state)
                except (InputError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
                    continue
        return found

    def _write_states(self, states: dict[str, StreamState], marks: dict[str, str]) -> None:
        data = {}
        for stream, state in sorted(states.items()):
            data[stream] = state.model_dump(mode="json")
            if stream in marks:
                data[stream][QUEUED_THROUGH] = marks[stream]
        try:
            write_text_atomically(self.state_path, json.dumps(data, indent=2) + "\n", "alert state")
        except OSError as exc:
            raise InputError(
                str(self.state_path), f"cannot write the alert state: {exc.strerror or exc}"
            ) from None


@contextmanager
def _shared_flock(path: Path) -> Iterator[None]:
    """A shared lock on ``path`` when it exists, for a read that writes nothing: a missing lock file is
    not created (no writer has used this outbox yet, or the folder is not ours)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        fd = None
    except OSError as exc:
        raise InputError(str(path), f"cannot lock the alert outbox: {exc.strerror or exc}") from None
    try:
        if fd is not None:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                kind = inputs.file_kind(os.fstat(fd).st_mode)
                raise InputError(str(path), f"cannot lock the alert outbox: not a regular file ({kind})")
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)


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

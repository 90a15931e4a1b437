"""The alert outbox in PostgreSQL, for a deployment whose steps run on several hosts.

The same events as ``outbox.jsonl`` (``alerts.events``: each row holds what a line of the file holds),
folded by the same code, with the same de-duplication; what PostgreSQL adds is how processes on
different hosts share one outbox. Its tables are created on first use (``CREATE TABLE IF NOT EXISTS``
under a transaction-level advisory lock, so two processes creating them at once do not race):

* ``ragspine_alert_events`` (``id`` bigserial, ``event`` json): the append-only event log, read in ``id``
  order. An event about an alert is written only after the alert's earlier events have committed, so
  each alert's events are in the order they happened.
* ``ragspine_alert_batches`` (``batch`` primary key, ``queued_at``): one row per unit of delivery — one
  run's alerts, or one alert without a run (``events.batch_key``: what one Slack message carries) —
  written in the transaction that queues the batch's first alert. A delivery pass claims a batch by
  locking its row.
* ``ragspine_alert_state`` (``stream`` primary key, ``state`` json, ``updated_at``): each stream's last
  announced condition (``streams.StreamState``; NULL until the stream's first evaluation commits). A
  state that cannot be read costs at most one repeated message.
* ``ragspine_alert_corrupt`` (``event_id``, ``event``, ``error``, ``set_aside_at``): events the fold
  cannot read, moved out of the log with the reason, as ``outbox.corrupt.jsonl`` is for the file.

**Observing** locks the stream's state row (inserted if missing, then ``SELECT … FOR UPDATE``), so two
evaluations of one stream, on any hosts, take turns and the second sees what the first announced. The
news decision's ``queued`` event, the batch row and the new state commit in one transaction: on a
database error (one line, :class:`~ragspine_pipeline.errors.InputError`) the alert is not queued and the
state is unchanged.

**Delivering** claims batches. :meth:`PostgresOutbox.delivering` opens a transaction on a connection of
its own and locks the rows of the batches with pending alerts (those ``due`` accepts) with
``SELECT … FOR UPDATE SKIP LOCKED``: a batch another pass holds is skipped, never waited for, and one
run's alerts are never split between two passes. Until the pass ends, :meth:`PostgresOutbox.read` shows
as pending only the alerts of the batches it claimed. The events the pass writes (``sending``,
``delivered``, ``failed``, ``expired``) commit at once on a second, autocommit connection — ``sending``
before the post, as the delivery protocol needs — so they are durable before the claim ends and the
next pass to claim the batch reads them. After a ``sending`` commits, the claim is checked to be still
held before the post goes out: a pass that lost its claim connection does not post. The claim ends with
the pass. A pass killed outright (SIGKILL) loses its connections, PostgreSQL ends its transaction and
the batches are free again; the next pass finds the unanswered attempt and confirms it through Slack's
history exactly as with the file outbox. The claim session asks the server for TCP keepalives, so the
batches of a host that vanished without closing its connection are free again within about two minutes.

The location is a libpq URI (``postgresql://user@host:port/database?sslmode=…``, or ``postgres://``). The
password comes from libpq's environment (``PGPASSWORD``, ``~/.pgpass``): a location holding one is
refused, so that the location can be shown in logs, metadata and the UI. psycopg2 (the ``deploy``
extra) is imported when a PostgreSQL outbox is made, never by the file outbox.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TypeVar
from urllib.parse import urlsplit

from ragspine_pipeline import inputs
from ragspine_pipeline.alerts.events import (
    AlertOutbox,
    Due,
    Entry,
    OutboxView,
    ReadOnlyView,
    batch_key,
    batches,
    dumps,
    fold,
    queued_event,
    stamped,
)
from ragspine_pipeline.alerts.model import Alert
from ragspine_pipeline.alerts.streams import StreamState, observed
from ragspine_pipeline.errors import InputError

V = TypeVar("V", bound=OutboxView)

TABLES = ("ragspine_alert_events", "ragspine_alert_batches", "ragspine_alert_state", "ragspine_alert_corrupt")
SCHEMA = """
CREATE TABLE IF NOT EXISTS ragspine_alert_events (
    id bigserial PRIMARY KEY,
    event json NOT NULL
);
CREATE TABLE IF NOT EXISTS ragspine_alert_batches (
    batch text PRIMARY KEY,
    queued_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ragspine_alert_state (
    stream text PRIMARY KEY,
    state json,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ragspine_alert_corrupt (
    event_id bigint PRIMARY KEY,
    event text NOT NULL,
    error text NOT NULL,
    set_aside_at timestamptz NOT NULL DEFAULT now()
);
"""
SCHEMA_LOCK = 0x7261677370696E65  # "ragspine" in ASCII: the advisory lock held while creating the tables
INSERT_EVENT = "INSERT INTO ragspine_alert_events (event) VALUES (%s)"
CLAIM = "SELECT batch FROM ragspine_alert_batches WHERE batch = ANY(%s::text[]) FOR UPDATE SKIP LOCKED"
SET_ASIDE = """
WITH moved AS (DELETE FROM ragspine_alert_events WHERE id = %s RETURNING id)
INSERT INTO ragspine_alert_corrupt (event_id, event, error) SELECT id, %s, %s FROM moved
"""
# The server probes an idle claim connection after 60 s and drops it after 6 unanswered probes 10 s
# apart: a vanished host's claims are released then, instead of after the kernel default of 2 hours.
KEEPALIVES = "SET tcp_keepalives_idle = 60; SET tcp_keepalives_interval = 10; SET tcp_keepalives_count = 6"
CONNECT_DEFAULTS = {"connect_timeout": "10", "application_name": "ragspine-alerts"}


class PostgresOutbox(AlertOutbox):
    """The outbox in the PostgreSQL database at ``location`` (a libpq URI without a password).

    Making one connects to nothing; the first use connects (and creates the tables if needed). ``path``
    is the location as it may be shown: scheme, user, host, port and database. Every database error
    is a one-line InputError naming ``path``. One object belongs to one process: make it after a fork.
    """

    def __init__(self, location: str) -> None:
        self.path = display(location)
        self.corrupt_path = f"{self.path} (table ragspine_alert_corrupt)"
        self._pg = _driver(self.path)
        params = _parameters(location, self.path, self._pg)
        self._location = location
        self._defaults = {key: value for key, value in CONNECT_DEFAULTS.items() if key not in params}
        self._conn = None  # autocommit: observing, reading, and every event a pass writes
        self._claims = None  # inside delivering(): the connection whose transaction holds the claims
        self._claimed: set[str] | None = None  # inside delivering(): the batches this pass holds

    # -- writing -------------------------------------------------------------------------------

    def observe(self, alert: Alert) -> Alert | None:
        """Queue ``alert`` if it is news for its stream; return it, or None (see
        :meth:`AlertOutbox.observe`). Evaluations of one stream take turns on its state row; a database
        error is a one-line InputError, and then nothing of this call is kept."""
        with self._transaction("queue the alert") as cur:
            cur.execute(
                "INSERT INTO ragspine_alert_state (stream) VALUES (%s) ON CONFLICT DO NOTHING",
                (alert.stream,),
            )
            cur.execute(
                "SELECT state::text FROM ragspine_alert_state WHERE stream = %s FOR UPDATE", (alert.stream,)
            )
            news, state = observed(self._state(cur.fetchone()[0]), alert)
            for part in news:  # a night's parts share its run, so its batch
                batch = (batch_key(part),)
                cur.execute(
                    "INSERT INTO ragspine_alert_batches (batch) VALUES (%s) ON CONFLICT DO NOTHING", batch
                )
                cur.execute(INSERT_EVENT, (dumps(stamped(queued_event(part)), ascii_only=True),))
            cur.execute(
                "UPDATE ragspine_alert_state SET state = %s, updated_at = now() WHERE stream = %s",
                (dumps(state.model_dump(mode="json"), ascii_only=True), alert.stream),
            )
        return news[0] if news else None

    def record_sending(self, ids: Sequence[str], target: str, thread_ts: str | None = None) -> None:
        """Persist the attempt, then make sure this pass still holds its claim: a pass whose claim
        connection dropped may have lost its batches to another pass, which reads this attempt (it
        committed first) and confirms it instead of posting; this pass must not post either."""
        super().record_sending(ids, target, thread_ts)
        if self._claims is not None:
            try:
                with self._claims.cursor() as cur:
                    cur.execute("SELECT 1")
            except self._pg.Error as exc:
                raise self._failed("keep the claim on the alerts to post", exc) from None

    def _record(self, event: dict, doing: str) -> None:
        self._execute(doing, INSERT_EVENT, (dumps(stamped(event), ascii_only=True),))

    @contextmanager
    def delivering(self, due: Due | None = None) -> Iterator[None]:
        """Claim, for the block, the batches with pending alerts that ``due`` accepts (None: all) and
        that no other pass holds; :meth:`read` then shows as pending only theirs. Released when the
        block ends, or when the process dies."""
        if self._claimed is not None:
            raise RuntimeError(f"{self.path}: a delivery pass is already running on this outbox object")
        pending = batches(self._load(set_aside=False).pending)
        wanted = sorted(key for key, batch in pending.items() if due is None or due(batch))
        try:
            self._claimed = self._claim(wanted) if wanted else set()
            yield
        finally:
            self._claimed = None
            if self._claims is not None:
                # End the claim transaction and wait for it: PostgreSQL releases the row locks before the
                # rollback returns. Closing alone only asks the server to end the session, and a pass that
                # starts at once could still find the batches held (and skip them).
                with suppress(self._pg.Error):
                    self._claims.rollback()
                self._claims.close()
                self._claims = None

    def _claim(self, wanted: list[str]) -> set[str]:
        self._claims = self._connect("claim alerts to deliver")
        try:
            with self._claims.cursor() as cur:
                cur.execute(KEEPALIVES)
                cur.execute(CLAIM, (wanted,))
                return {row[0] for row in cur.fetchall()}
        except self._pg.Error as exc:
            raise self._failed("claim alerts to deliver", exc) from None

    # -- reading -------------------------------------------------------------------------------

    def read(self, read_only: bool = False) -> OutboxView:
        """Every alert with its delivery status (unreadable events set aside first, and counted); inside
        :meth:`delivering`, the pending alerts of the batches this pass claimed and no others. With
        ``read_only`` (a read command) no event is moved: the unreadable ones are only counted
        (``ReadOnlyView.corrupt``)."""
        if read_only:
            view, corrupt = self._fold(ReadOnlyView())
            view.corrupt = len(corrupt)
            return view
        view = self._load(set_aside=True)
        if self._claimed is not None:
            claimed = self._claimed
            view.entries = [e for e in view.entries if not e.pending or batch_key(e.alert) in claimed]
        return view

    def states(self) -> dict[str, StreamState]:
        rows = self._execute(
            "read the alert state",
            "SELECT stream, state::text FROM ragspine_alert_state WHERE state IS NOT NULL ORDER BY stream",
        )
        return {stream: state for stream, text in rows if (state := self._state(text)) is not None}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _load(self, set_aside: bool) -> OutboxView:
        """The whole log folded; with ``set_aside``, unreadable events are moved aside and counted."""
        view, corrupt = self._fold(OutboxView())
        if corrupt and set_aside:
            view.set_aside = self._set_aside(corrupt)
        return view

    def _fold(self, view: V) -> tuple[V, list[tuple[int, str, str]]]:
        """The whole log folded into ``view``, and the events the fold cannot read."""
        rows = self._execute(
            "read the alert outbox", "SELECT id, event::text FROM ragspine_alert_events ORDER BY id"
        )
        corrupt: list[tuple[int, str, str]] = []
        entries: dict[str, Entry] = {}
        for number, text in rows:
            problem = fold(text, self.path, number, entries, view.channel_ids)
            if problem:
                corrupt.append((number, text, problem))
        view.entries = list(entries.values())
        return view, corrupt

    def _set_aside(self, corrupt: list[tuple[int, str, str]]) -> int:
        """Move unreadable events to ``ragspine_alert_corrupt`` with their reason; how many this call
        moved (a reader at the same time may move some first). When the database refuses, they stay
        where they are (every read skips them) until a later read can move them."""
        try:
            with self._transaction("set aside unreadable events") as cur:
                moved = 0
                for number, text, problem in corrupt:
                    cur.execute(SET_ASIDE, (number, text[: inputs.KEEP_BYTES], problem))
                    moved += cur.rowcount
        except InputError:
            return 0
        return moved

    def _state(self, text: str | None) -> StreamState | None:
        """A stored state; None when there is none, or when it cannot be read: that costs at most one
        repeated message, and must not stop alerting."""
        if text is None:
            return None
        try:
            return StreamState.model_validate(inputs.loads(text, self.path))
        except (InputError, ValueError):
            return None

    # -- the database --------------------------------------------------------------------------

    def _connection(self, doing: str):
        """The autocommit connection, connected (and the tables created) on first use, and again after
        it was lost."""
        if self._conn is not None and self._conn.closed:
            self._conn = None
        if self._conn is None:
            conn = self._connect(doing)
            conn.autocommit = True
            try:
                _create_tables(conn)
            except self._pg.Error as exc:
                conn.close()
                raise self._failed(doing, exc) from None
            self._conn = conn
        return self._conn

    def _connect(self, doing: str):
        try:
            return self._pg.connect(self._location, **self._defaults)
        except self._pg.Error as exc:
            raise self._failed(doing, exc) from None

    def _execute(self, doing: str, sql: str, args: tuple = ()) -> list[tuple]:
        """One statement, committed when it returns; its rows, if it has any."""
        conn = self._connection(doing)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description is not None else []
        except self._pg.Error as exc:
            raise self._failed(doing, exc) from None

    @contextmanager
    def _transaction(self, doing: str) -> Iterator:
        """A cursor in one transaction, committed when the block ends and rolled back when it raises."""
        conn = self._connection(doing)
        try:
            with conn, conn.cursor() as cur:
                yield cur
        except self._pg.Error as exc:
            raise self._failed(doing, exc) from None

    def _failed(self, doing: str, exc: Exception) -> InputError:
        """A database error as one line: its first line only (a DETAIL line can quote the row, that is
        the alert's text), never the password (libpq never says it; the location holds none)."""
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        if "password" in reason.lower():
            reason += " (the password comes from PGPASSWORD or ~/.pgpass)"
        return InputError(self.path, f"cannot {doing}: {reason[:300]}")


def display(location: str) -> str:
    """``location`` as it may be shown: scheme, user, host, port and database — never a password, nor
    the query (a parameter there may be one)."""
    try:
        parts = urlsplit(location)
    except ValueError:  # an unbalanced IPv6 bracket
        return location.partition("://")[0] + "://…"
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return f"{parts.scheme}://{user}{at}{hosts}{parts.path}"


def _parameters(location: str, shown: str, pg) -> dict[str, str]:
    """libpq's reading of ``location``; one line when it is not a URI libpq takes or holds a password."""
    try:
        params = pg.extensions.parse_dsn(location)
    except pg.Error:  # its message may quote the location: say it without
        raise InputError(shown, "not a PostgreSQL URI (postgresql://user@host:port/database)") from None
    if params.get("password"):
        raise InputError(
            shown,
            "the location holds a password; leave it out (the location is shown in logs and metadata) "
            "and set PGPASSWORD or ~/.pgpass",
        )
    return params


def _create_tables(conn) -> None:
    """Create the tables that are missing; a role without CREATE can use tables made for it."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM unnest(%s) AS t(name) WHERE to_regclass(name) IS NULL", (list(TABLES),)
        )
        if cur.fetchone()[0] == 0:
            return
    with conn, conn.cursor() as cur:  # the advisory lock lasts until this transaction ends
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        cur.execute(SCHEMA)


def _driver(shown: str):
    """psycopg2, imported now: only a PostgreSQL outbox needs it."""
    try:
        import psycopg2
        import psycopg2.extensions
    except ImportError:
        raise InputError(
            shown, "psycopg2 is not installed: pip install 'ragspine-pipeline[deploy]'"
        ) from None
    return psycopg2

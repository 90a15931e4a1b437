"""The deployed instances' PostgreSQL storage: Dagster's own (``dagster_postgres``), plus a check of a
pooled connection before the webserver uses it.

The webserver keeps one PostgreSQL connection open per storage (Dagster's ``optimize_for_webserver``:
a pool of one, recycled hourly) and never tests it before use. After the database restarted, or
was unreachable long enough for its connections to be closed, that pooled connection is dead: the
webserver's next request (opening the runs page, launching a run) fails with "server closed the
connection unexpectedly", and only the one after it works. Here every connection the webserver takes
from its pool is tested first with ``SELECT 1``; a dead one is discarded and a new one opened
(SQLAlchemy's pessimistic disconnect handling: a checkout listener raising ``DisconnectionError``), so
the first request after the outage works. The daemon, the code servers and the runs hold no pool
(Dagster opens a connection per use there), so they need no check.

Use it in ``dagster.yaml`` in place of ``storage: postgres``, with the same settings::

    storage:
      custom:
        module: ragspine_pipeline.defs.instance_storage
        class: PostgresStorage
        config:
          postgres_db: {hostname: ..., port: ..., db_name: ..., username: ..., password: ...}
"""

from __future__ import annotations

import threading

from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy import event, exc, pool

_listening = threading.Lock()


class PostgresStorage(DagsterPostgresStorage):
    """``DagsterPostgresStorage`` whose pooled connections (the webserver's) are tested before each use."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> PostgresStorage:
        # Dagster's builds its own class by name; the same settings, read the same way, build this one.
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Dagster's webserver replaces each storage's engine by a pooled one after the instance is
        # built (DagsterInstance.optimize_for_webserver, storage by storage): the check is set on the
        # pool class now, for every pool made in this process. Elsewhere Dagster holds no pool.
        check_pooled_connections()


def check_pooled_connections() -> None:
    """From now on, in this process, test each connection taken from a SQLAlchemy ``QueuePool`` (the
    webserver's pools) before it is used; a dead one is replaced. Idempotent."""
    with _listening:
        if not event.contains(pool.QueuePool, "checkout", _ping):
            event.listen(pool.QueuePool, "checkout", _ping)


def _ping(dbapi_connection, connection_record, connection_proxy) -> None:
    """A checkout listener: ``SELECT 1`` on the pooled connection; when that fails the pool discards it
    and checks out a new connection (SQLAlchemy retries a ``DisconnectionError`` up to three times)."""
    try:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SELECT 1")
        finally:
            cursor.close()
    except Exception as error:  # the driver's own error for a closed connection: psycopg2's, or another's
        raise exc.DisconnectionError(f"a pooled database connection was dead: {error}") from error

"""Fixtures of the alert tests: a stateful Slack on loopback (``tests.alerts.slack_server``), and an
empty outbox of each kind."""

from __future__ import annotations

import pytest

from ragspine_pipeline.alerts.outbox import Outbox, open_outbox
from tests.alerts.slack_server import SlackServer
from tests.conftest import pg_location


@pytest.fixture
def slack():
    server = SlackServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["file", pytest.param("postgresql", marks=pytest.mark.system)])
def outbox(request, tmp_path):
    """An empty outbox: the JSONL file, then PostgreSQL in a fresh database (skipped, with the reason,
    without psycopg2 or a PostgreSQL on loopback)."""
    if request.param == "file":
        yield Outbox(tmp_path / "outbox.jsonl")
        return
    with open_outbox(pg_location(request.getfixturevalue("database"))) as shared:
        yield shared

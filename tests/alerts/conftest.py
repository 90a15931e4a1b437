"""Fixtures of the alert tests: a stateful Slack on loopback (``tests.alerts.slack_server``)."""

from __future__ import annotations

import pytest

from tests.alerts.slack_server import SlackServer


@pytest.fixture
def slack():
    server = SlackServer().start()
    yield server
    server.stop()

"""The deployed instances' storage class: a webserver's pooled PostgreSQL connection that died with a
database restart is replaced before use, so the first request after the outage works — and with
Dagster's plain ``storage: postgres`` that first request fails (what the class is for). Each instance
lives in its own process, as a webserver's does: the check is set on SQLAlchemy's pool class, for
the whole process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import PG
from tests.relay import TcpRelay

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
NO_POSTGRES = "dagster-postgres is not installed (pip install -e '.[deploy]')"

# What the webserver does with its instance (dagster_webserver/cli.py), then a request before the
# database goes, and one after it is back.
WEBSERVER = """
import json, sys
import dagster as dg
instance = dg.DagsterInstance.get()
instance.optimize_for_webserver(statement_timeout=5000, pool_recycle=3600, max_overflow=20)
instance.get_runs(limit=1)
print("pooled", flush=True)
sys.stdin.readline()  # the database went away and came back meanwhile
try:
    instance.get_runs(limit=1)
    print(json.dumps("answered"))
except Exception as error:
    print(json.dumps(f"{type(error).__name__}: {error}"[:300]))
"""


def first_request_after_an_outage(storage: dict, home: Path, database: str, relay: TcpRelay) -> str:
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump({"telemetry": {"enabled": False}, "storage": storage}))
    env = {
        "PATH": "/usr/bin:/bin",
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(relay.port),
        "DAGSTER_PG_DB": database,
        "DAGSTER_PG_USER": PG["user"],
        "DAGSTER_PG_PASSWORD": "",
    }
    webserver = subprocess.Popen(
        [sys.executable, "-c", WEBSERVER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert webserver.stdout.readline() == "pooled\n"
        relay.cut()
        relay.restore()
        out, _ = webserver.communicate("\n", timeout=120)
    finally:
        if webserver.poll() is None:
            webserver.kill()
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.system  # a real PostgreSQL, behind a relay that is cut
def test_the_webservers_first_request_after_a_database_restart_works(tmp_path, database):
    pytest.importorskip("dagster_postgres", reason=NO_POSTGRES)
    shipped = yaml.safe_load(SHIPPED.read_text())["storage"]
    assert shipped["custom"]["class"] == "PostgresStorage"
    plain = {"postgres": shipped["custom"]["config"]}  # Dagster's own class, the same settings
    with TcpRelay((PG["host"], PG["port"])) as relay:
        before = first_request_after_an_outage(plain, tmp_path / "plain", database, relay)
        after = first_request_after_an_outage(shipped, tmp_path / "shipped", database, relay)
    assert "server closed the connection unexpectedly" in before  # what the shipped class is for
    assert after == "answered"

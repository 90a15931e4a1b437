"""Real endpoints on loopback shared by the tests: S3 (moto), a scriptable HTTP server, a closed port,
a fresh database on the local PostgreSQL. And the two layers of the suite: the ``system`` marker (what
`make test-fast` leaves out) and the Hypothesis profiles (``quick`` for `make test-fast`, ``ci`` for
`make test`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import settings

# The tests' demos are written for fixed dates in 2026 (TODAY = 2026-11-22 and others); the daily
# partitions must offer those days whatever today and the developer's var/demo are. Set before any test
# module imports the code location (the partitions are built when it loads).
os.environ.setdefault("RAGSPINE_PARTITIONS_START", "2026-01-01")
# A step that fails is retried (defs/retries.py) after 15 s and more; tests of failing runs need not wait.
os.environ.setdefault("RAGSPINE_STEP_RETRY_DELAY_S", "0")

from ragspine_pipeline.sources.s3 import s3_client
from tests.loopback import LoopbackServer

# Hypothesis profiles, chosen by HYPOTHESIS_PROFILE (the Makefile sets it; `ci` when unset). Every
# property in the suite states its own max_examples: `deep` (`make test-deep`) runs them all; `ci`
# (`make test`, .ci/run) at most 100 of each, `quick` (`make test-fast`, a developer's minute) at most
# 10. An explicit @settings outranks any profile, so pytest_collection_modifyitems lowers it per test.
# No profile has a deadline: a property's speed on a loaded machine is not what it tests (each already
# says deadline=None).
MOST_EXAMPLES = {"quick": 10, "ci": 100, "deep": None}
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.register_profile("deep", deadline=None, print_blob=True)
for _name, _most in MOST_EXAMPLES.items():
    if _most is not None:
        settings.register_profile(_name, settings.get_profile("deep"), max_examples=_most)
settings.load_profile(PROFILE)


@pytest.hookimpl(tryfirst=True)  # before -m selects: the marks below must be there when it does
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # A test on the loopback PostgreSQL is a system test, whatever module it is in.
        if "database" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.system)
        if MOST_EXAMPLES.get(PROFILE) is not None:
            _at_most(getattr(item, "function", None), MOST_EXAMPLES[PROFILE])
    # The system tests first, each layer in its own order: the daemons, servers and whole runs of one to
    # three minutes each start while there is short work left to fill the other workers beside them; last,
    # the longest of them would finish alone (`make test` hands out whole files in this order).
    items.sort(key=lambda item: item.get_closest_marker("system") is None)


def _at_most(test, examples: int) -> None:
    """Cap the test's own @settings at ``examples``. Hypothesis keeps a test's settings on the function it
    returns; without that attribute (another Hypothesis), nothing changes."""
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if getattr(test, "is_hypothesis_test", False) and own is not None and own.max_examples > examples:
        test._hypothesis_internal_use_settings = settings(own, max_examples=examples)


# The loopback PostgreSQL the deployment tests use: user postgres, trust authentication.
PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def pg_instance_env(database: str) -> dict[str, str]:
    """What a deployed ``dagster.yaml`` reads for its PostgreSQL storage, for ``database`` on loopback
    (trust authentication: the password set, and empty; unset, the instance would not load)."""
    return {
        "DAGSTER_PG_HOST": PG["host"],
        "DAGSTER_PG_PORT": str(PG["port"]),
        "DAGSTER_PG_USER": PG["user"],
        "DAGSTER_PG_PASSWORD": "",
        "DAGSTER_PG_DB": database,
    }


def wait_until(condition, what: str, timeout: float, process=None, interval: float = 0.25):
    """``condition()``'s first truthy value, polled every ``interval`` s until ``timeout`` × the
    machine's load (:func:`load_factor`); fails if ``process`` (a ``subprocess.Popen`` the condition
    depends on: a daemon, a runner) exits first, with its output when it was captured."""
    deadline = time.monotonic() + timeout * load_factor()
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            output = process.communicate()[0] if process.stdout is not None else ""
            raise AssertionError(f"the process exited (code {process.returncode}) before {what}: {output}")
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout * load_factor():.0f} s")


def stop_group(process: subprocess.Popen, timeout: float = 60) -> None:
    """A test's teardown of a process it started in a session of its own (a daemon and the servers and
    runs it started): SIGTERM to the group, then SIGKILL when it has not exited within ``timeout`` × the
    machine's load (:func:`load_factor`). Whatever the test asserted stands; a slow exit on a loaded
    machine is not a failure, and nothing is left running."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout * load_factor())
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:  # gone between the poll and the signal
        process.wait()


# Fake credentials: the tests check that the secret never shows up in an error message.
SECRET_KEY = "fake-secret-d41d8cd98f00b204"
ACCESS_KEY = "fake-access-key"


def load_factor() -> float:
    """How oversubscribed this machine's CPUs are now: the last minute's load average per CPU, at least 1.

    A system test that asserts promptness (gone within N seconds) allows N times this: the same bound on
    a quiet machine, and room for the other copy of the suite, or another project's, running beside it."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


@pytest.fixture(autouse=True, scope="session")
def no_real_dagster_home(tmp_path_factory):
    """A developer's Dagster instance never reaches a test (the Makefile exports DAGSTER_HOME as the
    checkout's var/dagster): the session has an empty one of its own; tests that need one set theirs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster-home")))
        yield


@pytest.fixture(autouse=True)
def no_real_slack(monkeypatch):
    """A developer's own Slack settings never reach a test: tests that post set their fake server."""
    for name in ("SLACK_BOT_TOKEN", "SLACK_CHANNEL", "SLACK_API_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_real_judge(monkeypatch):
    """A developer's own judge endpoint never reaches a test: judging is off unless a test sets it."""
    for name in ("RAGSPINE_JUDGE_BASE_URL", "RAGSPINE_JUDGE_MODEL", "RAGSPINE_JUDGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_real_cache(monkeypatch, tmp_path_factory):
    """A developer's own cache never reaches a test (``ragspine-eval judge`` keeps judgments under
    $XDG_CACHE_HOME by default): every test starts with an empty one of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def _writes_one_at_a_time(app):
    """A WSGI wrapper that lets one write request (PUT, POST, DELETE) through at a time.

    Real S3 evaluates a conditional write (``If-Match``, ``If-None-Match: *``) atomically with the write.
    moto checks the condition, then stores the object, in the request's thread: two concurrent writes
    with the same ETag can both pass the check (seen as 198 of 200 increments under load). Serialising
    writes gives moto S3's guarantee; reads still run concurrently."""
    lock = threading.Lock()

    def serve(environ, start_response):
        if environ.get("REQUEST_METHOD") not in ("PUT", "POST", "DELETE"):
            return app(environ, start_response)
        with lock:
            return list(app(environ, start_response))  # the body is produced inside the lock

    return serve


@pytest.fixture(scope="session")
def moto_endpoint():
    """One moto S3 server for the session, on a free loopback port; each test uses its own bucket.
    Conditional writes are atomic, as on S3 (:func:`_writes_one_at_a_time`)."""
    import moto.server  # imported here: moto is slow to import, most tests skip it
    from werkzeug.serving import make_server

    class AtomicWritesMotoServer(moto.server.ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = moto.server.DomainDispatcherApplication(moto.server.create_backend_app)
            self._server = make_server(
                self._ip_address,
                self._port,
                _writes_one_at_a_time(app),
                True,
                request_handler=moto.server.MotoRequestHandler,
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    server = AtomicWritesMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """Fake credentials in the environment, and nothing else botocore could pick up from the machine."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3_endpoint(moto_endpoint, aws_env):
    return moto_endpoint


@pytest.fixture
def bucket(s3_endpoint):
    """A fresh, empty bucket on the moto server: ``(name, client)``."""
    client = s3_client(endpoint_url=s3_endpoint)
    name = f"test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name, client


def put_many(bucket: str, keys: list[str], body: bytes) -> None:
    """Store many objects at once, straight into the in-process moto backend.

    Test setup only (a thousand signed PUTs cost seconds); everything under test still goes over HTTP.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for key in keys:
        backend.put_object(bucket, key, body)


def pg_location(database: str) -> str:
    """The URI of a database on the loopback PostgreSQL."""
    return f"postgresql://{PG['user']}@{PG['host']}:{PG['port']}/{database}"


@pytest.fixture
def database():
    """A fresh database on the loopback PostgreSQL (trust authentication), dropped afterwards; the test
    is skipped, with the reason, when psycopg2 is not installed or PostgreSQL is not reachable there."""
    missing = "psycopg2 is not installed (pip install -e '.[deploy]')"
    psycopg2 = pytest.importorskip("psycopg2", reason=missing)
    try:
        admin = psycopg2.connect(dbname="postgres", connect_timeout=3, **PG)
    except psycopg2.OperationalError as exc:
        reason = " ".join(str(exc).split())
        pytest.skip(f"PostgreSQL is not reachable on {PG['host']}:{PG['port']} as {PG['user']}: {reason}")
    admin.autocommit = True
    name = f"ragspine_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with admin.cursor() as cursor:
            stop = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
            cursor.execute(stop, (name,))
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.close()


@pytest.fixture
def pg_role(database):
    """A login role on the loopback PostgreSQL that is not a superuser and may not create databases, as a
    deployment's `dagster` user is; dropped afterwards with what it made in ``database``."""
    import psycopg2

    name = f"ragspine_role_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres", connect_timeout=3, **PG)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
    try:
        yield name
    finally:
        give_database(database, PG["user"])
        inside = psycopg2.connect(dbname=database, connect_timeout=3, **PG)
        inside.autocommit = True
        with inside.cursor() as cursor:  # the tables the role made
            cursor.execute(f'REASSIGN OWNED BY "{name}" TO "{PG["user"]}"')
            cursor.execute(f'DROP OWNED BY "{name}"')
        inside.close()
        with admin.cursor() as cursor:
            cursor.execute(f'DROP ROLE IF EXISTS "{name}"')
        admin.close()


def give_database(database: str, role: str) -> None:
    """Make ``role`` the owner of ``database`` (what `createdb --owner role` does at creation)."""
    import psycopg2

    admin = psycopg2.connect(dbname="postgres", connect_timeout=3, **PG)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{database}" OWNER TO "{role}"')
    admin.close()


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return port


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict | list = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (a client timeout test)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


class ScriptedServer(LoopbackServer):
    """A loopback HTTP server answering from a queue of :class:`Reply` and recording every request it
    received. Once the queue is empty it answers with ``default(request)`` (500 without one)."""

    def __init__(self, default: Callable[[Recorded], Reply] | None = None) -> None:
        self.default = default
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        return self.origin

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def _next(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.popleft()
        return self.default(request) if self.default else Reply(500, b"script exhausted")

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = server._next(Recorded("POST", self.path, dict(self.headers), body))
                time.sleep(reply.delay)
                payload = reply.body
                if isinstance(payload, dict | list):
                    payload = json.dumps(payload)
                if isinstance(payload, str):
                    payload = payload.encode("utf-8")
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args) -> None:  # keep the test output clean
                pass

        return Handler


class FakeSlack(ScriptedServer):
    """A Slack Web API stand-in: ``chat.postMessage`` answers ``ok`` with a fresh ``ts`` unless a
    scripted reply (429 with Retry-After, 500, an ``ok: false`` payload) is queued first."""

    def __init__(self) -> None:
        super().__init__(default=self._ok)

    def _ok(self, request: Recorded) -> Reply:
        return Reply(200, {"ok": True, "channel": "C0ALERTS", "ts": f"{len(self.requests)}.000100"})

    @property
    def posts(self) -> list[dict]:
        """The JSON bodies of every ``chat.postMessage`` call received (retries included)."""
        return [r.json() for r in self.requests if r.path.endswith("/chat.postMessage")]


@pytest.fixture
def fake_slack():
    server = FakeSlack()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def quick_slack_retries(monkeypatch):
    """Slack's retries of a server error or an unsent request wait 10 ms instead of 0.5-3 s, for tests
    whose subject is what is retried and what is kept, not how long the waits are."""
    from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator

    from ragspine_pipeline.alerts import slack_budget

    monkeypatch.setattr(slack_budget, "backoff", lambda: FixedValueRetryIntervalCalculator(0.01))


@pytest.fixture
def http_server():
    server = ScriptedServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fsynced(monkeypatch) -> list[os.stat_result]:
    """What every ``os.fsync`` call synced (its descriptor's stat), the real fsync still run."""
    synced: list[os.stat_result] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced

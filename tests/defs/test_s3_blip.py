"""S3 down for 20 s in the middle of a run: the run succeeds through the steps' retry policy.

A re-evaluation keeps every value between steps, its reports and its work files in S3 (a moto server
of this test's own, on loopback), its instance on PostgreSQL. Once its first step has stored its value,
the moto process is killed (SIGKILL) and listens again on the same port 20 s later. The steps that
needed S3 meanwhile fail (the connection is refused) and are retried by the shipped policy
(``defs/retries.py``: 2 retries, exponential back-off with jitter, base 15 s), whose waits outlast the
outage: the run succeeds and decides ``ship``.

Why a restart of moto, and how its data survives it: a paused process (SIGSTOP) would not model an
outage — the kernel still accepts connections for it and each request just takes 20 s longer, so
nothing is retried. A stopped moto refuses connections, as an unreachable S3 does, but forgets every
object, which S3 does not. So this test's moto appends every write it accepted to a file, and a new
process replays them into itself before it listens: the bucket is as it was when the process died,
and no request reaches the port before it is. (moto's own recorder keeps no body of a chunked upload,
which is how Arrow's S3 client sends every object it writes; re-seeding only the test's own objects
would lose what the run wrote before the outage.)
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import dagster as dg
import pytest

from ragspine_pipeline.defs.retries import DELAY_ENV, STEP_RETRIES
from ragspine_pipeline.sources.s3 import s3_client
from tests.conftest import _writes_one_at_a_time, load_factor, pg_instance_env, wait_until
from tests.defs.test_local_crash import environment

pytestmark = pytest.mark.system  # a moto server killed and restarted under a running evaluation

pytest.importorskip(
    "dagster_postgres", reason="dagster-postgres is not installed (pip install -e '.[deploy]')"
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "postgres" / "dagster.yaml"
OUTAGE_S = 20
BUCKET = "ragspine-blip"


WRITES = ("PUT", "POST", "DELETE")


def serve(port: int, recording: str) -> None:
    """moto's S3 on ``127.0.0.1:port`` that remembers: every write it accepted is appended to
    ``recording``, and a new process replays them into itself before it listens (``python -c`` runs
    this). It says ``ready`` once imported, then waits for a line on stdin before it replays and
    listens, so that the outage does not include the seconds its imports take."""
    import moto.server
    from werkzeug.serving import make_server
    from werkzeug.test import Client

    app = moto.server.DomainDispatcherApplication(moto.server.create_backend_app)
    print("ready", flush=True)
    sys.stdin.readline()
    if Path(recording).exists():
        replay(Client(app), port, Path(recording).read_text().splitlines())
    server = make_server(
        "127.0.0.1",
        port,
        # Writes one at a time, as the session's moto (conditional writes are atomic), and recorded in
        # the order they were applied.
        _writes_one_at_a_time(remembering(app, Path(recording))),
        threaded=True,
        request_handler=moto.server.MotoRequestHandler,
    )
    print("listening", flush=True)
    server.serve_forever()


def remembering(app, recording: Path):
    """``app``, appending each write it accepted (2xx) to ``recording``: method, URI, headers and the
    whole body. moto's own recorder is not enough: it keeps no body of a chunked upload, which is
    how Arrow's S3 client sends the parts of every object it writes."""
    from werkzeug.wsgi import get_input_stream

    def serve(environ, start_response):
        if environ["REQUEST_METHOD"] not in WRITES:
            return app(environ, start_response)
        body = get_input_stream(environ).read()
        environ.update({"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))})
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ.pop("wsgi.input_terminated", None)
        status: list[str] = []

        def started(line, headers, exc_info=None):
            status.append(line)
            return start_response(line, headers, exc_info)

        answer = list(app(environ, started))
        if status and status[0].startswith("2"):
            headers = {k[5:].replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}
            if environ.get("CONTENT_TYPE"):
                headers["Content-Type"] = environ["CONTENT_TYPE"]
            uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ["PATH_INFO"]
            entry = {"method": environ["REQUEST_METHOD"], "uri": uri, "headers": headers}
            entry["body"] = base64.b64encode(body).decode("ascii")
            with open(recording, "a") as out:
                out.write(json.dumps(entry) + "\n")
        return answer

    return serve


def replay(client, port: int, recorded: list[str]) -> None:
    """Send the recorded writes to the new server, in order. A multipart upload gets a new random id
    when it is created again; the requests that named the old one are sent with the new one."""
    new_upload: dict[str, str] = {}  # the object's path -> the id its replayed creation was given
    upload_ids: dict[str, str] = {}  # a recorded upload id -> its replayed one
    for line in recorded:
        entry = json.loads(line)
        uri = urlsplit(entry["uri"])
        query = parse_qsl(uri.query, keep_blank_values=True)
        recorded_id, target = dict(query).get("uploadId"), entry["uri"]
        if recorded_id is not None:
            upload_ids.setdefault(recorded_id, new_upload.get(uri.path, recorded_id))
            query = [(k, upload_ids[recorded_id] if k == "uploadId" else v) for k, v in query]
            target = urlunsplit(uri._replace(query=urlencode(query)))
        answer = client.open(
            target,
            base_url=f"http://127.0.0.1:{port}",
            method=entry["method"],
            headers=entry["headers"],
            data=base64.b64decode(entry["body"]),
        )
        assert answer.status_code < 300, f"{entry['method']} {target}: {answer.status}"
        created = re.search(rb"<UploadId>([^<]+)</UploadId>", answer.get_data())
        if entry["method"] == "POST" and "uploads" in dict(query) and created:
            new_upload[uri.path] = created.group(1).decode()


class RememberingMoto:
    """A moto server process on a fixed loopback port that can be killed and replaced. The replacement
    is started beforehand (:meth:`prepare`), so that an outage lasts as long as the test says, not as
    long as a new process takes to import moto."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.recording = folder / "moto_recording.jsonl"
        self.log = folder / "moto.log"
        self.process: subprocess.Popen | None = None  # the one listening
        self.spare: subprocess.Popen | None = None  # imported, waiting to replay and listen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        """Start the next server process; it imports, then waits to restore what was stored."""
        code = f"from tests.defs.test_s3_blip import serve; serve({self.port}, {str(self.recording)!r})"
        with open(self.log, "a") as log:
            self.spare = subprocess.Popen(
                [sys.executable, "-c", code],
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def listen(self) -> None:
        """Let the prepared process restore what was stored, and listen."""
        self.process, self.spare = self.spare, None
        self._said(self.process, "ready")
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        self._said(self.process, "listening")

    def _said(self, process: subprocess.Popen, word: str) -> None:
        line = process.stdout.readline()  # blocks until it says it, or dies
        assert line.strip() == word, self.log.read_text()[-3000:]

    def kill(self) -> None:
        """SIGKILL the listening process: S3 refuses connections from now on."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        for process in (self.process, self.spare):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()


@pytest.fixture
def moto(tmp_path, aws_env):
    server = RememberingMoto(tmp_path)
    server.prepare()
    server.listen()
    yield server
    server.stop()


def upload(client, demo: Path) -> None:
    """What the deployment keeps in S3 before the run: the traces, the extracted facts, the baselines."""
    client.create_bucket(Bucket=BUCKET)
    for path in sorted((demo / "traces").rglob("*.jsonl*")):
        client.put_object(Bucket=BUCKET, Key=f"traces/{path.parent.name}/{path.name}", Body=path.read_bytes())
    for key in ("extraction/facts.jsonl", "baseline.json", "extraction/baseline.json"):
        if (demo / key).exists():  # a new demo has no baseline yet: the run writes the first
            client.put_object(Bucket=BUCKET, Key=key, Body=(demo / key).read_bytes())


def events(instance: dg.DagsterInstance, run_id: str, kind: dg.DagsterEventType) -> list:
    return instance.event_log_storage.get_records_for_run(run_id, of_type=kind).records


def test_a_run_outlasts_twenty_seconds_of_s3_down_through_its_step_retries(
    tmp_path, database, moto, monkeypatch
):
    # The shipped policy's waits before its last attempt (at least 2 × the base delay) outlast the outage
    # and the time moto takes to come back.
    assert 2 * STEP_RETRIES.delay >= OUTAGE_S + 5
    env = environment(tmp_path)
    env.pop(DELAY_ENV, None)  # the shipped delay, not the suite's 0
    demo = Path(env["RAGSPINE_HOME"])
    upload(s3_client(endpoint_url=moto.url), demo)
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copyfile(SHIPPED, home / "dagster.yaml")
    env.update(
        **pg_instance_env(database),
        RAGSPINE_S3_ENDPOINT_URL=moto.url,
        RAGSPINE_IO_URI=f"s3://{BUCKET}/io",
        RAGSPINE_REPORTS=f"s3://{BUCKET}/reports",
        RAGSPINE_WORK=f"s3://{BUCKET}/work",
        RAGSPINE_TRACE_STORE=f"s3://{BUCKET}/traces",
        RAGSPINE_EXTRACTION_FACTS=f"s3://{BUCKET}/extraction/facts.jsonl",
        RAGSPINE_BASELINE=f"s3://{BUCKET}/baseline.json",
        RAGSPINE_EXTRACTION_BASELINE=f"s3://{BUCKET}/extraction/baseline.json",
    )
    for name in ("DAGSTER_HOME", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")

    moto.prepare()  # the replacement imports meanwhile, not during the outage
    runner = subprocess.Popen(
        [sys.executable, "-m", "ragspine_pipeline.defs.local", "reeval", "--expect", "ship"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:

            def a_step_stored_its_value():
                runs = [run for run in instance.get_runs() if not run.is_finished]
                done = [run for run in runs if events(instance, run.run_id, dg.DagsterEventType.STEP_SUCCESS)]
                return done[0] if done else None

            run = wait_until(a_step_stored_its_value, "the run's first step", 120, runner, interval=0.1)
            moto.kill()
            down = time.monotonic()
            # The outage itself: a duration, not a condition (the run must not end meanwhile).
            wait_until(
                lambda: time.monotonic() - down >= OUTAGE_S,
                "the outage's end",
                OUTAGE_S + 5,
                runner,
                interval=0.1,
            )
            moto.listen()
            outage = time.monotonic() - down
            out, _ = runner.communicate(timeout=300 * load_factor())
            retried = events(instance, run.run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY)
            failed = events(instance, run.run_id, dg.DagsterEventType.STEP_FAILURE)
            status = instance.get_run_by_id(run.run_id).status
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 0, out[-3000:]
    said = [r.event_log_entry.dagster_event.step_failure_data.error.to_string() for r in failed]
    assert status == dg.DagsterRunStatus.SUCCESS and failed == [], out[-3000:] + "".join(said)[-5000:]
    assert outage >= OUTAGE_S
    # A step met the outage, and each retry was for S3 out of reach (Arrow's client says "Could not
    # connect to server", botocore's "Could not connect to the endpoint URL"), never for something the
    # restart lost.
    causes = [r.event_log_entry.dagster_event.event_specific_data.error.to_string() for r in retried]
    assert causes and all("could not connect" in cause.lower() for cause in causes), causes
    decision = s3_client(endpoint_url=moto.url).get_object(
        Bucket=BUCKET, Key="reports/latest/release_decision.json"
    )
    assert json.loads(decision["Body"].read())["decision"] == "ship"

"""The PostgreSQL outbox (``alerts.pg_outbox``) keeps the file outbox's promises for processes on several
hosts sharing one database: concurrent observers announce a regression once; concurrent flushers, even
killed with SIGKILL at random points, post every alert exactly once and each run's alerts in one
message. Real OS processes, a fresh database per test on the loopback PostgreSQL (skipped, with the
reason, without one), a stateful Slack on loopback. The behaviours both outboxes share are also tested
on both, in ``test_outbox.py`` and ``test_delivery.py``."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ragspine_pipeline.alerts.builders import gate_alert, release_alert, run_failure_alert
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.events import batch_key
from ragspine_pipeline.alerts.model import Alert, Finding
from ragspine_pipeline.alerts.outbox import Outbox, open_outbox
from ragspine_pipeline.alerts.slack import SlackSettings
from ragspine_pipeline.errors import InputError
from tests.alerts.slack_server import TOKEN
from tests.alerts.test_outbox import STREAM, decision
from tests.conftest import PG, pg_location

REPO = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).with_name("pg_flush_zygote.py")
PASSWORD = "hunter2-never-shown"
FINDING = Finding(
    kind="gate", name="recall@k", value=0.5, reference=0.9, reference_kind="threshold", op=">=", delta=-0.4
)


def settings(slack) -> SlackSettings:
    return SlackSettings.from_env(
        {"SLACK_BOT_TOKEN": TOKEN, "SLACK_CHANNEL": "C0ALERTS", "SLACK_API_BASE_URL": slack.url}
    )


@contextmanager
def admin(database: str) -> Iterator:
    """A superuser connection to ``database``, autocommit, for what only a test does to it."""
    import psycopg2

    conn = psycopg2.connect(dbname=database, **PG)
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


def run_alerts(run: int) -> list[Alert]:
    """What run ``run`` raises: one to three regressions, on streams of their own (so each is news)."""
    streams = ("release:golden", "extraction", "production")[: 1 + run % 3]
    return [gate_alert([FINDING], f"{s}:{run}", f"{s} of run {run}", run_id=f"run-{run}") for s in streams]


def adhoc_alert(i: int) -> Alert:
    """An alert without a run: a batch of its own."""
    return gate_alert([FINDING], f"adhoc:{i}", f"adhoc {i}")


def one_batch_per_message(slack, alerts: list[Alert]) -> None:
    """Every alert posted exactly once; every message carries one batch (one run's alerts, or one alert
    without a run), and every batch is in one message."""
    posted = Counter(slack.posted_ids())
    assert sorted(posted) == sorted(a.id for a in alerts)
    assert set(posted.values()) == {1}, [i for i, n in posted.items() if n > 1]
    batch_of = {a.id: batch_key(a) for a in alerts}
    per_message = [{batch_of[i] for i in m.alert_ids} for m in slack.messages]
    assert all(len(batches) == 1 for batches in per_message), per_message
    assert len(per_message) == len({batch_of[a.id] for a in alerts})


# -- the location --------------------------------------------------------------------------------------


def test_the_location_chooses_the_outbox_and_is_shown_without_secrets(tmp_path):
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install -e '.[deploy]')")
    assert type(open_outbox(tmp_path / "outbox.jsonl")) is Outbox
    assert type(open_outbox(str(tmp_path / "outbox.jsonl"))) is Outbox
    for scheme in ("postgresql", "postgres"):
        shared = open_outbox(
            f"{scheme}://alerts@db.internal:6432/ragspine?sslmode=require"
        )  # no connection yet
        assert type(shared).__name__ == "PostgresOutbox"
        assert shared.path == f"{scheme}://alerts@db.internal:6432/ragspine"


@pytest.mark.parametrize(
    "location",
    [f"postgresql://alerts:{PASSWORD}@db/ragspine", f"postgres://alerts@db/ragspine?password={PASSWORD}"],
)
def test_a_password_in_the_location_is_refused_without_showing_it(location):
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install -e '.[deploy]')")
    with pytest.raises(InputError) as caught:
        open_outbox(location)
    message = str(caught.value)
    assert PASSWORD not in message and "\n" not in message and "PGPASSWORD" in message
    assert message.startswith(location.split(":")[0] + "://alerts@db/ragspine: ")


def test_the_file_outbox_and_the_command_never_import_psycopg2(tmp_path):
    script = f"""
import sys
from ragspine_pipeline import cli
from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.alerts.outbox import open_outbox
outbox = open_outbox({str(tmp_path / "outbox.jsonl")!r})
outbox.observe(run_failure_alert("nightly_eval", "run-1", None, "boom"))
flush(outbox)
cli.main(["alerts", "list", "--outbox", str(outbox.path)])
print("psycopg2 imported:", "psycopg2" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "psycopg2 imported: False"


def test_an_unreachable_database_is_one_line_without_the_password(closed_port, monkeypatch):
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install -e '.[deploy]')")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    shared = open_outbox(f"postgresql://alerts@127.0.0.1:{closed_port}/ragspine")
    with pytest.raises(InputError) as caught:
        shared.observe(run_failure_alert("nightly_eval", "run-1", None, "boom"))
    message = str(caught.value)
    assert message.startswith(
        f"postgresql://alerts@127.0.0.1:{closed_port}/ragspine: cannot queue the alert: "
    )
    assert "Connection refused" in message and "\n" not in message and PASSWORD not in message
    with pytest.raises(InputError, match="Connection refused"):
        flush(shared)


# -- observing -----------------------------------------------------------------------------------------


def test_a_database_error_queues_nothing_and_leaves_the_state_as_it_was(database):
    with open_outbox(pg_location(database)) as shared, admin(database) as db:
        assert shared.observe(release_alert(decision("ix-1"), STREAM)) is not None
        before = shared.states()
        db.cursor().execute("ALTER TABLE ragspine_alert_events ADD CONSTRAINT refuse CHECK (false) NOT VALID")
        alert = release_alert(decision("ix-2"), STREAM)
        with pytest.raises(InputError) as caught:
            shared.observe(alert)
        message = str(caught.value)
        assert message.startswith(f"{pg_location(database)}: cannot queue the alert: new row for relation")
        assert "\n" not in message and "ix-2" not in message  # the row's text (DETAIL) is not repeated
        assert shared.states() == before and len(shared.read().entries) == 1
        db.cursor().execute("ALTER TABLE ragspine_alert_events DROP CONSTRAINT refuse")
        assert shared.observe(alert) is not None  # not queued, so still news


def test_an_unreadable_state_costs_one_repeat_at_most(database):
    with open_outbox(pg_location(database)) as shared, admin(database) as db:
        assert shared.observe(release_alert(decision(), STREAM)) is not None
        db.cursor().execute('UPDATE ragspine_alert_state SET state = \'{"status": "neither"}\'')
        assert shared.observe(release_alert(decision(), STREAM)) is not None
        assert shared.observe(release_alert(decision(), STREAM)) is None


def test_unreadable_events_are_set_aside_once_and_block_nothing(database, slack):
    with open_outbox(pg_location(database)) as shared, admin(database) as db:
        before = shared.observe(run_failure_alert("nightly_eval", "run-1", None, "before"))
        bad = ["[1]", '{"event": "delivered", "ids": ["no-such-alert"]}', '{"event": "queued", "alert": {}}']
        for event in bad:
            db.cursor().execute("INSERT INTO ragspine_alert_events (event) VALUES (%s)", (event,))
        after = shared.observe(run_failure_alert("nightly_eval", "run-2", None, "after"))
        result = flush(shared, settings(slack))
        assert result.set_aside == 3 and result.delivered == [before.id, after.id]
        with db.cursor() as cursor:
            cursor.execute("SELECT event, error FROM ragspine_alert_corrupt ORDER BY event_id")
            aside = cursor.fetchall()
        assert [event for event, _error in aside] == bad and all(error for _event, error in aside)
        assert shared.read().set_aside == 0 and len(shared.read().delivered) == 2


def _observe_at_once(location: str, start, results) -> None:
    """One evaluation process: on a database without tables yet, all create them at once, then all
    observe the same regression at once, then the same recovery."""
    start.wait()
    with open_outbox(location) as shared:
        shared.states()  # creates the tables, racing the others
        start.wait()
        results.put(("regression", shared.observe(release_alert(decision(), STREAM)) is not None))
        start.wait()
        results.put(("recovery", shared.observe(release_alert(decision(gates=()), STREAM)) is not None))


def test_concurrent_observers_in_several_processes_announce_a_regression_once(database):
    location, n = pg_location(database), 6
    context = multiprocessing.get_context("fork")  # fast; each child connects on its own
    start, results = context.Barrier(n, timeout=20), context.Queue()  # a child that fails frees the rest
    processes = [
        context.Process(target=_observe_at_once, args=(location, start, results), daemon=True)
        for _ in range(n)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
    assert [process.exitcode for process in processes] == [0] * n
    announced = Counter(kind for kind, news in (results.get(timeout=5) for _ in range(2 * n)) if news)
    assert announced == {"regression": 1, "recovery": 1}
    with open_outbox(location) as shared:
        assert [e.alert.kind for e in shared.read().entries] == ["regression", "recovered"]
        assert shared.states()[STREAM].status == "ok"


# -- claims --------------------------------------------------------------------------------------------


def test_a_pass_holds_its_batches_and_another_pass_sees_only_the_rest(database):
    location = pg_location(database)
    with open_outbox(location) as first, open_outbox(location) as second:
        alerts = [*run_alerts(2), *run_alerts(4), adhoc_alert(0)]
        for alert in alerts:
            assert first.observe(alert) is not None
        everything = [a.id for a in alerts]
        with first.delivering():
            assert [e.alert.id for e in first.read().pending] == everything
            with second.delivering():
                assert second.read().pending == []  # all taken: skipped, not waited for
            assert [e.alert.id for e in second.read().pending] == everything  # outside a pass: all
        run_4 = [a.id for a in alerts if a.run_id == "run-4"]
        with first.delivering(lambda batch: batch[0].alert.run_id != "run-4"):
            with second.delivering():
                assert [e.alert.id for e in second.read().pending] == run_4  # the whole run, and only it
            assert [e.alert.id for e in first.read().pending] == [i for i in everything if i not in run_4]
        with second.delivering():
            assert [e.alert.id for e in second.read().pending] == everything  # released with the pass


def test_a_pass_that_lost_its_claim_posts_nothing_and_the_next_pass_looks_first(database):
    location = pg_location(database)
    with open_outbox(location) as first, open_outbox(location) as second, admin(database) as db:
        alert = first.observe(run_failure_alert("nightly_eval", "run-1", None, "boom"))
        with first.delivering():
            terminate = (
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND state = 'idle in transaction'"
            )
            db.cursor().execute(terminate, (database,))  # the claim connection, as if the network dropped it
            with pytest.raises(InputError, match="cannot keep the claim on the alerts to post"):
                first.record_sending([alert.id], "C0ALERTS")
        with second.delivering():
            [entry] = second.read().pending
            assert entry.unconfirmed  # the attempt committed first: Slack's history is read before a post


# -- flushers in several processes ---------------------------------------------------------------------


class Zygotes:
    """``pg_flush_zygote.py`` processes, one per Slack channel, each forking flushes of one outbox on
    command: each posts to its own channel, so the channel of a message tells which flusher posted it."""

    def __init__(self, slack, location: str, channels: list[str], marks: Path | None = None) -> None:
        self.channels = channels
        self.processes = []
        for channel in channels:
            slack.channels[channel.lower()] = channel  # known to the fake Slack, history included
            env = {
                **os.environ,
                "SLACK_BOT_TOKEN": TOKEN,
                "SLACK_CHANNEL": channel,
                "SLACK_API_BASE_URL": slack.url,
                "RAGSPINE_ALERT_CONFIRM_AFTER_S": "0",  # a killed flush is gone: look at once
                "PYTHONPATH": str(REPO),
            }
            argv = [sys.executable, str(ZYGOTE), location, *([str(marks)] if marks else [])]
            self.processes.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=env,
                    cwd=REPO,
                    text=True,
                    bufsize=1,
                )
            )

    def send(self, i: int, command: str) -> None:
        self.processes[i].stdin.write(command + "\n")
        self.processes[i].stdin.flush()

    def answer(self, i: int) -> int:
        """The number on the zygote's next line: a flush's pid, or its exit code."""
        return int(self.processes[i].stdout.readline().split()[1])

    def close(self) -> None:
        for process in self.processes:
            process.stdin.close()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:  # a test that failed midway: its flush may still loop
                process.kill()
                process.wait()


def test_concurrent_flusher_processes_post_every_alert_once_and_each_run_in_one_message(
    database, slack, tmp_path
):
    """Three flushers loop while runs on another host queue their alerts and end; each batch goes to
    whichever flusher claims it first."""
    location, marks = pg_location(database), tmp_path / "runs"
    marks.mkdir()
    slack.set(delay_s=0.01)  # a pass lasts long enough for runs to end while it posts
    zygotes = Zygotes(slack, location, ["C0FLUSHA", "C0FLUSHB", "C0FLUSHC"], marks)
    alerts: list[Alert] = []
    try:
        for i in range(3):
            zygotes.send(i, "-1 until-done")
        for i in range(3):
            zygotes.answer(i)  # each flusher has started: from now on, they run while the runs queue
        with open_outbox(location) as shared:
            for run in range(30):
                for alert in run_alerts(run):
                    alerts.append(shared.observe(alert))
                    time.sleep(0.005)
                if run >= 2:  # a run ends a little after it queued its last alert
                    (marks / f"run-{run - 2}").touch()
                if run % 3 == 0:
                    alerts.append(shared.observe(adhoc_alert(run)))
            for run in (28, 29):
                (marks / f"run-{run}").touch()
            (marks / "DONE").touch()
            assert [zygotes.answer(i) for i in range(3)] == [0, 0, 0]
            assert all(e.status == "delivered" for e in shared.read().entries)
    finally:
        zygotes.close()
    assert None not in alerts
    one_batch_per_message(slack, alerts)
    assert len({message.channel for message in slack.messages}) >= 2  # the work was shared


def test_flushers_killed_with_sigkill_at_random_points_post_every_alert_once(database, slack):
    """Rounds of one flusher killed right after Slack stored its n-th message, before the answer, and
    rounds of two flushers at once killed at random moments; then an undisturbed flush."""
    location = pg_location(database)
    with open_outbox(location) as shared:
        alerts = [shared.observe(alert) for run in range(60) for alert in run_alerts(run)]
    zygotes = Zygotes(slack, location, ["C0FLUSHA", "C0FLUSHB"])
    rng = random.Random(17)
    pids: dict[str, int] = {}  # channel -> the pid of the flush posting to it
    posted_in_round: Counter[str] = Counter()
    kill_at: dict[str, int] = {}
    known = threading.Event()

    def hook(message) -> None:  # in the fake Slack, after it stored a message, before it answers
        posted_in_round[message.channel] += 1
        if posted_in_round[message.channel] == kill_at.get(message.channel):
            known.wait(5)
            os.kill(pids[message.channel], signal.SIGKILL)

    slack.set(hook=hook)
    killed_in_flight = 0
    try:
        for round_ in range(14):
            posted_in_round.clear()
            known.clear()
            if round_ % 2 == 0:  # one flusher, killed between Slack's store and its answer
                who = [round_ // 2 % 2]
                kill_at.clear()
                kill_at[zygotes.channels[who[0]]] = rng.randint(1, 3)
                commands = ["-1"]
            else:  # two at once, each killed at a random moment: reading, claiming, writing, posting
                who, commands = [0, 1], [f"{rng.uniform(0, 0.08):.4f}" for _ in range(2)]
                kill_at.clear()
            for i, command in zip(who, commands, strict=True):
                zygotes.send(i, command)
            for i in who:
                pids[zygotes.channels[i]] = zygotes.answer(i)
            known.set()
            codes = [zygotes.answer(i) for i in who]
            killed_in_flight += round_ % 2 == 0 and codes == [-signal.SIGKILL]
        slack.set(hook=None)
        with open_outbox(location) as shared:
            for _ in range(20):  # a killed flush's claims are free once PostgreSQL saw its connections close
                zygotes.send(0, "-1")
                zygotes.answer(0)
                zygotes.answer(0)
                if not shared.read().pending:
                    break
                time.sleep(0.1)
    finally:
        slack.set(hook=None)
        zygotes.close()

    one_batch_per_message(slack, alerts)
    with open_outbox(location) as shared:
        view = shared.read()
    ts_of = {alert_id: m.ts for m in slack.messages for alert_id in m.alert_ids}
    assert all(e.status == "delivered" and e.ts == ts_of[e.alert.id] for e in view.entries)
    assert killed_in_flight >= 4  # the crashes did land between Slack's store and its answer ...
    assert sum(e.confirmed for e in view.entries) >= killed_in_flight  # ... and were found, not reposted

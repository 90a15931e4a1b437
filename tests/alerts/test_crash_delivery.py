"""`ragspine-eval alerts flush` killed with SIGKILL at random points, again and again, posts every alert
exactly once: real OS processes, a real outbox on disk, a stateful Slack on loopback."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ragspine_pipeline.alerts.builders import run_failure_alert
from ragspine_pipeline.alerts.outbox import Outbox
from tests.alerts.slack_server import TOKEN

pytestmark = pytest.mark.system  # flush processes killed with SIGKILL, again and again

ALERTS = 60
ROUNDS = 16
REPO = Path(__file__).resolve().parents[2]


def kill_at(nth: int, child: dict[str, int]):
    """A fake-Slack hook that SIGKILLs the flush when Slack has stored its ``nth`` message."""
    seen = []

    def hook(message) -> None:
        seen.append(message)
        while "pid" not in child:  # the zygote reports the pid as soon as it forked
            time.sleep(0.001)
        if len(seen) == nth:
            os.kill(child["pid"], signal.SIGKILL)

    return hook


def test_kill_9_at_random_points_never_posts_an_alert_twice(tmp_path, slack):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    alerts = [run_failure_alert("nightly_eval", f"run-{i}", "traces", f"crash {i}") for i in range(ALERTS)]
    for alert in alerts:
        outbox.observe(alert)
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_CHANNEL": "C0ALERTS",
        "SLACK_API_BASE_URL": slack.url,
        "RAGSPINE_ALERT_CONFIRM_AFTER_S": "0",  # the killed flush is gone: look at once
        "PYTHONPATH": str(REPO),
    }
    argv = ["alerts", "flush", "--outbox", str(outbox.path)]
    zygote = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("flush_zygote.py")), *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
        text=True,
        bufsize=1,
    )
    rng = random.Random(16)
    killed_in_flight = 0
    try:
        for round_ in range(ROUNDS):
            child: dict[str, int] = {}
            if round_ % 2:  # anywhere: reading the outbox, writing a line, posting, recording
                slack.set(hook=None)
                command = f"{rng.uniform(0, 0.06)}\n"
            else:  # after Slack stored a message, before its answer arrives
                slack.set(hook=kill_at(rng.randint(1, 3), child))
                command = "-1\n"
            zygote.stdin.write(command)
            zygote.stdin.flush()
            child["pid"] = int(zygote.stdout.readline().split()[1])
            code = int(zygote.stdout.readline().split()[1])
            killed_in_flight += round_ % 2 == 0 and code == -signal.SIGKILL
    finally:
        slack.set(hook=None)
        zygote.stdin.close()
        zygote.wait(10)

    # The last flush is the installed command itself, undisturbed.
    final = subprocess.run(
        [str(Path(sys.executable).with_name("ragspine-eval")), *argv], env=env, capture_output=True, text=True
    )
    assert final.returncode == 0, final.stderr
    assert ", 0 pending" in final.stdout

    posted = Counter(slack.posted_ids())
    assert sorted(posted) == sorted(a.id for a in alerts)
    assert set(posted.values()) == {1}, [i for i, n in posted.items() if n > 1]  # no alert twice
    view = outbox.read()
    ts_of = {alert_id: m.ts for m in slack.messages for alert_id in m.alert_ids}
    assert all(e.status == "delivered" and e.ts == ts_of[e.alert.id] for e in view.entries)
    assert killed_in_flight >= ROUNDS // 4  # the crashes did land between Slack's store and its answer
    assert sum(e.confirmed for e in view.entries) >= killed_in_flight  # ... and were found, not reposted

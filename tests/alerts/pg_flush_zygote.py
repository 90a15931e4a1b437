"""Flushes a PostgreSQL outbox in forked processes on command (``flush_zygote``'s protocol), for the
concurrency and crash tests of ``alerts.pg_outbox``.

Arguments: the outbox's location, then optionally a folder of run markers: a file named after each run
that has ended (the flush's ``finished``), and ``DONE`` once no more alerts are coming. A command
``<seconds> until-done`` repeats passes until ``DONE`` exists and nothing is pending (30 s at most);
a plain ``<seconds>`` is one pass. Slack settings come from the environment. Exit 0 when the flush
left nothing pending, 1 otherwise.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg2  # noqa: F401 - imported once here, not in every forked flush

from ragspine_pipeline.alerts.delivery import flush
from ragspine_pipeline.alerts.outbox import open_outbox
from tests.alerts.flush_zygote import serve

DONE = "DONE"


def flush_outbox(location: str, marks: Path | None, words: list[str]) -> int:
    finished = None if marks is None else (lambda run_id: (marks / run_id).exists())
    deadline = time.monotonic() + 30
    with open_outbox(location) as outbox:
        while True:
            result = flush(outbox, finished=finished)
            if "until-done" not in words:
                return 0 if result.pending == 0 and result.error is None else 1
            if marks is not None and (marks / DONE).exists() and not outbox.read().pending:
                return 0
            if time.monotonic() > deadline:
                return 1
            time.sleep(0.002)


if __name__ == "__main__":
    location, *rest = sys.argv[1:]
    marks = Path(rest[0]) if rest else None
    serve(lambda words: flush_outbox(location, marks, words))

"""`make dev`: the Dagster UI (`dg dev`) on the project-local instance, quiet, and stopped cleanly.

    python -m ragspine_pipeline.defs.dev [--port 3000] [--host 127.0.0.1]

What it adds to a bare `dg dev`:

* **Quiet.** Dagster's own log is at WARNING (the daemon otherwise logs every sensor tick at INFO); one
  line says where the UI is once it answers. `VIRTUAL_ENV` names the interpreter's environment, so `dg`
  does not warn that the active environment differs from the project's. The root `dagster.yaml` is the
  template `make` copies into `$DAGSTER_HOME`; `dagster dev` warns that a `dagster.yaml` in the current
  folder is not the instance's, which is true and intended, so that one line is not passed on.
* **Stopped on Ctrl-C or SIGTERM within seconds, nothing left behind.** `dg dev` runs in a session of
  its own. On SIGINT or SIGTERM its process group gets SIGINT, as from Ctrl-C in a terminal (an orderly
  shutdown of the webserver, the daemon and their code servers); whatever still runs after `GRACE_S`
  seconds is killed with the whole group, and this process ends at once (no interpreter teardown). A
  bare `dg dev` under `make` ignored SIGTERM and left its code servers running.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TextIO

from ragspine_pipeline.defs.local import local_instance

GRACE_S = 6.0
# dagster dev's warning about the root dagster.yaml (the template for $DAGSTER_HOME, deliberately not
# the instance's): see the module docstring.
TEMPLATE_WARNING = "Found a dagster instance configuration value (dagster.yaml) in the current folder"


def dg_dev_command(port: int, host: str) -> list[str]:
    """`dg dev` from this interpreter's environment, with Dagster's log at WARNING."""
    dg = Path(sys.executable).with_name("dg")
    return [str(dg), "dev", "--port", str(port), "--host", host, "--log-level", "warning", "--no-check-yaml"]


def forward(stream: TextIO, out: TextIO) -> None:
    """Copy the child's output line by line, without the one known-spurious warning."""
    for line in stream:
        if TEMPLATE_WARNING not in line:
            out.write(line)
            out.flush()


def wait_until_up(url: str, child: subprocess.Popen, timeout_s: float = 120.0) -> bool:
    """Poll the webserver until it answers (True), the child exits or the time is up (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    return False


def stop(child: subprocess.Popen, grace_s: float = GRACE_S) -> int:
    """Ask `dg dev` and its processes to shut down (SIGINT), then kill what is left of its process
    group; return its exit code."""
    if child.poll() is None:
        # The whole group, as Ctrl-C in a terminal does: told alone, dg dev waits for its webserver and
        # daemon to notice its shutdown pipe, which took longer than the grace period.
        os.killpg(child.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):  # whatever of the group is left, code servers included
        os.killpg(child.pid, signal.SIGKILL)
    return child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragspine_pipeline.defs.dev", description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("RAGSPINE_DEV_PORT") or 3000))
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)

    local_instance()  # $DAGSTER_HOME with its dagster.yaml and storage, created under the instance lock
    # A plain flag, not a threading.Event: a handler runs in the main thread between any two of its
    # bytecodes, and Event.set() from there deadlocks when the signal lands while Event.wait() holds
    # the event's (non-reentrant) lock: the process would never end.
    stopping = False

    def on_signal(signum: int, _frame) -> None:
        nonlocal stopping
        stopping = True

    # Before the child starts: a process started in the background by a non-interactive shell (make,
    # a test) inherits SIGINT ignored, and an ignored signal stays ignored across exec — dg dev would
    # never hear the Ctrl-C it is sent. A handled signal is reset to its default in the child.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix}
    child = subprocess.Popen(
        dg_dev_command(args.port, args.host),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # our signal handler decides how it stops, not the terminal
    )
    assert child.stdout is not None
    threading.Thread(target=forward, args=(child.stdout, sys.stdout), daemon=True).start()

    url = f"http://{args.host}:{args.port}"
    up = threading.Thread(
        target=lambda: (
            wait_until_up(url, child) and print(f"Dagster UI: {url}  (Ctrl-C to stop)", flush=True)
        ),
        daemon=True,
    )
    up.start()
    while not stopping and child.poll() is None:
        time.sleep(0.2)  # a signal cuts the sleep short only to run its handler: at most 0.2 s late
    if not stopping:  # dg dev ended by itself: an error it has printed
        stop(child)
        return child.returncode or 1
    code = stop(child)
    print(f"Dagster UI stopped (dg dev exited {code}).", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Ended without tearing the interpreter down: the UI and every process it started are gone and the
    # output is flushed, so nothing is left to clean up, and freeing the Dagster modules this process
    # imported object by object took 2 s of every stop on a loaded machine.
    os._exit(code)

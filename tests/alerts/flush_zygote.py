"""Runs ``ragspine-eval alerts flush`` in forked processes on command, for the crash tests.

Importing the CLI takes seconds; forking this already-imported process makes each flush a fresh OS
process (its own descriptors, locks and sockets, SIGKILLed like any other) in milliseconds. One command
per stdin line: a number of seconds after which the flush is killed (negative: never), then optional
words for the flush (see :func:`serve`). For each, one line ``pid <pid>`` when the flush starts, then
one line ``exit <code>`` (``-9``: killed) when it ends. The command line of the flush is this script's
arguments.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable

Flush = Callable[[list[str]], int]
"""One flush, given the words after the command's number; its exit code."""


def run(flush: Flush, words: list[str], kill_after: float) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        try:
            code = flush(words)
        except BaseException:
            code = 70
        os._exit(code)
    print(f"pid {pid}", flush=True)
    deadline = time.monotonic() + kill_after
    while kill_after >= 0 and time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.0005)
    if kill_after >= 0:
        os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def serve(flush: Flush) -> None:
    """Answer the commands on stdin, one forked ``flush`` each, until stdin closes."""
    for command in sys.stdin:
        kill_after, *words = command.split()
        print(f"exit {run(flush, words, float(kill_after))}", flush=True)


if __name__ == "__main__":
    from ragspine_pipeline import cli

    serve(lambda _words: cli.main(sys.argv[1:]))

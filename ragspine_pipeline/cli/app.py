"""``main``: parse the command line, run the subcommand, turn what it raised into an exit code; ``console``:
the same as the process of the ``ragspine-eval`` script.

Exit codes: 0 ship (every gate, slice and baseline holds), 1 block, 2 unusable input (one line names the
file, line and field) or an optional extra the command needs is not installed (one line names it), 3 an
internal error (a bug: the traceback is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ragspine_pipeline.cli.args import EXIT_INTERNAL, EXIT_UNUSABLE, UsageError
from ragspine_pipeline.cli.extras import missing_extra_line
from ragspine_pipeline.cli.parser import build_parser
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError


def main(argv: Sequence[str] | None = None) -> int:
    return _run(_parser().parse_args(argv))


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The command's parser, built once a process (about 30 ms): parsing leaves it as it was, so a
    process that runs ``main`` many times (a notebook, the tests) builds it once."""
    return build_parser()


def console() -> NoReturn:
    """``main`` in a process of its own (the ``ragspine-eval`` script, ``python -m ragspine_pipeline.cli``).

    Two things only such a process may do. It tells pyarrow that it holds no pandas objects (see
    :func:`_arrow_without_pandas`). And it ends without tearing the interpreter down: scoring a million
    cases leaves about 0.9 GB of tables, and freeing them object by object took 0.13–0.29 s of every run,
    for memory the operating system takes back at once. Everything the command wrote is closed by then,
    and its output streams are flushed here.
    """
    args = build_parser().parse_args()
    _arrow_without_pandas()
    code = _run(args)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left before the last of the output: as SIGPIPE would
        code = 128 + 13
    with contextlib.suppress(BrokenPipeError, ValueError):  # ValueError: the command closed it
        sys.stderr.flush()
    os._exit(code)


def _arrow_without_pandas() -> None:
    """Let pyarrow settle, once, that this process has no pandas.

    pyarrow asks of every array it builds from Python or numpy values whether they are a pandas object,
    and imports pandas to find out: 0.15–0.2 s, a tenth of scoring a million cases, in a command that
    never holds a pandas object (none of them imports pandas). So the first such question is asked here
    with pandas made unimportable; pyarrow keeps the answer for these checks, and imports pandas itself
    where it really needs it (``to_pandas``). Only for a process of its own: in a process that holds
    pandas objects, pyarrow would take a Series for a plain sequence.
    """
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    class _NoPandas:
        def find_spec(self, name: str, path=None, target=None):
            if name == "pandas":
                raise ModuleNotFoundError("pandas is not asked for here", name=name)
            return None

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # pyarrow's first "is this pandas?" question
    finally:
        sys.meta_path.remove(finder)


def _run(args: argparse.Namespace) -> int:
    if needs := missing_extra_line(args):  # before the import that would fail on it
        print(needs, file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        module, function = args.run.split(":")
        # Only now: the command's implementation is what pulls in pyarrow, pydantic, boto3, …
        return getattr(importlib.import_module(module), function)(args)
    except (InputError, UsageError, SourceError) as exc:  # a store that cannot be read is unusable input too
        print(f"ragspine-eval: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except BrokenPipeError:  # e.g. `ragspine-eval score … | head`: the reader left; exit as SIGPIPE would
        sys.stderr.close()
        return 128 + 13
    except Exception:  # a bug, not a verdict: never let a traceback's exit status 1 read as "blocked"
        traceback.print_exc()
        print(
            f"ragspine-eval: internal error (exit {EXIT_INTERNAL}); please report the traceback above",
            file=sys.stderr,
        )
        return EXIT_INTERNAL

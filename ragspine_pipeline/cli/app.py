"""``main``: parse the command line, run the subcommand, turn what it raised into an exit code.

Exit codes: 0 ship (every gate, slice and baseline holds), 1 block, 2 unusable input (one line names the
file, line and field), 3 an internal error (a bug: the traceback is printed).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Sequence

from ragspine_pipeline.cli.args import EXIT_INTERNAL, EXIT_UNUSABLE, UsageError
from ragspine_pipeline.cli.parser import build_parser
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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

"""What the ``ragspine-eval`` subcommands share: the exit codes, the usage error and argument types.

Standard library only: the parser is built from this module on every start, ``--help`` included.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

EXIT_PASS, EXIT_GATE_FAILED, EXIT_UNUSABLE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """A command line that cannot run (exit 2)."""


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``minimum`` (a usage error otherwise)."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{raw}' is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return value

    return parse


def share(raw: str) -> float:
    """An argparse ``type``: a share between 0 and 1 (a usage error otherwise)."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{raw}' is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def span_settings(args: argparse.Namespace):
    """The ``contracts.spans.SpanSettings`` the span options of a command give (a usage error for a
    pattern that does not compile)."""
    from ragspine_pipeline.contracts.spans import SpanSettings

    try:
        return SpanSettings.of(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


POSITIVE = whole_number(1)
"""An argument that is a whole number of at least 1."""
NON_NEGATIVE = whole_number(0)
"""An argument that is a whole number of at least 0 (a count)."""

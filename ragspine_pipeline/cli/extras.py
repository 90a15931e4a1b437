"""The optional extra a command needs (``pip install 'ragspine-pipeline[judge]'``), checked before the
command's implementation is imported: a missing one is one line and exit 2, not a traceback halfway
through a run.

A command names its extra in the parser (``set_defaults(extra=...)``); what an extra contains is declared
once, in pyproject.toml, and read back here from the installed distribution's metadata. Only the standard
library: this runs on every start.
"""

from __future__ import annotations

import argparse
import re
from importlib import metadata

DISTRIBUTION = "ragspine-pipeline"
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing(extra: str, _seen: frozenset[str] = frozenset()) -> list[str]:
    """The distributions ``extra`` requires that are not installed, each once, in declaration order.

    Empty when this project's own metadata cannot be read (its source tree on ``sys.path``, not
    installed): the command's imports then say what is missing. An extra that includes another of this
    project's extras (``ragspine-pipeline[dagster]``) includes its distributions.
    """
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    absent: list[str] = []
    for text in requirements:
        marker = _EXTRA_MARKER.search(text)
        named = _NAME.match(text)
        if marker is None or named is None or _canonical(marker.group(1)) != _canonical(extra):
            continue
        name, included = named.groups()
        if _canonical(name) == DISTRIBUTION:
            for other in (included or "").split(","):
                if other.strip() and other.strip() not in _seen | {extra}:
                    absent += missing(other.strip(), _seen | {extra})
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            absent.append(name)
    return list(dict.fromkeys(absent))  # once each, though two included extras share it


def command_name(args: argparse.Namespace) -> str:
    """The subcommand as typed: ``judge``, ``alerts flush``."""
    words = [args.command, getattr(args, f"{args.command}_command", None)]
    return " ".join(word for word in words if word)


def missing_extra_line(args: argparse.Namespace) -> str | None:
    """One line naming the extra the parsed command needs and lacks, or None when it has what it needs."""
    extra = getattr(args, "extra", None)
    if extra is None or not missing(extra):
        return None
    return (
        f"ragspine-eval {command_name(args)}: needs the {extra} extra: pip install '{DISTRIBUTION}[{extra}]'"
    )

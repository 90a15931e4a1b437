"""Small helpers shared by the assets: Markdown tables for the UI, user errors as clean step failures."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import dagster as dg

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.reports.markdown import md_text
from ragspine_pipeline.sources.errors import SourceError


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; every cell is text from data, escaped (``reports.markdown``):
    no live HTML, no Markdown, no extra column."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(md_text(cell) for cell in row) + " |")
    return "\n".join(lines)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn an input or source problem into a step failure whose description is the one-line message.

    A traceback is for bugs; a user who fed a changed golden set or an unreachable store reads one line.
    """
    try:
        yield
    except (InputError, SourceError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=isinstance(exc, SourceError)) from None


def json_document(data: object) -> str:
    """A report as JSON text: indented, UTF-8 as is, one final newline; NaN or infinity is a bug and
    raises rather than writing what no JSON reader takes."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"

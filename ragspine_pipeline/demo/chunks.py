"""The corpus as the reference engine reads it: ``corpus.jsonl``, one chunk per line.

``{chunk_id, document_id, parent_id, version, permitted, current, title, text, points}``, where ``points``
aligns the chunk's sentences with the answer point each one states; a chunk of a named source file also
has its ``doc``, its ``locator`` in it and the ``figures`` it states. Both the engine
(retrieval) and its answer step (:mod:`reference_outcome`) read these records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragspine_pipeline.contracts.jsonl import iter_records
from ragspine_pipeline.errors import InputError

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Figure:
    """``metric`` of ``scope`` in ``period`` is ``value`` ``unit``, at ``locator`` of file ``doc``;
    ``sentence`` is the index of the chunk sentence that states it."""

    metric: str
    scope: str
    period: str
    value: float
    unit: str
    doc: str
    locator: str
    sentence: int

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Figure:
        return cls(
            metric=str(row["metric"]),
            scope=str(row["scope"]),
            period=str(row["period"]),
            value=float(row["value"]),
            unit=str(row["unit"]),
            doc=str(row["doc"]),
            locator=str(row["locator"]),
            sentence=int(row["sentence"]),
        )


@dataclass(frozen=True)
class Chunk:
    """One chunk of the corpus; ``sentences`` pairs each sentence with its answer point (or None);
    a chunk of a named file has its ``doc``, ``locator`` in it and the ``figures`` it states."""

    chunk_id: str
    document_id: str
    parent_id: str | None
    version: str
    permitted: bool
    current: bool
    title: str
    text: str
    sentences: tuple[tuple[str, str | None], ...]
    doc: str | None = None
    locator: str | None = None
    figures: tuple[Figure, ...] = ()

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Chunk:
        points = row.get("points") or []
        sentences = tuple((p["sentence"], p.get("point")) for p in points) or tuple(
            (s, None) for s in _SENTENCE_END.split(row["text"].strip()) if s
        )
        return cls(
            chunk_id=str(row["chunk_id"]),
            document_id=str(row.get("document_id") or row["chunk_id"]),
            parent_id=row.get("parent_id"),
            version=str(row["version"]),
            permitted=bool(row["permitted"]),
            current=bool(row["current"]),
            title=str(row.get("title") or ""),
            text=str(row["text"]),
            sentences=sentences,
            doc=row.get("doc"),
            locator=row.get("locator"),
            figures=tuple(Figure.from_dict(figure) for figure in row.get("figures") or ()),
        )


def load_corpus(path: str | Path) -> list[Chunk]:
    """Read ``corpus.jsonl`` (blank lines skipped). A malformed line is an InputError naming the line."""
    chunks = []
    for number, row in iter_records(path):
        try:
            chunks.append(Chunk.from_dict(row))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(str(path), f"not a corpus chunk: {exc}", number) from None
    return chunks

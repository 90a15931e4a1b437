"""Extraction channels: how much of a workbook a document parser read correctly.

Facts and ground truth are aligned on the cell key ``"{sheet}!{cell_ref}"``; only cells present on both
sides are scored (the others are counted as ``facts_only`` and ``truth_only``). Each channel compares one
field:

* ``cell_value`` compares ``value``: the number or text read from the cell;
* ``color_mapping`` compares ``tags``: the fill colour / highlight tags;
* ``header_attribution`` compares ``merge_span``: the merged header range the cell heads.

For each channel::

    total    = |{aligned cells}|            (every cell present on both sides, in every channel)
    correct  = |{those cells whose fact and truth have equal fields}|
    accuracy = correct / total,  and None (JSON null) when total = 0: not applicable, never a
               placeholder or NaN; total 0 is reported, and a baseline treats the channel as
               unmeasured (``decision.extraction_baseline``)

A field that is absent counts as null: null against null is a match (the parser rightly found no
merge span, no tags), null against a value is a mismatch either way round. This is how RAGSpine counts
its channels, so the same facts give the same totals there and here.

Equality is equality of :func:`canonical` forms: lists and tuples with the same items are equal,
recursively (``("A1", "D1") == ["A1", "D1"]``); numbers compare
numerically (``1702 == 1702.0``, ``-0.0 == 0``); strings compare exactly (``"1702" != 1702``); booleans
are not numbers (``true != 1``); object keys are unordered, list items ordered (a tag list in another
order is a mismatch). Mismatches are listed ``{cell, expected, actual}`` in cell order (:func:`cell_order`:
sheet name, then row, then column), with the values as they were given.

The functions are pure; each value is normalised once, so scoring is O(cells).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragspine_pipeline.contracts.extraction import ExtractionCell
from ragspine_pipeline.metrics import ratio

CHANNEL_FIELDS: dict[str, str] = {
    "cell_value": "value",
    "color_mapping": "tags",
    "header_attribution": "merge_span",
}
CHANNELS: tuple[str, ...] = tuple(CHANNEL_FIELDS)


@dataclass(frozen=True)
class Mismatch:
    cell: str  # the key, "{sheet}!{cell_ref}"
    expected: Any  # None when the truth leaves the field null
    actual: Any  # None when the fact lacks the field


@dataclass(frozen=True)
class ChannelScore:
    channel: str
    total: int  # aligned cells (every one, in every channel)
    correct: int
    mismatches: tuple[Mismatch, ...]  # sorted by cell

    @property
    def accuracy(self) -> float | None:
        """``correct / total``; None when nothing was measured (``total == 0``)."""
        return ratio(self.correct, self.total)

    @property
    def measured(self) -> bool:
        return self.total > 0


@dataclass(frozen=True)
class ExtractionScore:
    channels: dict[str, ChannelScore]  # in CHANNELS order
    aligned: int  # cells present in both facts and ground truth
    facts_only: int  # facts without a ground-truth cell (not scored)
    truth_only: int  # ground-truth cells the parser did not emit (not scored)

    def accuracies(self) -> dict[str, float | None]:
        """Every channel's accuracy, None for a channel with nothing to measure (total 0)."""
        return {name: score.accuracy for name, score in self.channels.items()}


def canonical(value: Any) -> str | None:
    """The text two values share exactly when they are equal for scoring; None for null.

    Compact JSON with sorted object keys, tuples written as lists, and integral floats written as
    integers (so 1702.0 and 1702 both give ``1702``).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return _ENCODER.encode(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() else repr(value)  # repr is what JSON writes
    return _ENCODER.encode(_integral_floats_as_ints(value))


_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _integral_floats_as_ints(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list | tuple):
        return [_integral_floats_as_ints(item) for item in value]
    if isinstance(value, dict):
        return {name: _integral_floats_as_ints(item) for name, item in value.items()}
    return value


def cell_order(key: str) -> tuple[str, int, int]:
    """Sort key of a cell key in reading order: ``(sheet, row, column)``, so ``A2`` comes before ``A10``."""
    sheet, _, ref = key.rpartition("!")
    letters = ref.rstrip("0123456789")
    column = 0
    for letter in letters:
        column = column * 26 + ord(letter) - ord("A") + 1
    return sheet, int(ref[len(letters) :] or 0), column


def score_extraction(
    facts: Mapping[str, ExtractionCell], truth: Mapping[str, ExtractionCell]
) -> ExtractionScore:
    """Align ``facts`` and ``truth`` (both keyed by cell key) and score every channel."""
    aligned = [key for key in truth if key in facts]
    channels = {
        name: score_channel(name, [truth[key] for key in aligned], [facts[key] for key in aligned])
        for name in CHANNELS
    }
    return ExtractionScore(
        channels=channels,
        aligned=len(aligned),
        facts_only=len(facts) - len(aligned),
        truth_only=len(truth) - len(aligned),
    )


def score_channel(
    channel: str, expected_cells: list[ExtractionCell], actual_cells: list[ExtractionCell]
) -> ChannelScore:
    """One channel over already aligned cells (``expected_cells[i]`` and ``actual_cells[i]`` share a key)."""
    field = CHANNEL_FIELDS[channel]
    total = correct = 0
    mismatches: list[Mismatch] = []
    for truth_cell, fact_cell in zip(expected_cells, actual_cells, strict=True):
        expected, actual = getattr(truth_cell, field), getattr(fact_cell, field)
        total += 1
        if canonical(actual) == canonical(expected):  # None == None: both null is a match
            correct += 1
        else:
            mismatches.append(Mismatch(truth_cell.key, expected, actual))
    mismatches.sort(key=lambda m: cell_order(m.cell))
    return ChannelScore(channel, total, correct, tuple(mismatches))

"""Extraction channels: alignment, equality rules, totals, accuracy with empty denominators."""

from __future__ import annotations

import pytest

from ragspine_pipeline.contracts.extraction import ExtractionCell
from ragspine_pipeline.scoring.extraction import CHANNELS, canonical, cell_order, score_extraction


def cells(*rows: dict) -> dict[str, ExtractionCell]:
    out = {}
    for row in rows:
        cell = ExtractionCell.model_validate({"sheet": "S", **row})
        out[cell.key] = cell
    return out


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1702, 1702.0),
        (-0.0, 0),
        (("A1", "D1"), ["A1", "D1"]),
        ((("A1", 1), ["D1", 4.0]), [["A1", 1.0], ("D1", 4)]),  # nested, with numbers inside
        ({"fill": "green", "bold": True}, {"bold": True, "fill": "green"}),
        ({"span": ("A1", 2)}, {"span": ["A1", 2.0]}),
        ("Kestrel", "Kestrel"),
    ],
)
def test_equal_values(a, b):
    assert canonical(a) == canonical(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1702", 1702),  # strings are not numbers
        ("1702", "1702.0"),  # strings compare exactly
        ("Revenue", "revenue"),
        (True, 1),  # booleans are not numbers
        (0.1, 0.10000000000000002),
        (["A1", "D1"], ["D1", "A1"]),  # list items are ordered
        (["A1", "D1"], ["A1", "D1", "E1"]),
        (["A1"], "A1"),
    ],
)
def test_unequal_values(a, b):
    assert canonical(a) != canonical(b)


def test_only_cells_on_both_sides_are_scored():
    truth = cells(
        {"cell_ref": "A1", "value": 1}, {"cell_ref": "A2", "value": 2}, {"cell_ref": "A3", "value": 3}
    )
    facts = cells(
        {"cell_ref": "A2", "value": 2},
        {"cell_ref": "A3", "value": 30},
        {"cell_ref": "B9", "value": 9},
        {"cell_ref": "B10", "value": 10},
    )
    score = score_extraction(facts, truth)
    assert (score.aligned, score.facts_only, score.truth_only) == (2, 2, 1)
    value = score.channels["cell_value"]
    assert (value.total, value.correct, value.accuracy) == (2, 1, 0.5)
    assert [(m.cell, m.expected, m.actual) for m in value.mismatches] == [("S!A3", 3, 30)]


def test_merge_spans_and_numbers_compare_by_value_not_by_form():
    truth = cells(
        {"cell_ref": "A1", "value": 1702, "merge_span": ("A1", "D1"), "tags": {"fill": "navy"}},
        {"cell_ref": "B2", "value": 0.25, "merge_span": [["B2"], ["C2"]]},
    )
    facts = cells(
        {"cell_ref": "A1", "value": 1702.0, "merge_span": ["A1", "D1"], "tags": {"fill": "navy"}},
        {"cell_ref": "B2", "value": 0.25, "merge_span": (("B2",), ("C2",))},
    )
    score = score_extraction(facts, truth)
    assert {name: (c.correct, c.total) for name, c in score.channels.items()} == {
        "cell_value": (2, 2),
        "color_mapping": (2, 2),  # B2: no tags on either side is a match
        "header_attribution": (2, 2),
    }


def test_every_aligned_cell_counts_in_every_channel_and_null_against_a_value_is_a_mismatch_both_ways():
    truth = cells(
        {"cell_ref": "A1", "value": "Title", "tags": {"fill": "navy"}},
        {"cell_ref": "A2", "value": 5},  # no tags in truth
        {"cell_ref": "A3", "value": 6, "tags": ["highlight:red"]},
        {"cell_ref": "A4", "value": 7, "tags": None},  # null, written out
    )
    facts = cells(
        {"cell_ref": "A1", "value": "Title"},  # lost its fill
        {"cell_ref": "A2", "value": 5, "tags": {"fill": "green"}},  # a fill the truth does not have
        {"cell_ref": "A3", "value": 6, "tags": ["highlight:red"]},
        {"cell_ref": "A4", "value": 7},  # null against null: a match
    )
    colour = score_extraction(facts, truth).channels["color_mapping"]
    assert (colour.total, colour.correct) == (4, 2)
    assert [(m.cell, m.expected, m.actual) for m in colour.mismatches] == [
        ("S!A1", {"fill": "navy"}, None),
        ("S!A2", None, {"fill": "green"}),
    ]


def test_a_ragspine_fixture_with_three_wrong_merge_spans_scores_58_of_61_as_ragspine_does():
    # RAGSpine's fixture shape: 61 aligned cells, most of them with merge_span null on both sides;
    # three header cells whose span the parser got wrong. RAGSpine: 58/61 = 0.9508, above 0.9.
    truth_rows = [{"cell_ref": f"B{r}", "value": r, "merge_span": None} for r in range(2, 60)]
    headers = (1, 60, 61)
    truth_rows += [{"cell_ref": f"A{r}", "value": f"H{r}", "merge_span": [f"A{r}", f"C{r}"]} for r in headers]
    fact_rows = [{**row, "merge_span": None} for row in truth_rows[:58]]
    fact_rows += [{"cell_ref": f"A{r}", "value": f"H{r}", "merge_span": [f"A{r}", f"B{r}"]} for r in headers]
    spans = score_extraction(cells(*fact_rows), cells(*truth_rows)).channels["header_attribution"]
    assert (spans.correct, spans.total) == (58, 61)
    assert spans.accuracy == 58 / 61 and spans.accuracy >= 0.9


def test_only_a_channel_without_aligned_cells_has_nothing_to_measure():
    score = score_extraction(cells({"cell_ref": "A1", "value": 1}), cells({"cell_ref": "A1", "value": 1}))
    spans = score.channels["header_attribution"]
    assert (spans.total, spans.correct, spans.accuracy, spans.mismatches) == (1, 1, 1.0, ())
    assert score.accuracies() == {"cell_value": 1.0, "color_mapping": 1.0, "header_attribution": 1.0}
    nothing = score_extraction(cells({"cell_ref": "A1", "value": 1}), cells({"cell_ref": "A2", "value": 1}))
    assert nothing.accuracies() == {"cell_value": None, "color_mapping": None, "header_attribution": None}


def test_empty_inputs_score_nothing_without_nan_or_placeholder():
    score = score_extraction({}, {})
    assert (score.aligned, score.facts_only, score.truth_only) == (0, 0, 0)
    assert [score.channels[name].accuracy for name in CHANNELS] == [None, None, None]  # null, total 0


def test_mismatches_are_in_cell_order():
    refs = ["B10", "A2", "AA1", "A10", "B2"]
    truth = cells(*({"cell_ref": ref, "value": 1} for ref in refs))
    facts = cells(*({"cell_ref": ref, "value": 2} for ref in refs))
    mismatches = score_extraction(facts, truth).channels["cell_value"].mismatches
    assert [m.cell for m in mismatches] == ["S!AA1", "S!A2", "S!B2", "S!A10", "S!B10"]
    assert cell_order("Revenue by region!AB12") == ("Revenue by region", 12, 28)

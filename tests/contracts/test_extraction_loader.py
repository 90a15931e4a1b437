"""Extraction facts (tolerant, quarantining) and ground truth (strict) loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.extraction import ExtractionCell, load_facts, load_truth
from ragspine_pipeline.errors import InputError


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def fact(sheet="Summary", ref="B4", **fields) -> str:
    return json.dumps({"sheet": sheet, "cell_ref": ref, **fields})


# -- facts ----------------------------------------------------------------------------------------------


def test_valid_facts_are_keyed_by_sheet_and_cell_and_keep_extra_keys(tmp_path):
    path = write_lines(
        tmp_path / "facts.jsonl",
        [fact(value=1702, tags={"fill": "green"}, merge_span=["B4", "C4"], parser="x 1.0"), "", "   "],
    )
    load = load_facts(path)
    assert list(load.cells) == ["Summary!B4"]
    cell = load.cells["Summary!B4"]
    assert (cell.value, cell.tags, cell.merge_span) == (1702, {"fill": "green"}, ["B4", "C4"])
    assert cell.model_extra == {"parser": "x 1.0"}
    assert load.invalid == [] and load.duplicates == 0


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        ("{not json", None, "malformed JSON"),
        ("[1, 2]", None, "expected a JSON object, got array"),
        (json.dumps({"cell_ref": "B4", "value": 1}), "sheet", "missing"),
        (fact(sheet=""), "sheet", "must not be empty"),
        (fact(sheet=7), "sheet", "must be a string, got number"),
        (json.dumps({"sheet": "Summary", "value": 1}), "cell_ref", "missing"),
        (fact(ref="A0"), "cell_ref", "is not an A1-style reference"),
        (fact(ref="b4"), "cell_ref", "is not an A1-style reference"),  # lower case is rejected, not fixed
        (fact(ref="$B$4"), "cell_ref", "is not an A1-style reference"),
        (fact(ref="ABCD1"), "cell_ref", "is not an A1-style reference"),
        (fact(ref=""), "cell_ref", "is not an A1-style reference"),
        (fact(value=[1, 2]), "value", "must be a string, number or boolean, got array"),
        (fact(tags="green"), "tags", "must be an object or an array, got string"),
        (fact(merge_span="B4:C4"), "merge_span", "must be an array, got string"),
        ('{"sheet": "Summary", "cell_ref": "B4", "value": NaN}', "value", "must be a finite number"),
    ],
)
def test_a_malformed_line_is_quarantined_with_its_line_number(tmp_path, line, field, reason):
    path = write_lines(
        tmp_path / "facts.jsonl", [fact(ref="A1", value="Title"), "", line, fact(ref="C4", value=2)]
    )
    load = load_facts(path)
    assert list(load.cells) == ["Summary!A1", "Summary!C4"]  # the rest of the file is read
    [error] = load.invalid
    assert error.line == 3 and error.field == field
    message = str(error)
    assert message.startswith(f"{path}:3: ") and reason in message and "\n" not in message
    if field is not None:
        assert f"field '{field}'" in message


def test_a_line_that_is_not_utf8_is_quarantined(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_bytes(fact(value="ok").encode() + b"\n" + b'{"sheet": "\xff"}\n')
    load = load_facts(path)
    assert list(load.cells) == ["Summary!B4"]
    assert [(e.line, "not UTF-8" in str(e)) for e in load.invalid] == [(2, True)]


def test_duplicates_last_wins_and_are_counted(tmp_path):
    path = write_lines(
        tmp_path / "facts.jsonl",
        [fact(value=1), fact(ref="C4", value=5), fact(value=2), fact(value=3), fact(ref="A0", value=9)],
    )
    load = load_facts(path)
    assert load.cells["Summary!B4"].value == 3
    assert load.duplicates == 2  # an invalid line with the same key is not a duplicate
    assert len(load.invalid) == 1


def test_a_missing_facts_file_is_fatal(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_facts(tmp_path / "nope.jsonl")


def test_a_python_tuple_is_read_as_a_list_recursively():
    cell = ExtractionCell(sheet="S", cell_ref="A1", merge_span=(("A1", 1), ("D1", 4)))
    assert cell.merge_span == [["A1", 1], ["D1", 4]]
    assert cell.key == "S!A1"


def test_null_and_absent_fields_mean_the_same():
    assert ExtractionCell.model_validate({"sheet": "S", "cell_ref": "A1", "tags": None}).tags is None


# -- ground truth ---------------------------------------------------------------------------------------


def cell(ref="B4", sheet="Summary", **fields) -> dict:
    return {"sheet": sheet, "cell_ref": ref, **fields}


@pytest.mark.parametrize("wrap", [lambda cells: cells, lambda cells: {"workbook": "K", "cells": cells}])
def test_truth_as_an_array_or_an_object_with_cells(tmp_path, wrap):
    path = tmp_path / "truth.json"
    path.write_text(json.dumps(wrap([cell("A1", value="T"), cell(value=1702)])), encoding="utf-8")
    truth = load_truth(path)
    assert list(truth) == ["Summary!A1", "Summary!B4"]
    assert truth["Summary!B4"].value == 1702


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{nope", ":1: malformed JSON"),
        ('"cells"', "expected a JSON array of cells"),
        ('{"rows": []}', "field 'cells'"),
        ('{"cells": {}}', "field 'cells': must be an array of cells, got object"),
        (json.dumps([cell("A1"), 3]), "id=cells[1]: expected a JSON object, got number"),
        (json.dumps([cell("A1"), {"cell_ref": "B2"}]), "id=cells[1]: field 'sheet': missing"),
        (json.dumps([cell("A1"), cell("B0")]), "id=cells[1]: field 'cell_ref': \"B0\" is not an A1-style"),
        (
            json.dumps([cell("A1"), cell("B2"), cell("A1")]),
            "id=Summary!A1: duplicate cell: cells[2] repeats cells[0]",
        ),
    ],
)
def test_truth_problems_are_fatal_and_name_the_file_and_cell(tmp_path, content, expected):
    path = tmp_path / "truth.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_truth(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message


def test_unreadable_truth_is_fatal(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_truth(tmp_path / "missing.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="not UTF-8"):
        load_truth(tmp_path / "bin.json")

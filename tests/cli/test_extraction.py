"""``ragspine-eval extraction`` end to end: exit codes 0/1/2, the JSON shape, Markdown, promotion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main

TRUTH = [
    {
        "sheet": "Summary",
        "cell_ref": "A1",
        "value": "Kestrel",
        "tags": {"fill": "navy"},
        "merge_span": ["A1", "F1"],
    },
    {"sheet": "Summary", "cell_ref": "B4", "value": 1702, "tags": {"fill": "green"}},
    {"sheet": "Summary", "cell_ref": "C4", "value": 1810},
    {"sheet": "Summary", "cell_ref": "D4", "value": 1905},  # never extracted
]
FACTS = [
    {
        "sheet": "Summary",
        "cell_ref": "A1",
        "value": "Kestrel",
        "tags": {"fill": "navy"},
        "merge_span": ["A1", "F1"],
    },
    {"sheet": "Summary", "cell_ref": "B4", "value": 1702.0},  # fill lost
    {"sheet": "Summary", "cell_ref": "C4", "value": "1,810"},  # misread
    {"sheet": "Summary", "cell_ref": "C4", "value": 1810},  # ... then re-emitted: the last line wins
    {"sheet": "Summary", "cell_ref": "Z9", "value": "note"},  # not in the ground truth
]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    truth, facts = tmp_path / "truth.json", tmp_path / "facts.jsonl"
    truth.write_text(json.dumps({"cells": TRUTH}), encoding="utf-8")
    lines = [json.dumps(f) for f in FACTS] + ['{"sheet": "Summary", "cell_ref": "A0"}']
    facts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"truth": truth, "facts": facts, "baseline": tmp_path / "baseline.json"}


def run(capsys, files, *extra):
    code = main(["extraction", "--facts", str(files["facts"]), "--truth", str(files["truth"]), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report_without_a_baseline_passes(capsys, files):
    code, out, err = run(capsys, files)
    report = json.loads(out)
    assert code == 0 and report["pass"] is True and report["baseline"] is None
    assert set(report) == {
        "channels", "aligned", "facts_only", "truth_only", "duplicates", "invalid_facts", "baseline", "pass",
    }  # fmt: skip
    assert (report["aligned"], report["facts_only"], report["truth_only"], report["duplicates"]) == (
        3,
        1,
        1,
        1,
    )
    assert report["channels"]["cell_value"] == {"total": 3, "correct": 3, "accuracy": 1.0, "mismatches": []}
    assert report["channels"]["color_mapping"] == {  # C4: no tags on either side is a match
        "total": 3,
        "correct": 2,
        "accuracy": 0.6667,
        "mismatches": [{"cell": "Summary!B4", "expected": {"fill": "green"}, "actual": None}],
    }
    assert report["channels"]["header_attribution"]["accuracy"] == 1.0
    assert report["invalid_facts"]["count"] == 1
    [error] = report["invalid_facts"]["errors"]
    assert error.startswith(f"{files['facts']}:6: field 'cell_ref': \"A0\" is not an A1-style reference")
    assert "1 invalid fact line(s)" in err


def test_a_channel_below_its_threshold_exits_1(capsys, files):
    files["baseline"].write_text(json.dumps({"cell_value": 1.0, "color_mapping": 0.7}), encoding="utf-8")
    code, out, _ = run(capsys, files, "--baseline", str(files["baseline"]))
    report = json.loads(out)
    assert code == 1 and report["pass"] is False
    assert report["baseline"] == {
        "path": str(files["baseline"]),
        "thresholds": {"cell_value": 1.0, "color_mapping": 0.7},
        "failed": [{"channel": "color_mapping", "accuracy": 0.6667, "threshold": 0.7, "delta": -0.0333}],
        "unmeasured": [],
    }


def test_equal_to_the_threshold_exits_0(capsys, files):
    files["baseline"].write_text(json.dumps({"header_attribution": 1.0, "cell_value": 1.0}), encoding="utf-8")
    code, out, _ = run(capsys, files, "--baseline", str(files["baseline"]))
    assert code == 0 and json.loads(out)["baseline"]["failed"] == []


def test_unusable_input_exits_2_with_one_line(capsys, files):
    files["baseline"].write_text('{"colour": 0.9}', encoding="utf-8")
    code, out, err = run(capsys, files, "--baseline", str(files["baseline"]))
    assert code == 2 and out == ""
    assert err.strip() == f"ragspine-eval: error: {files['baseline']}: field 'colour': unknown channel " + (
        "(expected one of: cell_value, color_mapping, header_attribution)"
    )
    files["truth"].write_text(json.dumps([TRUTH[0], TRUTH[0]]), encoding="utf-8")
    code, _, err = run(capsys, files)
    assert code == 2 and f"{files['truth']}: id=Summary!A1: duplicate cell" in err and err.count("\n") == 1


def test_promote_needs_a_baseline(capsys, files):
    code, _, err = run(capsys, files, "--promote")
    assert code == 2 and "--promote: needs --baseline" in err


def test_promote_after_a_passing_run_and_not_after_a_failing_one(capsys, files):
    baseline = files["baseline"]
    code, _, err = run(capsys, files, "--baseline", str(baseline), "--promote")
    assert code == 0 and "promoted" in err
    assert json.loads(baseline.read_text("utf-8")) == {
        "cell_value": 1.0,
        "color_mapping": 2 / 3,
        "header_attribution": 1.0,
    }
    files["facts"].write_text(json.dumps({**FACTS[0], "merge_span": ["A1", "E1"]}) + "\n", encoding="utf-8")
    before = baseline.read_bytes()
    code, out, err = run(capsys, files, "--baseline", str(baseline), "--promote")
    assert code == 1 and "not promoting" in err
    assert [f["channel"] for f in json.loads(out)["baseline"]["failed"]] == ["header_attribution"]
    assert baseline.read_bytes() == before


def test_markdown_report_to_a_file(capsys, files, tmp_path):
    files["baseline"].write_text(
        json.dumps({"color_mapping": 0.9, "header_attribution": 1.0}), encoding="utf-8"
    )
    out_file = tmp_path / "report.md"
    code, out, _ = run(
        capsys, files, "--baseline", str(files["baseline"]), "--format", "markdown", "--out", str(out_file)
    )
    text = out_file.read_text("utf-8")
    assert code == 1 and out == ""
    assert text.startswith("# Extraction evaluation: FAIL (color_mapping 0.6667 < 0.9000)")
    assert "| color_mapping | 0.6667 | 2 | 3 | 0.9000 | **FAIL** |" in text
    assert "| cell_value | 1.0000 | 3 | 3 | — | not checked |" in text
    assert "| header_attribution | 1.0000 | 3 | 3 | 1.0000 | pass |" in text
    assert '| `Summary!B4` | `{"fill": "green"}` | `null` |' in text
    assert f"- `{files['facts']}:6: field 'cell_ref':" in text


def test_unmeasured_channel_in_the_baseline_passes_and_is_reported(capsys, files):
    facts = [f for f in FACTS if f["cell_ref"] == "Z9"]  # no cell on both sides: nothing to measure
    files["facts"].write_text("".join(json.dumps(f) + "\n" for f in facts), encoding="utf-8")
    files["baseline"].write_text(json.dumps({"header_attribution": 1.0}), encoding="utf-8")
    code, out, err = run(capsys, files, "--baseline", str(files["baseline"]))
    report = json.loads(out)
    assert code == 0 and report["baseline"]["unmeasured"] == ["header_attribution"]
    assert report["channels"]["header_attribution"] == {
        "total": 0,
        "correct": 0,
        "accuracy": None,  # nothing to measure: null with its total, never a placeholder
        "mismatches": [],
    }
    assert "nothing to measure: header_attribution" in err


def test_an_invalid_line_is_left_out_of_every_denominator(capsys, files):
    bad_value = {"sheet": "Summary", "cell_ref": "D4", "value": [1905], "tags": {"fill": "red"}}
    with files["facts"].open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(bad_value) + "\n")
    code, out, _ = run(capsys, files)
    report = json.loads(out)
    assert code == 0 and report["invalid_facts"]["count"] == 2
    assert (
        "facts.jsonl:7: field 'value': must be a string, number or boolean"
        in report["invalid_facts"]["errors"][1]
    )
    assert (report["aligned"], report["truth_only"]) == (3, 1)  # D4 is still not extracted
    assert [report["channels"][name]["total"] for name in report["channels"]] == [3, 3, 3]

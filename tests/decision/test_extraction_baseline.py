"""Extraction thresholds: strictly below fails, equal passes, unmeasured is not failed, promotion ratchets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.decision.extraction_baseline import compare, load_thresholds, promote
from ragspine_pipeline.errors import InputError


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")
    return path


# -- compare --------------------------------------------------------------------------------------------


def test_equal_passes():
    check = compare({"cell_value": 0.98, "color_mapping": 0.95}, {"cell_value": 0.98, "color_mapping": 0.95})
    assert check.passed and check.failed == [] and check.unmeasured == []


def test_strictly_below_fails_and_strictly_above_passes():
    below = compare({"color_mapping": 0.95}, {"color_mapping": 0.9499999999})
    assert not below.passed
    [failure] = below.failed
    assert (failure.channel, failure.threshold) == ("color_mapping", 0.95)
    assert failure.delta == pytest.approx(-1e-10)
    assert compare({"color_mapping": 0.95}, {"color_mapping": 0.9500000001}).passed


def test_a_listed_channel_with_nothing_to_measure_is_unmeasured_not_failed():
    check = compare(
        {"header_attribution": 1.0, "cell_value": 0.9}, {"header_attribution": None, "cell_value": 0.5}
    )
    assert check.unmeasured == ["header_attribution"]
    assert [f.channel for f in check.failed] == ["cell_value"]


def test_channels_not_listed_are_not_checked():
    assert compare({}, {"cell_value": 0.0}).passed


# -- load -----------------------------------------------------------------------------------------------


def test_load_keeps_listed_channels(tmp_path):
    path = write_json(tmp_path / "b.json", {"header_attribution": 1, "cell_value": 0.98})
    assert load_thresholds(path) == {"cell_value": 0.98, "header_attribution": 1.0}
    assert load_thresholds(tmp_path / "missing.json") == {}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"colour_mapping": 0.9}', "field 'colour_mapping': unknown channel"),
        ('{"cell_value": "0.9"}', "field 'cell_value': threshold must be a number in [0, 1], got string"),
        ('{"cell_value": true}', "field 'cell_value': threshold must be a number in [0, 1], got true"),
        ('{"cell_value": 1.01}', "field 'cell_value': threshold must be a number in [0, 1], got 1.01"),
        ('{"cell_value": -0.1}', "field 'cell_value'"),
        ('{"cell_value": null}', "field 'cell_value'"),
        ('{"cell_value": 0.9, "cell_value": 0.8}', "field 'cell_value': duplicate key"),
        ("[0.9]", "expected a JSON object"),
        ("{", "malformed JSON"),
        ("  \n", "empty file"),
    ],
)
def test_a_bad_thresholds_file_names_the_file_and_key(tmp_path, content, expected):
    path = tmp_path / "baseline.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_thresholds(path)
    assert str(caught.value).startswith(str(path)) and expected in str(caught.value)


# -- promote --------------------------------------------------------------------------------------------


def test_promote_raises_listed_thresholds_adds_new_ones_and_never_lowers(tmp_path):
    path = write_json(
        tmp_path / "b.json", {"cell_value": 0.98, "color_mapping": 0.95, "header_attribution": 1.0}
    )
    merged = promote(
        path, {"cell_value": 0.99, "color_mapping": 0.90, "header_attribution": None}, passed=True
    )
    assert merged == {"cell_value": 0.99, "color_mapping": 0.95, "header_attribution": 1.0}
    assert load_thresholds(path) == merged


def test_promote_creates_a_missing_file_with_the_measured_channels(tmp_path):
    path = tmp_path / "b.json"
    promote(path, {"cell_value": 0.9948186528497409, "color_mapping": None}, passed=True)
    assert json.loads(path.read_text("utf-8")) == {"cell_value": 0.9948186528497409}  # unrounded
    promote(path, {"color_mapping": 0.97}, passed=True)
    assert load_thresholds(path) == {"cell_value": 0.9948186528497409, "color_mapping": 0.97}


def test_a_failing_run_never_promotes(tmp_path):
    path = write_json(tmp_path / "b.json", {"cell_value": 0.98})
    before = path.read_bytes()
    with pytest.raises(InputError, match="refusing to promote a failing run"):
        promote(path, {"cell_value": 0.99}, passed=False)
    assert path.read_bytes() == before
    with pytest.raises(InputError):
        promote(tmp_path / "new.json", {"cell_value": 0.99}, passed=False)
    assert not (tmp_path / "new.json").exists()


def test_promote_does_not_rewrite_an_unchanged_file(tmp_path):
    path = tmp_path / "b.json"
    promote(path, {"cell_value": 0.98}, passed=True)
    stamp = path.stat().st_mtime_ns
    inode = path.stat().st_ino
    promote(path, {"cell_value": 0.97}, passed=True)
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == (stamp, inode)


def test_promote_rejects_misuse(tmp_path):
    with pytest.raises(ValueError, match="unknown extraction channel"):
        promote(tmp_path / "b.json", {"colour": 0.9}, passed=True)
    with pytest.raises(ValueError, match="not an accuracy"):
        promote(tmp_path / "b.json", {"cell_value": float("nan")}, passed=True)

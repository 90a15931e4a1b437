"""`ragspine-eval score` reads every metric name through one resolver and refuses ambiguous inputs:
short names count in a baseline, unknown names, repeated keys and non-numeric thresholds are exit 2
with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "wfgy"
GOLD, TRACES = str(EXAMPLES / "gold.jsonl"), str(EXAMPLES / "traces.jsonl")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def errors(err: str) -> list[str]:
    """The error lines of standard error (the unfrozen-golden-set warning aside)."""
    return [line for line in err.splitlines() if not line.startswith("ragspine-eval: warning:")]


def hallucinating(tmp_path: Path) -> tuple[str, str]:
    """Two WFGY cases: the answerable one answered with its citation, the unanswerable one answered too
    (under_refusal 1.0)."""
    gold = [
        {"qid": "a", "question": "Who approves leave?", "answerable": True,
         "gold_claim_substr": ["the line manager"], "gold_citations": ["hr#1"]},
        {"qid": "u", "question": "What is the CEO's salary?", "answerable": False,
         "gold_claim_substr": [], "gold_citations": []},
    ]  # fmt: skip
    traces = [
        {"qid": "a", "retrieved_ids": ["hr#1"],
         "answer_json": {"claim": "Leave is approved by the line manager.", "citations": ["hr#1"]}},
        {"qid": "u", "retrieved_ids": ["hr#9"],
         "answer_json": {"claim": "It is 2 million.", "citations": ["hr#9"]}},
    ]  # fmt: skip
    gold_path, trace_path = tmp_path / "gold.jsonl", tmp_path / "traces.jsonl"
    gold_path.write_text("".join(json.dumps(row) + "\n" for row in gold))
    trace_path.write_text("".join(json.dumps(row) + "\n" for row in traces))
    return str(gold_path), str(trace_path)


# -- baselines -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["under", "under_refusal", " under "])
def test_a_regression_on_a_short_name_in_the_baseline_blocks(tmp_path, capsys, name):
    gold, traces = hallucinating(tmp_path)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"golden": {"metrics": {name: 0.0}}}))
    code, out, _ = run(capsys, "score", "--gold", gold, "--trace", traces, "--gates", "precision=0",
                       "--baseline", str(baseline))  # fmt: skip
    report = json.loads(out)
    assert code == 1 and report["release"]["decision"] == "block"
    assert [(r["metric"], r["baseline"], r["current"]) for r in report["release"]["regressions"]] == [
        ("under_refusal", 0.0, 1.0)
    ]
    assert report["release"]["unmeasured_baseline_metrics"] == []


def test_short_names_over_and_recall_are_checked_too(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"golden": {"metrics": {"over": 0.0, "recall@5": 1.0}}}))
    code, out, _ = run(capsys, "score", "--gold", GOLD, "--trace", TRACES, "--baseline", str(baseline))
    regressions = {r["metric"] for r in json.loads(out)["release"]["regressions"]}
    assert code == 1 and regressions == {"over_refusal", "recall@k"}


def test_promote_writes_the_metric_a_short_name_stands_for(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"golden": {"metrics": {"over": 0.5}}}))
    code, _, _ = run(
        capsys, "score", "--gold", GOLD, "--trace", TRACES, "--baseline", str(baseline), "--promote"
    )
    saved = json.loads(baseline.read_text())["golden"]["metrics"]
    assert code == 0 and "over" not in saved and saved["over_refusal"] == 0.0625  # tightened from 0.5


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"precison": 0.8}, "mode 'golden': unknown metric 'precison' (known: admissible_rate, "),
        ({"under": 0.1, "under_refusal": 0.2}, "'under' and 'under_refusal' both name the metric"),
        ({"precision": True}, "metric 'precision' must be a finite number, got true"),
        ({"fabrication": 0}, "'fabrication' is a count, not a metric"),
    ],
)
def test_a_baseline_the_run_cannot_check_is_unusable(tmp_path, capsys, metrics, message):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"golden": {"metrics": metrics}}))
    before = baseline.read_bytes()
    code, out, err = run(capsys, "score", "--gold", GOLD, "--trace", TRACES, "--baseline", str(baseline),
                         "--promote")  # fmt: skip
    (line,) = errors(err)
    assert code == 2 and out == "" and baseline.read_bytes() == before
    assert line.startswith(f"ragspine-eval: error: {baseline}: mode 'golden': ") and message in line


def test_an_unknown_baseline_metric_lists_the_known_names_and_short_names(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"tool": {"metrics": {"recal": 0.9}}}))
    _, _, err = run(capsys, "score", "--gold", GOLD, "--trace", TRACES, "--baseline", str(baseline),
                    "--mode", "tool")  # fmt: skip
    (line,) = errors(err)
    assert "mode 'tool': unknown metric 'recal'" in line
    assert "precision" in line and "judge_faithfulness" in line
    assert (
        "short names: under for under_refusal, over for over_refusal, recall or recall@5 for recall@k" in line
    )


# -- the gates config ------------------------------------------------------------------------------


VALID_NUMBER, FINITE = "Input should be a valid number", "Input should be a finite number"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # A key repeated in one mapping, at any depth: refused with its line, never "the last one wins".
        ("gates:\n  precision: {min: 0.5}\n  precision: {min: 0.1}\n",
         ":3: duplicate key 'precision' (first on line 2)"),
        ("gates:\n  precision: {min: 0.5}\nk: 5\ngates:\n  chr: {min: 0.1}\n",
         ":4: duplicate key 'gates' (first on line 1)"),
        ("gates:\n  precision: {min: 0.5, min: 0.1}\n", ":2: duplicate key 'min' (first on line 2)"),
        ("alerts:\n  runbook:\n    release: a\n    release: b\n",
         ":4: duplicate key 'release' (first on line 3)"),
        # Thresholds and settings are numbers of the right kind.
        ("gates:\n  precision: {min: true}\n", f"field 'gates.precision.min': {VALID_NUMBER}"),
        ('gates:\n  precision: {min: "0.5"}\n', f"field 'gates.precision.min': {VALID_NUMBER}"),
        ("gates:\n  precision: {min: .nan}\n", f"field 'gates.precision.min': {FINITE}"),
        ("gates:\n  over: {max: .inf}\n", f"field 'gates.over.max': {FINITE}"),
        ("slice_gate: {min_rate: true}\n", f"field 'slice_gate.min_rate': {VALID_NUMBER}"),
        ("slice_gate: {min_n: true}\n", "field 'slice_gate.min_n': Input should be a valid integer"),
        ("k: true\n", "field 'k': Input should be a valid integer"),
        ("production: {min_n: true}\n", "field 'production.min_n': Input should be a valid integer"),
        ('production: {fdr: "0.05"}\n', f"field 'production.fdr': {VALID_NUMBER}"),
        ("production: {all_traffic_weight: .inf}\n", f"field 'production.all_traffic_weight': {FINITE}"),
        # Metric names: known, and one name per metric.
        ("gates:\n  precison: {min: 0.8}\n", "field 'gates': unknown metric 'precison' (known: "),
        ("gates:\n  under: {max: 0.1}\n  under_refusal: {max: 0.2}\n", "'under' and 'under_refusal' both"),
    ],
)  # fmt: skip
def test_an_ambiguous_or_non_numeric_config_is_unusable(tmp_path, capsys, config, message):
    path = tmp_path / "gates.yaml"
    path.write_text(config)
    code, out, err = run(capsys, "score", "--gold", GOLD, "--trace", TRACES, "--config", str(path))
    (line,) = errors(err)
    assert code == 2 and out == "" and line.startswith(f"ragspine-eval: error: {path}") and message in line


def test_short_names_and_whole_numbers_in_the_config_are_fine(tmp_path, capsys):
    path = tmp_path / "gates.yaml"
    path.write_text("gates:\n  under: {max: 0}\n  over: {max: 1}\n  recall: {min: 0.5}\n")
    code, out, _ = run(capsys, "score", "--gold", GOLD, "--trace", TRACES, "--config", str(path))
    gates = [(g["metric"], g["op"], g["threshold"]) for g in json.loads(out)["gates"]]
    assert code == 0
    assert gates == [("under_refusal", "<=", 0.0), ("over_refusal", "<=", 1.0), ("recall@k", ">=", 0.5)]


# -- --gates ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        ("precision=true", "threshold 'true' is not a number"),
        ("precision=nan", "threshold 'nan' is not a number"),
        ("precision=0.5,precison=0.5", "unknown metric 'precison' (known: "),
        ("under=0.1,under_refusal=0.1", "gate 'under_refusal' is given twice"),
    ],
)
def test_a_bad_gate_list_is_unusable(capsys, gates, message):
    code, out, err = run(capsys, "score", "--gold", GOLD, "--trace", TRACES, "--gates", gates)
    (line,) = errors(err)
    assert code == 2 and out == "" and line.startswith("ragspine-eval: error: --gates: ") and message in line


# -- extraction thresholds -------------------------------------------------------------------------


def test_a_boolean_extraction_threshold_is_unusable(tmp_path, capsys):
    truth, facts = tmp_path / "truth.json", tmp_path / "facts.jsonl"
    truth.write_text(json.dumps({"cells": [{"sheet": "S", "cell_ref": "A1", "value": 1}]}))
    facts.write_text(json.dumps({"sheet": "S", "cell_ref": "A1", "value": 1}) + "\n")
    baseline = tmp_path / "thresholds.json"
    baseline.write_text('{"cell_value": true}')
    code, out, err = run(capsys, "extraction", "--facts", str(facts), "--truth", str(truth),
                         "--baseline", str(baseline))  # fmt: skip
    assert code == 2 and out == ""
    assert err == (
        f"ragspine-eval: error: {baseline}: field 'cell_value': threshold must be a number in [0, 1], "
        "got true\n"
    )

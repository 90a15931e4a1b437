"""Gate thresholds are checked against the range of their metric's kind (``metrics.Metric.kind``): a rate
in [0, 1], a count at least 0; one error line naming the gate, its value and the range. And
``--references`` must name a directory, whether or not a case needs it."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ragspine_pipeline import cli
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.decision.gates import Gate, GateSpecError, parse_gates
from ragspine_pipeline.errors import InputError
from tests.cli.test_baseline_integrity import write_gold, write_traces

OUT_OF_RANGE = [  # (the gates block, what the one line must name)
    ("under_refusal: {min: -1}", ["'under_refusal'", "min -1", "rate", "[0, 1]"]),
    ("precision: {max: 1.5}", ["'precision'", "max 1.5", "rate", "[0, 1]"]),
    ("fabrication: {min: -3}", ["'fabrication'", "min -3", "count", ">= 0"]),
    ("under: {max: 2}", ["'under_refusal'", "max 2", "[0, 1]"]),
]


@pytest.mark.parametrize(("gates", "named"), OUT_OF_RANGE, ids=[g for g, _ in OUT_OF_RANGE])
def test_a_config_gate_out_of_its_metric_range_is_one_line(tmp_path, gates, named):
    path = tmp_path / "gates.yaml"
    path.write_text(f"gates:\n  {gates}\n")
    with pytest.raises(InputError) as caught:
        load_config(path, KNOWN_METRICS)
    message = str(caught.value)
    assert "\n" not in message and "out of range" in message
    assert all(part in message for part in named), message


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("under=-1", ["'under' (under_refusal)", "-1", "[0, 1]"]),
        ("precision=1.5", ["'precision'", "1.5", "[0, 1]"]),
        ("fabrication=-3", ["'fabrication'", "-3", ">= 0"]),
    ],
)
def test_a_gates_option_out_of_range_names_the_gate_as_written(spec, named):
    with pytest.raises(GateSpecError) as caught:
        parse_gates(spec, KNOWN_METRICS)
    assert all(part in str(caught.value) for part in named), str(caught.value)


def test_the_edges_of_each_range_are_accepted():
    gates = parse_gates("under_refusal=0,precision=1,fabrication=0,compliance=0.0", KNOWN_METRICS)
    assert [g.threshold for g in gates] == [0, 1, 0, 0]
    assert Gate("fabrication", 12.0).threshold == 12.0  # a count has no upper bound
    assert Gate("judge_faithfulness", 4.0).threshold == 4.0  # a judged score keeps its own scale
    with pytest.raises(GateSpecError, match="out of range"):
        Gate("recall@k", -0.01, "min")


@pytest.fixture
def run(tmp_path):
    write_gold(tmp_path / "gold.jsonl")
    write_traces(tmp_path / "traces.jsonl", np.random.default_rng(3), p=1.0)
    return ["score", "--gold", str(tmp_path / "gold.jsonl"), "--trace", str(tmp_path / "traces.jsonl")]


@pytest.mark.parametrize(
    "gates", ["under_refusal: {min: -1}", "precision: {max: 1.5}", "fabrication: {min: -3}"]
)
def test_the_cli_refuses_such_a_config_with_one_line_and_exit_2(tmp_path, capsys, run, gates):
    (tmp_path / "gates.yaml").write_text(f"gates:\n  {gates}\n")
    assert cli.main([*run, "--config", str(tmp_path / "gates.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of range" in err and gates.split(":")[0] in err


@pytest.mark.parametrize("kind", ["FIFO", "file", "missing"])
def test_references_that_are_not_a_directory_are_one_line_even_when_no_case_needs_them(
    tmp_path, capsys, run, kind
):
    references = tmp_path / "refs"
    if kind == "FIFO":
        os.mkfifo(references)
    elif kind == "file":
        references.write_text("not a folder\n")
    assert cli.main([*run, "--gates", "compliance=0.0", "--references", str(references)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(references) in err and "--references" in err
    if kind == "FIFO":
        assert "must be a directory" in err and "a FIFO" in err


def test_references_naming_a_directory_are_accepted(tmp_path, capsys, run):
    (tmp_path / "refs").mkdir()
    assert cli.main([*run, "--gates", "compliance=0.0", "--references", str(tmp_path / "refs")]) == 0

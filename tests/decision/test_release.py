"""Hard gates block the release; soft gates only warn (ERROR vs WARN checks in the code location)."""

from __future__ import annotations

import pytest

from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.decision.gates import Gate, evaluate_gates, unmeasured
from ragspine_pipeline.decision.release import decide
from ragspine_pipeline.errors import InputError


def _decide(gates: list[Gate], metrics: dict[str, float]):
    return decide(
        evaluate_gates(gates, metrics),
        [],
        None,
        histogram=None,
        index_versions={"ix-1": 3},
        golden_version=None,
        golden_sha256=None,
        run_id="r",
        unmeasured=unmeasured(gates, metrics),
    )


def test_a_failing_soft_gate_warns_and_ships():
    release = _decide([Gate("precision", 0.8), Gate("point_coverage", 0.8, "min", "soft")],
                      {"precision": 0.9, "point_coverage": 0.5})  # fmt: skip
    assert release.decision == "ship"
    assert release.failed_gates == []
    assert [(g.metric, g.severity, round(g.delta, 4)) for g in release.warned_gates] == [
        ("point_coverage", "soft", -0.3)
    ]


def test_a_failing_hard_gate_blocks_whatever_the_soft_ones_say():
    release = _decide([Gate("precision", 0.8), Gate("point_coverage", 0.8, "min", "soft")],
                      {"precision": 0.7, "point_coverage": 0.9})  # fmt: skip
    assert release.decision == "block"
    assert [g.metric for g in release.failed_gates] == ["precision"]
    assert release.warned_gates == []


def test_a_gate_on_a_metric_nobody_measured_fails_and_blocks_when_hard():
    # e.g. a judged metric when the judge endpoint was down: the gate never passes for want of a number
    gates = [
        Gate("precision", 0.8),
        Gate("judge_faithfulness", 4.0),
        Gate("judge_answer_relevancy", 3, "min", "soft"),
    ]
    release = _decide(gates, {"precision": 0.9})
    assert release.decision == "block" and release.failed_gates == []
    assert [(g.metric, g.severity) for g in release.unmeasured_gates] == [
        ("judge_faithfulness", "hard"),
        ("judge_answer_relevancy", "soft"),
    ]
    soft_only = _decide([Gate("precision", 0.8), gates[2]], {"precision": 0.9})
    assert soft_only.decision == "ship" and len(soft_only.unmeasured_gates) == 1
    measured = _decide(gates, {"precision": 0.9, "judge_faithfulness": 4.2, "judge_answer_relevancy": 3.5})
    assert measured.decision == "ship" and measured.unmeasured_gates == []


def test_config_reads_severity_and_defaults_to_hard(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text("gates:\n  precision: {min: 0.8}\n  point_coverage: {min: 0.8, severity: soft}\n")
    gates = load_config(path, KNOWN_METRICS).gate_list(KNOWN_METRICS)
    assert [(g.metric, g.severity) for g in gates] == [("precision", "hard"), ("point_coverage", "soft")]


@pytest.mark.parametrize("severity", ["blocking", "", "HARD"])
def test_config_rejects_an_unknown_severity(tmp_path, severity):
    path = tmp_path / "gates.yaml"
    path.write_text(f"gates:\n  precision: {{min: 0.8, severity: '{severity}'}}\n")
    with pytest.raises(InputError, match=r"field .gates\.precision\.severity."):
        load_config(path, KNOWN_METRICS)

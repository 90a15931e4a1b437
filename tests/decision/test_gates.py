"""Gates: the given list is the complete set; direction by metric; unrounded comparison."""

from __future__ import annotations

import pytest

from ragspine_pipeline.decision.gates import (
    DEFAULT_GATES,
    Gate,
    GateSpecError,
    default_gates,
    evaluate_gates,
    parse_gates,
)
from ragspine_pipeline.scoring.grounded import METRICS


def test_short_names_and_complete_replacement():
    gates = parse_gates("precision=0.80,under=0.05,over=0.10", METRICS)
    assert [(g.metric, g.threshold) for g in gates] == [
        ("precision", 0.8),
        ("under_refusal", 0.05),
        ("over_refusal", 0.1),
    ]


def test_recall_aliases():
    assert parse_gates("recall@5=0.9", METRICS)[0].metric == "recall@k"
    assert parse_gates("recall=0.9", METRICS)[0].metric == "recall@k"


def test_failure_rates_pass_at_or_below_the_rest_at_or_above():
    assert Gate("under_refusal", 0.05).passes(0.05) and not Gate("under_refusal", 0.05).passes(0.0501)
    assert Gate("over_refusal", 0.10).op == "<="
    assert Gate("precision", 0.8).passes(0.8) and not Gate("precision", 0.8).passes(0.7999)
    assert Gate("compliance", 0.98).op == ">="


def test_gates_compare_unrounded_values():
    # 0.79996 displays as 0.8000 but is below the gate.
    (result,) = evaluate_gates([Gate("precision", 0.8)], {"precision": 0.79996})
    assert result.passed is False


def test_defaults_are_the_spec_gates():
    assert (
        {g.metric: g.threshold for g in default_gates()}
        == DEFAULT_GATES
        == {
            "precision": 0.80,
            "chr": 0.75,
            "under_refusal": 0.05,
            "over_refusal": 0.10,
            "compliance": 0.98,
        }
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("precison=0.8", "unknown metric 'precison'"),
        ("precision=high", "threshold 'high' is not a number"),
        ("precision", "is not name=threshold"),
        ("precision=0.8,precision=0.9", "given twice"),
        ("precision=nan", "finite"),
        ("", "empty"),
    ],
)
def test_bad_gate_lists(spec, message):
    with pytest.raises(GateSpecError, match=message):
        parse_gates(spec, METRICS)

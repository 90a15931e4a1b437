"""Gates: the given list is the complete set; direction by metric; unrounded comparison."""

from __future__ import annotations

import pytest

from ragspine_pipeline.decision.gates import (
    DEFAULT_GATES,
    DEFAULT_QA_GATES,
    Gate,
    GateSpecError,
    canonical_metric,
    canonical_names,
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
        ("precision", r"^'precision': write name=value, e\.g\. precision=0\.8$"),
        (
            "precision>=0.8",
            r"^'precision>=0\.8': write name=value, e\.g\. precision=0\.8; the direction is fixed",
        ),
        ("under<=0.05", r"^'under<=0\.05': write name=value, e\.g\. under=0\.05; the direction"),
        ("chr > 0.7", r"^'chr > 0\.7': write name=value, e\.g\. chr=0\.7; "),
        ("chr<0.7", "write name=value, e.g. chr=0.7; "),
        ("precision:0.8", "write name=value, e.g. precision=0.8; "),
        ("precision==0.8", "write name=value, e.g. precision=0.8; "),
        ("precision=>0.8", "write name=value, e.g. precision=0.8; "),
        ("precision=0.8,precision=0.9", "given twice"),
        ("precision=nan", "threshold 'nan' is not a number"),
        ("precision=inf", "threshold 'inf' is not a number"),
        ("precision=true", "threshold 'true' is not a number"),
        ("precision=1_0", "threshold '1_0' is not a number"),
        ("precision=1e999", "finite"),
        ("under=0.1,under_refusal=0.2", "given twice"),
        ("", "empty"),
    ],
)
def test_bad_gate_lists(spec, message):
    with pytest.raises(GateSpecError, match=message):
        parse_gates(spec, METRICS)


def test_one_resolver_for_every_name():
    assert [canonical_metric(n) for n in ("under", " over ", "recall", "recall@10", "precision")] == [
        "under_refusal",
        "over_refusal",
        "recall@k",
        "recall@k",
        "precision",
    ]
    assert canonical_metric("anything") == "anything"  # without known names: resolved, not checked
    with pytest.raises(GateSpecError, match=r"^unknown metric 'anything' \(known: chr, precision\)$"):
        canonical_metric("anything", ["precision", "chr"])  # no short name stands for either


def test_an_unknown_name_lists_the_short_names_of_the_known_metrics():
    with pytest.raises(GateSpecError) as caught:
        canonical_metric("recal", METRICS)
    assert str(caught.value).endswith(
        "; short names: under for under_refusal, over for over_refusal, recall or recall@5 for recall@k)"
    )
    with pytest.raises(GateSpecError) as caught:
        canonical_metric("recal", ["precision", "over_refusal"])
    assert str(caught.value) == (
        "unknown metric 'recal' (known: over_refusal, precision; short names: over for over_refusal)"
    )


def test_two_names_of_one_metric_in_one_mapping_are_an_error():
    assert canonical_names(["under", "over", "chr"]) == {
        "under": "under_refusal",
        "over": "over_refusal",
        "chr": "chr",
    }
    with pytest.raises(GateSpecError, match="'under_refusal' and 'under' both name the metric"):
        canonical_names(["under_refusal", "under"], METRICS)


def test_default_gates_by_dialect():
    assert [g.metric for g in default_gates()] == list(DEFAULT_GATES)
    assert [g.metric for g in default_gates(grounded=False, qa=True)] == list(DEFAULT_QA_GATES)
    assert [g.metric for g in default_gates(qa=True)] == [*DEFAULT_GATES, *DEFAULT_QA_GATES]

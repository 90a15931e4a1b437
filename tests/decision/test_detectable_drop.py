"""The release decision states what the golden set can detect: the smallest drop the baseline test in use
blocks with 80 % power on the run's cases (``scoring.power``), in its dict and in the Markdown and HTML
release reports; left out with the reason when there is no baseline comparison or no case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.decision.baseline import Comparison
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.detectable import detectable_drop
from ragspine_pipeline.decision.evaluation import evaluate
from ragspine_pipeline.decision.gates import Gate, evaluate_gates
from ragspine_pipeline.decision.paired import PairedSettings
from ragspine_pipeline.decision.release import ReleaseDecision, decide
from ragspine_pipeline.reports.html_gates import gates_section
from ragspine_pipeline.reports.markdown import detectable_drop_markdown
from ragspine_pipeline.scoring import power

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wfgy"


def _decision(cases: int | None = None) -> ReleaseDecision:
    return decide(
        evaluate_gates([Gate("precision", 0.8)], {"precision": 0.9}),
        [],
        None,
        histogram=None,
        index_versions={"ix-1": 3},
        golden_version=None,
        golden_sha256=None,
        run_id="r",
        causes=None if cases is None else {"cases": cases, "failing": 0},
    )


def _paired(n: int, alpha: float = 0.05, margin: float = 0.02) -> Comparison:
    return Comparison([], [], {"n": n, "alpha": alpha, "margin": margin, "blocks": False, "improves": False})


@pytest.mark.parametrize("cases", [50, 200])
def test_the_paired_figure_is_power_s_for_the_run_s_cases(cases):
    release = _decision().with_comparison(_paired(cases))
    figure = release.as_dict()["detectable_drop"]
    design = power.PairedDesign(flip_rate=0.05, alpha=0.05, margin=0.02)
    expected = power.paired_detectable_drop(cases, design, 0.8)
    assert figure["drop"] == pytest.approx(expected, abs=1e-4)
    assert {k: figure[k] for k in ("cases", "power", "test", "alpha", "margin", "flip_rate")} == {
        "cases": cases, "power": 0.8, "test": "paired", "alpha": 0.05, "margin": 0.02, "flip_rate": 0.05,
    }  # fmt: skip
    points = {50: "20", 200: "7.7"}[cases]  # 19.8 and 7.65 points, rounded up as `ragspine-eval plan` does
    assert figure["line"].startswith(
        f"With {cases} cases, drops under {points} points are not reliably caught"
    )
    assert "(80 % power; paired test at alpha 0.05, margin 2 points" in figure["line"]
    assert detectable_drop_markdown(release) == f"- {figure['line']}\n"
    assert detectable_drop_markdown(release.as_dict()) == f"- {figure['line']}\n"
    json.dumps(release.record(), allow_nan=False)  # no NaN anywhere
    assert ReleaseDecision.model_validate(release.record()).detectable_drop == figure


def test_the_paired_test_s_own_alpha_and_margin_are_used():
    figure = _decision().with_comparison(_paired(200, alpha=0.01, margin=0.05)).detectable_drop
    design = power.PairedDesign(flip_rate=0.05, alpha=0.01, margin=0.05)
    assert figure["drop"] == pytest.approx(power.paired_detectable_drop(200, design), abs=1e-4)
    assert figure["drop"] > detectable_drop(200, "paired")["drop"]


@pytest.mark.parametrize("cases", [50, 200])
def test_the_strict_figure_for_a_deterministic_system(cases):
    release = _decision(cases).with_comparison(Comparison([], []))  # strict: the golden cases of the run
    figure = release.detectable_drop
    expected = power.paired_detectable_drop(cases, power.PairedDesign(strict=True), 0.8)
    assert figure["drop"] == pytest.approx(expected, abs=1e-4) and figure["test"] == "strict"
    assert figure["line"].endswith("(80 % power; strict comparison, a deterministic system).")
    # The closed form the strict figure takes without flips is the exact power's inverse.
    assert power.paired_power(cases, expected, power.PairedDesign(strict=True)) == pytest.approx(0.8)


def test_the_config_s_test_is_used_when_the_shell_names_it():
    figure = (
        _decision(50)
        .with_comparison(
            Comparison([], []), baseline_test="paired", paired_settings=PairedSettings(margin=0.0)
        )
        .detectable_drop
    )  # paired, but no case outcomes recorded yet: what the test will catch on these 50 cases
    design = power.PairedDesign(flip_rate=0.05, margin=0.0)
    assert figure["test"] == "paired" and figure["drop"] == pytest.approx(
        power.paired_detectable_drop(50, design), abs=1e-4
    )


def test_without_a_baseline_comparison_or_cases_it_is_left_out_with_the_reason():
    alone = _decision(50)
    assert alone.as_dict()["detectable_drop"] == {"reason": "no baseline comparison in this run"}
    assert detectable_drop_markdown(alone) == ""
    none = _decision(0).with_comparison(Comparison([], []))
    assert (
        "drop" not in none.detectable_drop and none.detectable_drop["reason"] == "no golden cases to compare"
    )
    assert detectable_drop_markdown(none) == ""
    few = detectable_drop(1, "paired")  # one case cannot show a significant drop
    assert few["drop"] is None and few["reason"] and few["line"].startswith("With 1 cases, no drop")


def test_the_html_release_report_shows_the_line():
    release = _decision().with_comparison(_paired(50)).as_dict()
    report = {"gates": [{"metric": "precision", "op": "min", "threshold": 0.8, "value": 0.9, "pass": True}]}
    html = gates_section(report, release)
    assert 'data-note="detectable-drop"' in html and "With 50 cases, drops under 20 points" in html
    assert "detectable-drop" not in gates_section(report, _decision().as_dict())


def test_a_scored_run_compared_with_its_baseline_states_it():
    gold = load_gold(EXAMPLE / "gold.jsonl").table
    traces = load_traces(EXAMPLE / "traces.jsonl").table
    run = evaluate(gold, traces, gates=[], config=EvalConfig(), run_id="r", compare_baseline=True)
    figure = run.release.as_dict()["detectable_drop"]
    expected = power.paired_detectable_drop(gold.num_rows, power.PairedDesign(strict=True))
    assert figure["cases"] == gold.num_rows == 20 and figure["drop"] == pytest.approx(expected, abs=1e-4)

"""`ragspine-eval score` on a RAGSpine golden set: QA gates and fabrication in the output, and gated by a
per-mode baseline (a gate strictly below its baseline fails, equal passes; a higher fabrication count
fails)."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.cli import main

SOURCE = {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5,table=1,row=2,col=3"}
CASES = [
    {
        "id": "num-001",
        "question": "HK revenue FY2025?",
        "case_type": "numeric",
        "expected": {
            "clarification": "none",
            "refuse": False,
            "value": 1702.0,
            "unit": "USD_M",
            "source": SOURCE,
        },
        "tags": {"topic": "FIN"},
    },
    {
        "id": "clar-001",
        "question": "What was revenue?",
        "case_type": "clarification",
        "expected": {"clarification": "ask_first", "refuse": False},
        "tags": {"topic": "FIN"},
    },
    {
        "id": "ref-001",
        "question": "Revenue in 2030?",
        "case_type": "refusal",
        "expected": {"clarification": "none", "refuse": True},
        "tags": {"topic": "FIN"},
    },
]


def traces(value: float = 1702, refusal: str = "not in context") -> list[dict]:
    return [
        {
            "qid": "num-001",
            "answer": {"claim": f"{value} USD_M [ACME_FY2025_Results.pptx]", "citations": []},
            "outcome": {"found_value": value, "found_unit": "USD_M", "found_source": SOURCE},
        },
        {
            "qid": "clar-001",
            "answer": {"claim": "Which entity?"},
            "outcome": {"clarification_mode": "ask_first"},
        },
        {"qid": "ref-001", "answer": {"claim": refusal}, "outcome": {"refused": True}},
    ]


def write(tmp_path, name: str, rows: list[dict]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def score(tmp_path, capsys, trace_rows, *extra: str) -> tuple[int, dict]:
    gold = write(tmp_path, "qa_golden_set.jsonl", CASES)
    trace = write(tmp_path, "traces.jsonl", trace_rows)
    code = main(["score", "--gold", gold, "--trace", trace, "--gates", "refusal_appropriateness=1.0", *extra])
    return code, json.loads(capsys.readouterr().out)


def baseline(tmp_path, numeric: float, fabrication: int = 0) -> str:
    path = tmp_path / "qa_baseline.json"
    entry = {
        "metrics": {"numeric_accuracy": numeric, "citation_validity": 1.0},
        "fabrication_count": fabrication,
    }
    path.write_text(json.dumps({"tool": entry, "agent": {"metrics": {"numeric_accuracy": 0.0}}}))
    return str(path)


def test_the_report_carries_every_gate_and_the_fabrication_count(tmp_path, capsys):
    code, report = score(tmp_path, capsys, traces())
    assert code == 0
    assert set(report["qa_gates"]) == {
        "numeric_accuracy",
        "citation_validity",
        "refusal_appropriateness",
        "clarification_appropriateness",
    }
    assert report["qa_gates"]["numeric_accuracy"] == {
        "total": 1,
        "passed": 1,
        "pass_rate": 1.0,
        "failures": [],
        "by_tag": {"topic": {"FIN": {"total": 1, "passed": 1, "pass_rate": 1.0}}},
    }
    assert report["qa_gates"]["clarification_appropriateness"]["total"] == 3
    assert report["fabrication"] == {"count": 0, "checked": 1, "cases": []}


@pytest.mark.parametrize(
    ("numeric_baseline", "value", "exit_code"), [(1.0, 1702, 0), (1.0, 1703, 1), (0.0, 1703, 0)]
)
def test_a_gate_strictly_below_its_baseline_fails_and_equal_passes(
    tmp_path, capsys, numeric_baseline, value, exit_code
):
    code, report = score(
        tmp_path, capsys, traces(value), "--baseline", baseline(tmp_path, numeric_baseline), "--mode", "tool"
    )
    assert code == exit_code
    regressions = [r["metric"] for r in report["release"]["regressions"]]
    assert regressions == ([] if exit_code == 0 else ["numeric_accuracy"])


@pytest.mark.parametrize(("allowed", "exit_code"), [(1, 0), (0, 1)])
def test_a_higher_fabrication_count_fails(tmp_path, capsys, allowed, exit_code):
    fabricated = traces(refusal="Not in the deck, but likely 8.18b for FY2030.")
    code, report = score(
        tmp_path, capsys, fabricated, "--baseline", baseline(tmp_path, 1.0, allowed), "--mode", "tool"
    )
    assert report["fabrication"]["count"] == 1 and report["fabrication"]["cases"][0]["numbers"] == ["8.18"]
    assert code == exit_code
    if exit_code:
        assert report["release"]["regressions"][0]["metric"] == "fabrication_count"


def test_promote_records_the_gates_and_the_fabrication_count_per_mode(tmp_path, capsys):
    path = baseline(tmp_path, 0.5, fabrication=3)
    code, _ = score(tmp_path, capsys, traces(), "--baseline", path, "--mode", "tool", "--promote")
    assert code == 0
    saved = json.loads((tmp_path / "qa_baseline.json").read_text())
    assert saved["tool"]["metrics"]["numeric_accuracy"] == 1.0 and saved["tool"]["fabrication_count"] == 0
    assert "fabrication" not in saved["tool"]["metrics"]
    assert saved["agent"] == {"metrics": {"numeric_accuracy": 0.0}}  # other modes untouched


def test_the_markdown_report_shows_the_qa_gates(tmp_path, capsys):
    gold = write(tmp_path, "qa_golden_set.jsonl", CASES)
    trace = write(tmp_path, "traces.jsonl", traces(1703))
    assert (
        main(
            [
                "score",
                "--gold",
                gold,
                "--trace",
                trace,
                "--gates",
                "numeric_accuracy=1.0",
                "--format",
                "markdown",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "## QA gates" in out and "| numeric_accuracy | 0.0000 | 0 / 1 |" in out
    expected = "{&quot;value&quot;: 1702.0, &quot;unit&quot;: &quot;USD_M&quot;}"  # JSON shown as text
    assert f"| numeric_accuracy | num-001 | {expected} |" in out


# -- default gates and not-applicable metrics ----------------------------------------------------------


def score_by_default(tmp_path, capsys, trace_rows, *extra: str) -> tuple[int, str]:
    """``score`` with no gate list: the defaults of the dialects the data carries."""
    gold = write(tmp_path, "qa_golden_set.jsonl", CASES)
    trace = write(tmp_path, "traces.jsonl", trace_rows)
    code = main(["score", "--gold", gold, "--trace", trace, *extra])
    return code, capsys.readouterr().out


QA_DEFAULTS = [
    ("numeric_accuracy", ">=", 0.95),
    ("citation_validity", ">=", 0.95),
    ("refusal_appropriateness", ">=", 0.95),
    ("clarification_appropriateness", ">=", 0.9),
    ("fabrication", "<=", 0.0),
]


def test_a_qa_golden_set_answered_without_citations_ships_on_its_qa_gates(tmp_path, capsys):
    code, out = score_by_default(tmp_path, capsys, traces())
    report = json.loads(out)
    assert code == 0 and report["release"]["decision"] == "ship"
    assert [(g["metric"], g["op"], g["threshold"]) for g in report["gates"]] == QA_DEFAULTS
    assert report["chr_answerable"] == 0.0  # a grounded figure such a set does not measure: not gated


def test_a_failing_qa_default_gate_blocks(tmp_path, capsys):
    code, out = score_by_default(tmp_path, capsys, traces(value=1703))
    failed = [g["metric"] for g in json.loads(out)["release"]["failed_gates"]]
    assert code == 1 and failed == ["numeric_accuracy"]


def test_qa_cases_answered_with_citations_get_the_grounded_gates_too(tmp_path, capsys):
    cited = traces()
    cited[0] = {**cited[0], "retrieved_ids": ["deck#5"]}
    code, out = score_by_default(tmp_path, capsys, cited)
    report = json.loads(out)
    assert [g["metric"] for g in report["gates"]] == [
        "precision", "chr", "under_refusal", "over_refusal", "compliance", *(n for n, _, _ in QA_DEFAULTS)
    ]  # fmt: skip
    # The clarifying question ships without a citation list: it cites nothing, which on a case without
    # gold citations is a citation hit (as seed-000 reads an absent list), but it is not compliant.
    failed = [g["metric"] for g in report["release"]["failed_gates"]]
    assert code == 1 and failed == ["compliance"]


def test_a_metric_with_no_applicable_case_is_n_a_and_its_gate_does_not_block(tmp_path, capsys):
    code, out = score_by_default(tmp_path, capsys, traces(), "--gates", "claim_containment=0.5")
    report = json.loads(out)
    assert code == 0 and report["release"]["decision"] == "ship"
    assert report["denominators"]["claim_containment"] == 0 and report["claim_containment"] is None
    assert report["not_applicable"] == ["claim_containment"]  # derived from the null value
    (gate,) = report["gates"]
    assert (gate["pass"], gate["applicable"], gate["denominator"]) == (None, False, 0)
    assert gate["value"] is None  # null with its denominator, never a placeholder
    assert report["release"]["failed_gates"] == [] and report["release"]["unmeasured_gates"] == []


def test_markdown_shows_a_metric_with_no_applicable_case_as_n_a(tmp_path, capsys):
    code, out = score_by_default(
        tmp_path, capsys, traces(), "--gates", "claim_containment=0.5", "--format", "markdown"
    )
    assert code == 0
    assert "| claim_containment | n/a | 0 answerable_with_gold_claim: not applicable |" in out
    assert "| claim_containment | ≥ 0.5000 | n/a (over 0) | ➖ n/a: does not block |" in out
    assert "- gate **claim_containment** does not apply to this run (0 cases to measure)" in out
    assert "| claim_containment | 0.0000" not in out

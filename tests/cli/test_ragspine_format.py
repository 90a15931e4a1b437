"""``ragspine-eval score --format ragspine|ragspine-text``: RAGSpine's report and console lines, the same
verdict and exit code as every other format. (The exact shape, worked out from RAGSpine's writer, is in
``tests/test_peer_parity.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from tests.cli.ragspine_cases import golden_set, traces, write_jsonl

WFGY = Path(__file__).resolve().parents[2] / "examples" / "wfgy"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["score", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("right", [3, 1])
def test_every_format_gives_the_same_exit_code(tmp_path, capsys, right):
    common = ["--gold", golden_set(tmp_path), "--trace", traces(tmp_path, right=right)]
    codes = {
        fmt: run(capsys, *common, "--format", fmt)[0]
        for fmt in ("json", "markdown", "ragspine", "ragspine-text")
    }
    assert set(codes.values()) == {0 if right == 3 else 1}


def test_the_report_has_ragspines_keys_and_unrounded_rates(tmp_path, capsys):
    code, out, _ = run(
        capsys, "--gold", golden_set(tmp_path), "--trace", traces(tmp_path, right=1), "--format", "ragspine"
    )
    report = json.loads(out)
    assert code == 1 and list(report) == ["mode", "n_cases", "metrics", "fabrication", "fabrication_count"]
    assert report["mode"] == "golden" and report["n_cases"] == 4
    numeric = report["metrics"]["numeric_accuracy"]
    assert numeric["pass_rate"] == 1 / 3 and (numeric["passed"], numeric["total"]) == (1, 3)
    assert list(numeric) == ["name", "total", "passed", "pass_rate", "failures", "by_tag"]


def test_no_narrative_case_leaves_the_narrative_gates_at_ragspines_empty_pass(tmp_path, capsys):
    _, out, _ = run(
        capsys, "--gold", golden_set(tmp_path), "--trace", traces(tmp_path, right=3), "--format", "ragspine"
    )
    metrics = json.loads(out)["metrics"]
    for name in ("faithfulness", "answer_accuracy"):
        assert metrics[name] == {
            "name": name,
            "total": 0,
            "passed": 0,
            "pass_rate": 1.0,
            "failures": [],
            "by_tag": {},
        }


def test_answer_accuracy_without_reference_texts_is_left_out_not_passed(tmp_path, capsys):
    narrative = {
        "id": "nar-1",
        "question": "Why did HK revenue fall?",
        "case_type": "narrative",
        "expected": {"clarification": "none", "refuse": False, "narrative_doc": "HK_QBR.pptx"},
        "tags": {"topic": "FIN"},
        "reference_date": "2026-06-12",
    }
    answer = "Bancassurance sales fell."
    outcome = {
        "clarification_mode": "none",
        "refused": False,
        "sources": [{"doc": "HK_QBR.pptx", "locator": "slide=1"}],
        "narrative_answer": answer,
        "retrieved_context": ["Bancassurance sales fell in Q4."],
    }
    trace = {
        "id": "nar-1",
        "answer": {"claim": f"{answer} [HK_QBR.pptx]", "citations": []},
        "outcome": outcome,
    }
    gold = write_jsonl(tmp_path / "gold.jsonl", [narrative])
    trace_path = write_jsonl(tmp_path / "traces.jsonl", [trace])
    _, out, _ = run(capsys, "--gold", gold, "--trace", trace_path, "--format", "ragspine")
    metrics = json.loads(out)["metrics"]
    assert "answer_accuracy" not in metrics and metrics["faithfulness"]["total"] == 1


def test_a_golden_set_without_qa_cases_is_unusable_for_it(capsys):
    for fmt in ("ragspine", "ragspine-text"):
        code, out, err = run(
            capsys, "--gold", str(WFGY / "gold.jsonl"), "--trace", str(WFGY / "traces.jsonl"), "--format", fmt
        )
        assert code == 2 and out == "" and err.count("\n") == 1
        assert f"--format {fmt} needs RAGSpine QA cases" in err


def test_the_text_goes_to_out_and_ends_with_the_baseline_verdict(tmp_path, capsys):
    baseline = tmp_path / "qa_baseline.json"
    baseline.write_text(json.dumps({"tool": {"metrics": {"numeric_accuracy": 1.0}, "fabrication_count": 0}}))
    args = ["--gold", golden_set(tmp_path), "--baseline", str(baseline), "--mode", "tool"]
    out_file = tmp_path / "console.txt"
    code, out, _ = run(
        capsys,
        *args,
        "--trace",
        traces(tmp_path, right=3),
        "--format",
        "ragspine-text",
        "--out",
        str(out_file),
    )
    lines = out_file.read_text(encoding="utf-8").splitlines()
    assert code == 0 and out == "decision: ship\n"
    assert lines[0] == "=== QA 评测报告（mode=tool，4 cases）==="
    assert lines[-1] == "门禁 PASS：全部命门指标不低于基线。"
    code, out, _ = run(capsys, *args, "--trace", traces(tmp_path, right=2), "--format", "ragspine-text")
    assert code == 1 and out.splitlines()[-2:] == [
        "门禁 FAIL：检测到指标退化——",
        f"  numeric_accuracy: 基线=1.0 当前={2 / 3}（delta={2 / 3 - 1.0:+}）",
    ]


def test_without_a_baseline_there_is_no_verdict_line(tmp_path, capsys):
    _, out, _ = run(
        capsys,
        "--gold",
        golden_set(tmp_path),
        "--trace",
        traces(tmp_path, right=3),
        "--format",
        "ragspine-text",
    )
    assert "门禁" not in out

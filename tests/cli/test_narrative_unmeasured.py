"""`ragspine-eval score` and `check-traces` on RAGSpine-style narrative traces that carry no context
passages: ``narrative_faithfulness`` is unmeasured for them, said so with the field it needs, in every
output; a gate on it fails as unmeasured when nothing could be measured."""

from __future__ import annotations

import json

from ragspine_pipeline.cli import main

NEEDS = "outcome.retrieved_context or contexts"
WARNING = "{n} narrative traces carry no " + NEEDS + ": narrative_faithfulness unmeasured for them"
DOCS = ["REG_WATCH_HK.pptx", "HK_QBR_2025Q4.pptx", "REG_WATCH_CN.pptx", "CN_QBR_2025.pptx"]
TOLD = {  # each narrative answer, and a retrieved passage holding every token of it
    "REG_WATCH_HK.pptx": "香港监管动态：MPFA 强积金新规要求披露管理费。",
    "HK_QBR_2025Q4.pptx": "香港 REVENUE 下降主因是 MCV 客群收缩。",
    "REG_WATCH_CN.pptx": "中国监管动态：金融监管总局发布分红险新规。",
    "CN_QBR_2025.pptx": "中国 REVENUE 增长由代理人产能提升驱动。",
}


def narrative_case(i: int) -> dict:
    """A line of a RAGSpine golden set: a narrative case on ``DOCS[i - 1]``."""
    expected = {"clarification": "none", "refuse": False, "narrative_doc": DOCS[i - 1]}
    tags = {"topic": "REG" if "REG" in DOCS[i - 1] else "FIN", "scope": "ACME", "qtype": "narrative"}
    return {
        "id": f"nar-00{i}",
        "question": f"What drove {DOCS[i - 1]}?",
        "case_type": "narrative",
        "expected": expected,
        "tags": tags,
        "reference_date": "2026-06-12",
    }


def narrative_trace(i: int, with_context: bool) -> dict:
    """RAGSpine's outcome of a narrative answer citing its doc; its retrieved context only if asked."""
    doc = DOCS[i - 1]
    outcome = {
        "route": "narrative",
        "clarification_mode": "none",
        "refused": False,
        "sources": [{"doc": doc, "locator": "slide=1"}],
        "narrative_answer": TOLD[doc],
    }
    if with_context:
        outcome["retrieved_context"] = [TOLD[doc]]
    claim = f"{TOLD[doc]}（来源：{doc} slide=1）"
    return {"id": f"nar-00{i}", "answer": {"claim": claim, "citations": []}, "outcome": outcome}


def write(tmp_path, name: str, rows: list[dict]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def files(tmp_path, with_context: tuple[int, ...] = (), traced: tuple[int, ...] = (1, 2, 3, 4)):
    gold = write(tmp_path, "gold.jsonl", [narrative_case(i) for i in range(1, 5)])
    traces = write(tmp_path, "traces.jsonl", [narrative_trace(i, i in with_context) for i in traced])
    return gold, traces


def score(tmp_path, capsys, *extra: str, **kw) -> tuple[int, str, str]:
    gold, traces = files(tmp_path, **kw)
    code = main(["score", "--gold", gold, "--trace", traces, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_four_narrative_traces_without_context_report_the_gate_unmeasured(tmp_path, capsys):
    code, out, err = score(tmp_path, capsys, "--format", "json")
    report = json.loads(out)
    gate = report["qa_gates"]["narrative_faithfulness"]
    assert (gate["total"], gate["passed"], gate["pass_rate"], gate["failures"]) == (0, 0, None, [])
    assert (gate["unmeasured"], gate["needs"]) == (4, NEEDS)
    assert WARNING.format(n=4) in report["warnings"] and WARNING.format(n=4) in err
    assert report["unmeasured"] == {"narrative_faithfulness": WARNING.format(n=4)}
    assert "narrative_faithfulness" not in report["not_applicable"]  # null, but not "does not apply"
    # No gate on it (the QA defaults do not gate it), every gated figure holds: a warning, not a block.
    assert code == 0 and report["release"]["decision"] == "ship"

    _, out, _ = score(tmp_path, capsys, "--format", "markdown")
    assert f"> ⚠ {WARNING.format(n=4)}" in out
    assert f"| narrative_faithfulness | unmeasured | 0 measured; {WARNING.format(n=4)} |" in out


def test_a_gate_on_it_fails_as_unmeasured_saying_why(tmp_path, capsys):
    # RAGSpine's own name for the gate: without an evidence registry, the narrative metric.
    code, out, _ = score(tmp_path, capsys, "--format", "json", "--gates", "faithfulness=0.9")
    report = json.loads(out)
    assert code == 1 and report["release"]["decision"] == "block"
    assert report["release"]["unmeasured_gates"] == [
        {
            "metric": "narrative_faithfulness",
            "op": ">=",
            "threshold": 0.9,
            "severity": "hard",
            "reason": WARNING.format(n=4),
        }
    ]
    assert report["gates"] == [] and report["release"]["failed_gates"] == []  # unmeasured, not a 0.0

    code, out, _ = score(tmp_path, capsys, "--format", "markdown", "--gates", "faithfulness=0.9")
    assert code == 1
    assert (
        f"- hard gate **narrative_faithfulness** was not measured: {WARNING.format(n=4)} (needs >= 0.9000): "
        "it fails" in out
    )
    assert "| narrative_faithfulness | ≥ 0.9000 | not measured | ❌ **FAIL**: unmeasured |" in out


def test_a_mixed_file_measures_the_traces_with_context_and_reports_the_denominator(tmp_path, capsys):
    code, out, err = score(
        tmp_path, capsys, "--format", "json", "--gates", "faithfulness=0.9", with_context=(1, 3)
    )
    report = json.loads(out)
    gate = report["qa_gates"]["narrative_faithfulness"]
    assert (gate["passed"], gate["total"], gate["pass_rate"], gate["unmeasured"]) == (2, 2, 1.0, 2)
    assert gate["by_tag"]["topic"] == {"REG": {"total": 2, "passed": 2, "pass_rate": 1.0}}  # nar-001, 003
    [row] = report["gates"]
    assert (row["metric"], row["numerator"], row["denominator"], row["pass"]) == (
        "narrative_faithfulness",
        2,
        2,
        True,
    )
    assert WARNING.format(n=2) in err and report["unmeasured"] == {}
    assert code == 0 and report["release"]["unmeasured_gates"] == []

    _, out, _ = score(tmp_path, capsys, "--format", "markdown", with_context=(1, 3))
    assert f"| narrative_faithfulness | 1.0000 | 2 / 2; {WARNING.format(n=2)} |" in out


def test_a_case_without_a_trace_still_fails(tmp_path, capsys):
    # nar-004 has no trace: a missing answer fails; nar-001..003 lack only their context.
    code, out, err = score(
        tmp_path, capsys, "--format", "json", "--gates", "faithfulness=0.9", traced=(1, 2, 3)
    )
    report = json.loads(out)
    gate = report["qa_gates"]["narrative_faithfulness"]
    assert (gate["passed"], gate["total"], gate["unmeasured"]) == (0, 1, 3)
    assert [f["id"] for f in gate["failures"]] == ["nar-004"]
    assert code == 1 and [g["metric"] for g in report["release"]["failed_gates"]] == [
        "narrative_faithfulness"
    ]
    assert WARNING.format(n=3) in err


def test_the_ragspine_report_leaves_an_unmeasured_gate_out_and_counts_only_measured_cases(tmp_path, capsys):
    code, out, _ = score(tmp_path, capsys, "--format", "ragspine", "--mode", "tool")
    metrics = json.loads(out)["metrics"]
    # Not RAGSpine's 1.0 over total 0 (a pass), nor its 0 of 4 (a failure): left out, as answer_accuracy
    # without reference texts is.
    assert "faithfulness" not in metrics and code == 0
    _, out, _ = score(tmp_path, capsys, "--format", "ragspine", "--mode", "tool", with_context=(2,))
    faithful = json.loads(out)["metrics"]["faithfulness"]
    assert (faithful["total"], faithful["passed"], faithful["pass_rate"]) == (1, 1, 1.0)


def test_a_baseline_listing_it_reports_it_unmeasured(tmp_path, capsys):
    baseline = tmp_path / "qa_baseline.json"
    baseline.write_text(json.dumps({"tool": {"metrics": {"faithfulness": 1.0}, "fabrication_count": 0}}))
    code, out, err = score(
        tmp_path, capsys, "--format", "json", "--baseline", str(baseline), "--mode", "tool"
    )
    report = json.loads(out)
    assert report["release"]["unmeasured_baseline_metrics"] == ["narrative_faithfulness"]
    assert "baseline metrics not measured by this run: narrative_faithfulness" in err and code == 0


def test_check_traces_names_the_field_it_needs_as_score_does(tmp_path, capsys):
    gold, traces = files(tmp_path)
    assert main(["check-traces", traces, "--gold", gold]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = lines.index("unmeasured for some traces, and the field each lacks:")
    assert lines[at + 1] == f"  narrative_faithfulness: 4 narrative traces carry no {NEEDS}"
    listed = [line for line in lines if line.startswith("  narrative_faithfulness")]
    assert len(listed) == 1  # neither "measured" (0 of 4) nor "not applicable"

    gold, traces = files(tmp_path, with_context=(1, 3))
    assert main(["check-traces", traces, "--gold", gold]) == 0
    out = capsys.readouterr().out
    assert "  narrative_faithfulness = 1 over 2" in out
    assert f"  narrative_faithfulness: 2 narrative traces carry no {NEEDS}" in out

"""Parity, fourth pass: a RAGSpine baseline decides as RAGSpine decides, and the seed-000 scorer's
inputs score as seed-000 scores them. As in ``test_peer_parity.py``: minimal inputs written the way
the source system writes them, each expected figure worked out by hand from that system's rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.test_peer_parity import REFUSAL_CASE, ragspine_trace, score


def refusal_cases(n: int) -> list[dict]:
    return [{**REFUSAL_CASE, "id": f"ref-{i}"} for i in range(n)]


def test_with_a_ragspine_baseline_the_verdict_is_ragspines_the_baseline_alone(tmp_path, capsys):
    # Two refusal cases; the engine refuses one and answers the other (without a figure: no fabrication).
    # refusal_appropriateness = 1/2 = 0.5. RAGSpine's qa_baseline.json holds 0.5 for it, and RAGSpine
    # gates a release on its baseline only (a metric below its baseline value, or more fabrications
    # than the baseline's count, is a regression): 0.5 >= 0.5 and 0 <= 0 -> no regression -> ship.
    gold = refusal_cases(2)
    traces = [
        ragspine_trace("ref-0", "未找到相关信息", refused=True, clarification_mode="none"),
        ragspine_trace("ref-1", "Globex earned a lot", refused=False, clarification_mode="none"),
    ]
    baseline = tmp_path / "qa_baseline.json"
    entry = {"metrics": {"refusal_appropriateness": 0.5}, "fabrication_count": 0, "n_cases": 2}
    baseline.write_text(json.dumps({"tool": entry}), encoding="utf-8")
    args = ("--baseline", str(baseline), "--mode", "tool", "--format", "json")
    code, report, _ = score(tmp_path, capsys, gold, traces, *args)
    assert report["qa_gates"]["refusal_appropriateness"]["pass_rate"] == 0.5
    assert code == 0 and report["release"]["decision"] == "ship"
    assert report["gates"] == [] and report["release"]["regressions"] == []
    assert any("the verdict is RAGSpine's" in warning for warning in report["warnings"])

    # The default floor (refusal_appropriateness >= 0.95) applies when the gates config lists it.
    config = tmp_path / "gates.yaml"
    config.write_text("gates:\n  refusal_appropriateness: {min: 0.95}\n", encoding="utf-8")
    code, report, _ = score(tmp_path, capsys, gold, traces, *args, "--config", str(config))
    failed = [gate["metric"] for gate in report["release"]["failed_gates"]]
    assert code == 1 and failed == ["refusal_appropriateness"]
    assert not any("the verdict is RAGSpine's" in warning for warning in report["warnings"])

    # Without a baseline the defaults stand, as before: the floor blocks.
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    assert code == 1 and "refusal_appropriateness" in [g["metric"] for g in report["release"]["failed_gates"]]


def test_the_migration_table_has_as_many_rows_as_it_announces():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "migration.md").read_text(encoding="utf-8")
    table = doc.split("## Renamed metrics")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| topic")]
    [announced] = re.findall(r"What is left are (\d+) deliberate differences", table)
    assert len(rows) == int(announced)

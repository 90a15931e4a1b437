"""A run's QA gates as RAGSpine reports them: its ``--report`` JSON and its console lines.

For dashboards and scripts written against RAGSpine's QA evaluator (``ragspine-eval score --format
ragspine`` / ``ragspine-text``). The figures are this pipeline's (the same cases pass and fail as in
``--format json``); the shape, names and wording are RAGSpine's:

* JSON: ``{"mode", "n_cases", "metrics", "fabrication", "fabrication_count"}``. ``metrics`` holds RAGSpine's
  six gates in its order under its names (``faithfulness`` is the narrative gate,
  ``narrative_faithfulness`` here), each ``{"name", "total", "passed", "pass_rate", "failures",
  "by_tag"}``; ``fabrication`` is one more such object over the cases expecting a refusal. Rates are
  unrounded. As in RAGSpine, a gate that applies to no case has ``pass_rate`` 1.0 beside its ``total`` 0
  (``--format json`` says ``null``); a gate this run could not measure (``answer_accuracy`` without
  reference texts, ``faithfulness`` when no narrative trace carries retrieved context) is left out
  rather than reported as passing, and a narrative case whose trace carries no context is out of
  ``faithfulness``'s ``total``, where RAGSpine, whose engine always records what it retrieved, would
  count it as a failure (docs/migration.md). ``by_tag`` is
  ``{tag: {value: {"total", "passed"}}}`` over the cases the gate applies to, tags in first-seen order;
  fabrication's is over the cases whose ``expected.refuse`` is true (RAGSpine's rule). A failure is
  ``{"id", "expected", "actual"}`` with RAGSpine's texts (``"1702.0 USD_M"``, ``"拒答"``, …); for the
  narrative gate ``actual`` lists every unsupported claim, whole and in the answer's order.
* Text: RAGSpine's lines, ``=== QA 评测报告（mode=…，N cases）===``, one line per gate with
  ``pass_rate`` at 4 decimals, ``    FAIL id: 期望=… 实际=…`` per failure (values as Python prints them),
  the fabrication line and its failures; then, when a baseline was compared, ``门禁 PASS：…`` or
  ``门禁 FAIL：…`` with one ``  metric: 基线=… 当前=…（delta=…）`` line per regression.

Per-case work here is a loop over the golden set's rows: this runs once per report, on a golden set.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

import pyarrow as pa

from ragspine_pipeline.decision.baseline import FABRICATION as COUNT_KEY
from ragspine_pipeline.decision.evaluation import Evaluation
from ragspine_pipeline.decision.ragspine_baseline import RAGSPINE_METRICS, ragspine_names
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.scoring.narrative import ACCURACY, FAITHFULNESS, THRESHOLD

FORMATS = ("ragspine", "ragspine-text")
# RAGSpine's own runs have no evidence registry: its names mean what they mean there.
OURS = {ragspine: ours for ours, ragspine in ragspine_names(Scope.WITHOUT_REGISTRY).items()}
RAGSPINE_NAME = {ours: ragspine for ragspine, ours in OURS.items()}
FABRICATION = "fabrication"  # RAGSpine's name for the count's gate and its regression
# RAGSpine's texts (``qa_eval.evaluate``, ``run_qa_eval``), word for word.
REFUSE, ANSWER, ANSWERED = "拒答", "正常作答", "作答"
FAITHFUL_EXPECTED = "每条 claim 被检索片段蕴含"
FABRICATION_EXPECTED = "拒答回答不含任何数字（期间除外）"
BASELINE_PASS = "门禁 PASS：全部命门指标不低于基线。"
BASELINE_FAIL = "门禁 FAIL：检测到指标退化——"


def ragspine_report(ev: Evaluation, gold: pa.Table, mode: str) -> dict[str, Any]:
    """The report RAGSpine's ``--report`` writes, for this run (see the module docstring). ``gold``: the
    golden set the run scored (its tags); a golden set without QA cases is an ``InputError``."""
    qa = ev.qa
    if qa is None:
        raise InputError(
            "--format", "the RAGSpine report needs a golden set with QA cases (case_type, expected)"
        )
    tags = gold.column("tags").to_pylist()
    metrics = {}
    for name in RAGSPINE_METRICS:
        ours = OURS[name]
        gate = qa.gates.get(ours)
        if gate is None and ours == ACCURACY and FAITHFULNESS in qa.gates:
            continue  # narrative cases, no reference texts: unmeasured, not a pass
        if gate is not None and gate.total == 0 and gate.note:
            continue  # narrative cases, no trace with context: unmeasured, not a pass
        applies = [] if gate is None else qa.cases.column(ours).to_pylist()
        failures = [] if gate is None else [_failure(ours, f) for f in gate.failures]
        total, passed = (0, 0) if gate is None else (gate.total, gate.passed)
        metrics[name] = _gate(name, total, passed, failures, _by_tag(tags, applies))
    fabrication = qa.fabrication
    numbers = {case["id"]: case["numbers"] for case in fabrication.cases}
    checked = [
        None if not refuse else qid not in numbers
        for qid, refuse in zip(
            gold.column("qid").to_pylist(), gold.column("expected_refuse").to_pylist(), strict=True
        )
    ]
    failures = [
        {"id": case["id"], "expected": FABRICATION_EXPECTED, "actual": f"出现数字 {case['numbers']}"}
        for case in fabrication.cases
    ]
    passed = fabrication.checked - fabrication.count
    return {
        "mode": mode,
        "n_cases": ev.grounded.counts["cases"],
        "metrics": metrics,
        "fabrication": _gate(FABRICATION, fabrication.checked, passed, failures, _by_tag(tags, checked)),
        "fabrication_count": fabrication.count,
    }


def write_ragspine_json(ev: Evaluation, gold: pa.Table, mode: str, out: TextIO) -> None:
    """:func:`ragspine_report` as RAGSpine writes it (two-space indent, characters as they are)."""
    out.write(json.dumps(ragspine_report(ev, gold, mode), ensure_ascii=False, indent=2) + "\n")


def write_ragspine_text(ev: Evaluation, gold: pa.Table, mode: str, out: TextIO) -> None:
    """RAGSpine's console lines for this run, and its baseline verdict when a baseline was compared."""
    report = ragspine_report(ev, gold, mode)
    lines = [f"=== QA 评测报告（mode={report['mode']}，{report['n_cases']} cases）==="]
    for name, gate in report["metrics"].items():
        lines.append(f"  {name}: {gate['passed']}/{gate['total']} (pass_rate={gate['pass_rate']:.4f})")
        lines += [f"    FAIL {f['id']}: 期望={f['expected']} 实际={f['actual']}" for f in gate["failures"]]
    fabrication = report["fabrication"]
    count, checked = report["fabrication_count"], fabrication["total"]
    lines.append(f"  {FABRICATION}: {count} 例编造（拒答类样本 {checked} 条，目标 0）")
    lines += [f"    FAIL {f['id']}: {f['actual']}" for f in fabrication["failures"]]
    if ev.comparison is not None:
        regressions = ev.comparison.regressions
        lines.append(BASELINE_FAIL if regressions else BASELINE_PASS)
        for r in regressions:
            if r.metric == COUNT_KEY:  # RAGSpine's count is a whole number, named after its gate
                name, values = FABRICATION, (int(r.baseline), int(r.current), int(r.delta))
            else:
                name, values = RAGSPINE_NAME.get(r.metric, r.metric), (r.baseline, r.current, r.delta)
            baseline, current, delta = values
            lines.append(f"  {name}: 基线={baseline} 当前={current}（delta={delta:+}）")
    out.write("\n".join(lines) + "\n")


def _gate(name: str, total: int, passed: int, failures: list[dict], by_tag: dict) -> dict[str, Any]:
    """One of RAGSpine's gate objects; its pass rate is 1.0 when it applies to no case, as RAGSpine's."""
    return {
        "name": name,
        "total": total,
        "passed": passed,
        "pass_rate": 1.0 if total == 0 else passed / total,
        "failures": failures,
        "by_tag": by_tag,
    }


def _by_tag(tags: list[list[tuple[str, str]]], outcomes: list[bool | None]) -> dict:
    """``{tag: {value: {total, passed}}}`` over the rows whose outcome is not None, in first-seen order."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for row_tags, ok in zip(tags, outcomes, strict=False):
        if ok is None:
            continue
        for key, value in row_tags:
            bucket = out.setdefault(key, {}).setdefault(str(value), {"total": 0, "passed": 0})
            bucket["total"] += 1
            bucket["passed"] += int(ok)
    return out


def _failure(gate: str, failure: dict) -> dict[str, Any]:
    """A failure of ours in RAGSpine's words (``{id, expected, actual}``)."""
    expected, actual = failure["expected"], failure["actual"]
    if gate == "numeric_accuracy":
        # RAGSpine: f"{exp['value']} {exp['unit']}", f"{found_value} {found_unit}" (str of each value).
        # Its found_value is always a float (its fact store's ``value REAL`` column), so a found 3400
        # prints "3400.0", as here. Its expected value is the golden line's JSON number as json.loads
        # gives it: 3400 (an int) prints "3400" there, but the golden set is read here as a float and
        # prints "3400.0" (RAGSpine's own golden set writes 1702.0: no difference for it).
        expected = f"{expected['value']} {expected['unit']}"
        actual = f"{actual['value']} {actual['unit']}"
    elif gate == "citation_validity":
        wanted = {key: expected[key] for key in ("source", "narrative_doc") if expected.get(key) is not None}
        bits = []
        if "source" in wanted:
            bits.append(f"structured_source={actual['found_source']}")
        if "narrative_doc" in wanted:
            bits.append(f"sources={list(actual['sources'] or [])}")
        expected, actual = wanted, "; ".join(bits)
    elif gate == "refusal_appropriateness":
        expected = REFUSE if expected["refuse"] else ANSWER
        actual = REFUSE if actual["refused"] else ANSWERED
    elif gate == FAITHFULNESS:
        # RAGSpine: f"未蕴含 claim：{fres.unsupported}", the list's repr: every unsupported claim.
        expected, actual = FAITHFUL_EXPECTED, f"未蕴含 claim：{list(actual['unsupported_claims'])}"
    elif gate == ACCURACY:
        expected = f"覆盖期望文档 {expected['narrative_doc']} 内容 ≥ {THRESHOLD}"
        actual = f"recall={actual['recall']:.3f}"
    return {"id": failure["id"], "expected": expected, "actual": actual}

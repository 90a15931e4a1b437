"""The Markdown slice report: unchanged for a plain golden run, a QA-gates section when the report has QA
gates, an extraction-channel table when an extraction result is given."""

from __future__ import annotations

import copy

import pytest

from ragspine_pipeline.reports.slice_report import slice_markdown

REPORT = {
    "release": {
        "decision": "block",
        "index_version": "ix-7",
        "golden_version": "g-3",
        "run_id": "r-1",
        "failed_gates": [
            {"metric": "precision", "value": 0.71, "op": ">=", "threshold": 0.8, "delta": -0.09}
        ],
        "warned_gates": [{"metric": "point_coverage", "value": 0.7, "op": ">=", "threshold": 0.8}],
        "failed_slices": [
            {
                "dimension": "workflow",
                "value": "access",
                "releasable_rate": 0.75,
                "n": 4,
                "ci95": [0.3, 0.95],
                "min_rate": 0.95,
            }
        ],
        "regressions": [{"metric": "chr", "current": 0.85, "baseline": 0.9}],
    },
    "gates": [
        {"metric": "precision", "op": ">=", "threshold": 0.8, "value": 0.71, "pass": False},
        {"metric": "chr", "op": ">=", "threshold": 0.75, "value": 0.85, "pass": True},
    ],
    "slices": {
        "workflow": {
            "access": {
                "n": 4,
                "releasable_rate": 0.75,
                "releasable_ci95": [0.3, 0.95],
                "claim_faithfulness": 0.9,
            },
            "a|b": {"n": 2, "releasable_rate": 1.0, "releasable_ci95": [0.34, 1.0]},
        }
    },
}
PRODUCTION = [
    {
        "day": "2026-11-20",
        "n": 10,
        "metrics": {"refusal_rate": {"value": 0.1}},
        "slices": {"workflow": {"access": {"n": 4, "metrics": {"production_compliance": {"value": 1.0}}}}},
    }
]
# A plain golden run (no QA gates, no extraction, no layered stages, no history), pinned whole.
PLAIN = """# Slice report

## Release decision: **BLOCK**

Blocked: 1 gate, 1 slice and 1 baseline regression failed. Also failed, without blocking it: 1 soft gate.

**Blocks the release:**

- gate **precision** = 0.7100, needs ≥ 0.8000 (Δ -0.0900)
- slice **workflow=access**: releasable 75.0% of 4 (95% CI 30.0%–95.0%), needs ≥ 95.0%
- baseline regression **chr**: 0.8500 vs baseline 0.9000 (Δ -0.0500)

**Does not block:**

- soft gate **point_coverage** = 0.7000, needs ≥ 0.8000 (Δ -0.1000)

Every case of this run, its answer and its scores: [case explorer](case_explorer.html).

index `ix-7` · golden `g-3` · run `r-1`

## Gates

| metric | gate | value | severity | result |
|---|---|---|---|---|
| precision | >= 0.8 | 0.7100 | hard | **FAIL** |
| chr | >= 0.75 | 0.8500 | hard | pass |

## Slices (worst first)

A slice with at least 1 case(s) below 95% blocks the release.

| slice | n | releasable | 95% CI | slice gate | candidate_recall | context_recall | claim_faithfulness | citation_support | point_coverage |
|---|---|---|---|---|---|---|---|---|---|
| workflow=access | 4 | 0.7500 | 0.300–0.950 | **FAIL** | n/a | n/a | 0.9000 | n/a | n/a |
| workflow=a\\|b | 2 | 1.0000 | 0.340–1.000 | holds | n/a | n/a | n/a | n/a | n/a |

## Production, 1 day(s)

| day | n | refusal_rate | production_compliance | retrieved_citation_rate | production_admissible_rate | lexical_faithfulness | production_fabrication | latency p50 / p95 (ms) |
|---|---|---|---|---|---|---|---|---|
| 2026-11-20 | 10 | 0.1000 | n/a | n/a | n/a | n/a | n/a | n/a |

### Latest day 2026-11-20 per slice (sample of 10)

| slice | n | refusal_rate | production_compliance | retrieved_citation_rate | production_admissible_rate | lexical_faithfulness |
|---|---|---|---|---|---|---|
| all | 10 | 0.1000 | n/a | n/a | n/a | n/a |
| workflow=access | 4 | n/a | 1.0000 | n/a | n/a | n/a |
"""  # noqa: E501


CAUSES = {
    "cases": 84,
    "failing": 41,
    "first_failed_stage": {"admissibility": 36, "candidate retrieval": 3, "answer faithfulness": 2},
    "inadmissible_rules": {"stale": 27, "restricted": 9, "missing_trace": 1},
    "worst_cases": [
        {"qid": "q017", "question": "How long are <script>alert(1)</script> **logs** kept?",
         "first_failed_stage": "admissibility", "rules": ["restricted", "stale"], "label": "ANS_NO_HIT"},
        {"qid": "q`9", "question": "", "first_failed_stage": "admissibility", "rules": ["stale"],
         "label": "OK"},
    ],
}  # fmt: skip


def test_a_blocked_release_says_why_before_the_failed_gates():
    report = copy.deepcopy(REPORT)
    report["release"]["causes"] = CAUSES
    text = slice_markdown(report, PRODUCTION)
    why = (
        "1 soft gate.\n\n"
        "**Why:** 36 of 84 cases fail first at admissibility (27 stale, 9 restricted, 1 missing trace); "
        "3 at candidate retrieval; 2 at answer faithfulness.\n\n"
        "**Worst cases:**\n\n"
        "1. `q017` (admissibility: restricted, stale) — How long are &lt;script&gt;alert(1)&lt;/script&gt; "
        "\\*\\*logs\\*\\* kept?\n"
        "2. `` q`9 `` (admissibility: stale)\n\n"
        "**Blocks the release:**\n\n- gate **precision**"
    )
    assert why in text
    assert "<script>" not in text  # a question is text, never markup
    # Without causes, or when the release ships, nothing is added.
    assert slice_markdown(REPORT, PRODUCTION) == PLAIN
    report["release"]["decision"] = "ship"
    assert "**Why:**" not in slice_markdown(report)


def _gate(total: int, passed: int, failures: list[dict] | None = None) -> dict:
    rate = round(passed / total, 4) if total else 1.0
    return {"total": total, "passed": passed, "pass_rate": rate, "failures": failures or [], "by_tag": {}}


def _with_qa(fabricated: int = 1, failures: int = 1) -> dict:
    report = copy.deepcopy(REPORT)
    numeric = [
        {"id": f"fin-{i:02d}", "expected": {"value": 1702.0, "unit": "USD_M"}, "actual": {"value": 1613.0}}
        for i in range(failures)
    ]
    report["qa_gates"] = {
        "numeric_accuracy": _gate(6, 6 - failures, numeric),
        "citation_validity": _gate(0, 0),
        "refusal_appropriateness": _gate(10, 10),
        "clarification_appropriateness": _gate(
            10, 9, [{"id": "clar|01", "expected": "ask_first", "actual": None}]
        ),
    }
    cases = [{"id": "ref-02", "numbers": ["8.18"], "answer": "about 8.18 bn"}][:fabricated]
    report["fabrication"] = {"count": fabricated, "checked": 3, "cases": cases}
    return report


EXTRACTION = {
    "channels": {
        "cell_value": {"total": 150, "correct": 149, "accuracy": 0.9933, "mismatches": []},
        "color_mapping": {"total": 150, "correct": 120, "accuracy": 0.8, "mismatches": []},
        "header_attribution": {"total": 0, "correct": 0, "accuracy": 1.0, "mismatches": []},
    },
    "aligned": 150,
    "facts_only": 2,
    "truth_only": 0,
    "duplicates": 0,
    "invalid_facts": {"count": 2, "errors": ["facts.jsonl:7: field 'cell_ref': bad", "facts.jsonl:9: bad"]},
    "baseline": {
        "path": "t.json",
        "failed": [{"channel": "color_mapping", "accuracy": 0.8, "threshold": 0.97, "delta": -0.17}],
        "unmeasured": ["header_attribution"],
    },
    "pass": False,
}


def test_a_plain_golden_run_reads_as_pinned():
    assert slice_markdown(REPORT, PRODUCTION) == PLAIN
    assert slice_markdown(REPORT, PRODUCTION, extraction=None) == PLAIN
    assert slice_markdown(None) == (
        "# Slice report\n\nNo golden evaluation has been materialised yet (`reeval_on_index_rebuild`).\n"
    )


def test_qa_gates_section_after_the_gates():
    text = slice_markdown(_with_qa())
    assert "## QA gates" in text and text.index("## Gates") < text.index("## QA gates") < text.index(
        "## Slices"
    )
    assert "| numeric_accuracy | 0.8333 | 5 / 6 |" in text
    assert "| citation_validity | n/a | 0: applies to no case |" in text  # not the JSON's 1.0
    assert "Fabrication: **1** ❌ of 3 answers that should refuse state a number (target 0)." in text
    assert "| numeric_accuracy | `fin-00` | `value: 1702, unit: USD_M` | `value: 1613` |" in text
    assert "| clarification_appropriateness | `clar\\|01` | `ask_first` | `—` |" in text  # pipe escaped
    assert "| fabrication | `ref-02` | `a refusal stating no number` |" in text


def test_no_fabrication_has_no_cross_and_failures_stop_at_20():
    text = slice_markdown(_with_qa(fabricated=0, failures=25))
    assert "Fabrication: **0** of 3 answers" in text
    assert text.count("| numeric_accuracy | `fin-") == 20
    assert "… and 6 more in the JSON report." in text  # 25 numeric + 1 clarification - 20


@pytest.mark.parametrize("report", [REPORT, None])
def test_extraction_channels_table(report):
    text = slice_markdown(report, extraction=EXTRACTION)
    assert "## Extraction channels: **FAIL**" in text
    assert "| cell_value | 0.9933 | 149 / 150 | — | not failed |" in text
    assert "| color_mapping | 0.8000 | 120 / 150 | 0.9700 | **FAIL** |" in text
    assert "| header_attribution | n/a | 0 / 0 | — | unmeasured |" in text
    assert "Invalid fact lines: 2 (left out of every channel)." in text


def test_extraction_without_a_baseline_is_not_checked():
    text = slice_markdown(REPORT, extraction={**EXTRACTION, "baseline": None, "pass": True})
    assert "## Extraction channels: not checked (no baseline)" in text
    assert text.count("| not checked |") == 3


def test_a_metric_that_applies_to_no_case_reads_n_a_and_its_gate_does_not_block():
    report = copy.deepcopy(REPORT)
    report["gates"].append(
        {"metric": "claim_containment", "op": ">=", "threshold": 0.5, "value": 0.0, "pass": None,
         "applicable": False, "denominator": 0}
    )  # fmt: skip
    report.update(precision=0.71, claim_containment=0.0, not_applicable=["claim_containment"])
    report["denominators"] = {"precision": 7, "claim_containment": 0}
    text = slice_markdown(report)
    gates = text[text.index("## Gates") : text.index("## Slices")]
    assert gates.index("| precision |") < gates.index("| claim_containment |") < gates.index("| chr |")
    assert "| claim_containment | >= 0.5 | n/a (0 cases) | hard | n/a: does not block |" in gates
    assert "| precision | 0.7100 | 7 |" in gates and "| claim_containment | n/a | 0 |" in gates
    assert "0.0000" not in gates


# -- severity, not-gated slices, stages, trend, every production day -------------------------------


def _shipping() -> dict:
    report = copy.deepcopy(REPORT)
    report["release"].update(failed_gates=[], warned_gates=[], failed_slices=[], regressions=[])
    report["release"].update(decision="ship", slice_gate={"min_rate": 0.75, "min_n": 5})
    report["gates"] = [
        {"metric": "chr", "op": ">=", "threshold": 0.75, "value": 0.85, "pass": True, "severity": "hard"},
        {"metric": "point_coverage", "op": ">=", "threshold": 0.8, "value": 0.9, "pass": True,
         "severity": "soft"},
        {"metric": "fabrication", "op": "<=", "threshold": 0.0, "value": 0.0, "pass": True,
         "severity": "hard"},
    ]  # fmt: skip
    report["slices"] = {
        "workflow": {
            "access": {"n": 12, "releasable_rate": 0.9, "releasable_ci95": [0.6, 0.98]},
            "tiny": {"n": 1, "releasable_rate": 0.0, "releasable_ci95": [0.0, 0.79]},
        }
    }
    return report


def test_the_gate_table_names_each_gates_severity_and_a_count_reads_as_a_count():
    text = slice_markdown(_shipping())
    assert "| metric | gate | value | severity | result |" in text
    assert "| point_coverage | >= 0.8 | 0.9000 | soft | pass |" in text
    assert "| fabrication | <= 0 | 0 | hard | pass |" in text  # not 0.0000 on a rate's scale
    report = _shipping()
    report["release"]["decision"] = "block"
    report["release"]["failed_gates"] = [
        {"metric": "fabrication", "value": 2.0, "op": "<=", "threshold": 0.0, "delta": 2.0}
    ]
    assert "- gate **fabrication** = 2, needs ≤ 0 (Δ +2)" in slice_markdown(report)


def test_a_slice_below_min_n_is_not_gated_and_the_verdict_does_not_claim_it_holds():
    text = slice_markdown(_shipping())
    assert "| workflow=tiny | 1 | 0.0000 | 0.000–0.790 | not gated (n < 5) |" in text
    assert "| workflow=access | 12 | 0.9000 | 0.600–0.980 | holds |" in text
    assert "Nothing failed: 3 gates, 1 slice hold." in text  # the slice of one case is not counted
    assert "1 slice(s) with fewer than 5 cases are not gated (shown, never blocking): workflow=tiny." in text
    big = _shipping()
    del big["slices"]["workflow"]["tiny"]
    text = slice_markdown(big)
    assert "Nothing failed: 3 gates, 1 slice hold." in text
    assert "not gated (n < 5)" not in text and "are not gated" not in text


def test_first_failed_stage_histogram_in_pipeline_order():
    report = copy.deepcopy(REPORT)
    report["first_failed_stage_histogram"] = {"admissibility": 3, "candidate retrieval": 1, "pass": 4}
    text = slice_markdown(report)
    table = text[text.index("## First failed stage") :]
    assert "| first failed stage | cases | share |" in table
    assert table.index("| admissibility | 3 | 37.5% |") < table.index("| candidate retrieval | 1 | 12.5% |")
    assert "| pass | 4 | 50.0% |" in table
    assert "## First failed stage" not in slice_markdown(REPORT)  # no layered evaluation: no section


def _runs(n: int) -> list[dict]:
    return [
        {"run_id": f"run-{i}", "timestamp": 1_795_000_000.0 + 86_400 * i, "index_version": f"ix-{i}",
         "golden_version": "g-3", "mode": "golden", "decision": "block" if i % 2 else "ship",
         "metrics": {"releasable_rate": 0.9 - 0.01 * i}}
        for i in range(n)
    ]  # fmt: skip


def test_trend_over_past_golden_runs():
    text = slice_markdown(REPORT, history=_runs(3))
    trend = text[text.index("## Trend over past golden runs") :]
    assert "| run | index version | day | decision | releasable_rate |" in trend
    assert trend.index("| `run-0` | `ix-0` | 2026-11-18 | ship | 0.9000 |") < trend.index(
        "| `run-2` | `ix-2` | 2026-11-20 | ship | 0.8800 |"
    )
    many = slice_markdown(REPORT, history=_runs(13))
    assert "## Trend over past golden runs of this golden set (the latest 10 of 13)" in many
    assert "`run-2`" not in many and "`run-3`" in many
    assert "## Trend" not in slice_markdown(REPORT)


def _day(day: str, refusal: float, fabricated: int) -> dict:
    return {
        "day": day,
        "n": 200,
        "metrics": {
            "refusal_rate": {"value": refusal, "n": 200, "low": 0.1, "high": 0.2},
            "production_fabrication": {"value": fabricated, "n": 30, "rate": fabricated / 30},
            "latency_p50_ms": {"value": 551.7, "n": 200},
            "latency_p95_ms": {"value": 1240.0, "n": 200},
        },
        "slices": {"channel": {"web": {"n": 60, "metrics": {"refusal_rate": {"value": 0.1}}}}},
    }


def test_production_shows_every_day_then_the_latest_per_slice():
    days = [_day(f"2026-11-{d:02d}", 0.1 + d / 100, d % 2) for d in range(18, 25)]
    text = slice_markdown(REPORT, days)
    production = text[text.index("## Production, 7 day(s)") :]
    for d in range(18, 25):
        assert f"| 2026-11-{d:02d} | 200 | {0.1 + d / 100:.4f} |" in production
    assert "| 0 (0.0% of 30) | 552 / 1240 |" in production
    assert "| 1 (3.3% of 30) | 552 / 1240 |" in production
    assert "### Latest day 2026-11-24 per slice (sample of 200)" in production
    assert "| channel=web | 60 | 0.1000 |" in production


def test_new_tables_escape_what_comes_from_the_data():
    xss = "<img src=x onerror=alert(1)>|*x*"
    report = copy.deepcopy(REPORT)
    report["first_failed_stage_histogram"] = {xss: 1, "pass": 1}
    history = _runs(2)
    history[0].update(run_id=xss, index_version=xss, decision=xss)
    production = [{**_day("2026-11-20", 0.1, 0), "day": xss}]
    text = slice_markdown(report, production, history=history)
    assert text.count("<img") == 2  # only inside the two code spans, where HTML never runs
    assert "&lt;img src=x onerror=alert(1)&gt;\\|\\*x\\*" in text  # stage, decision and day as text
    assert "`<img src=x onerror=alert(1)>\\|*x*`" in text  # run id and index version as code

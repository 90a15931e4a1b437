"""Alerts built from a release decision, a night's drop tests and a failed run, and their Block Kit message
and plain-text fallback: the cause first, one row per metric, the runbook, everything escaped."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import numpy as np

from ragspine_pipeline.alerts.blocks import blocks, fallback_text, message
from ragspine_pipeline.alerts.builders import gate_alert, release_alert, run_failure_alert
from ragspine_pipeline.alerts.model import Drop
from ragspine_pipeline.alerts.nightly import drop_alert
from ragspine_pipeline.decision.release import ReleaseDecision

CAUSES = {
    "cases": 84,
    "failing": 47,
    "first_failed_stage": {"admissibility": 36, "candidate retrieval": 4, "context selection": 5},
    "inadmissible_rules": {"stale": 27, "restricted": 9},
    "worst_cases": [
        {"qid": "ACC-01", "question": "What do I need?", "first_failed_stage": "admissibility",
         "rules": ["stale"], "label": "ANS_NO_HIT"},
        {"qid": "ACC-02", "question": "Ping <!channel> now", "first_failed_stage": "admissibility",
         "rules": ["restricted"], "label": "OK"},
    ],
}  # fmt: skip
BLOCKED = {
    "decision": "block",
    "index_version": "ix-0002",
    "golden_version": "demo-2026.11",
    "run_id": "abc-123",
    "failed_gates": [
        {"metric": "under_refusal", "value": 0.4, "op": "<=", "threshold": 0.1, "delta": 0.3},
        {"metric": "admissible_rate", "value": 0.5942, "op": ">=", "threshold": 1.0, "delta": -0.4058},
        {"metric": "context_recall", "value": 0.8, "op": ">=", "threshold": 0.85, "delta": -0.05},
    ],
    "regressions": [
        {"metric": "precision", "baseline": 1.0, "current": 0.8, "delta": -0.2},
        {"metric": "admissible_rate", "baseline": 1.0, "current": 0.5942, "delta": -0.4058},
    ],
    "failed_slices": [
        {"dimension": "workflow", "value": "oncall", "n": 11, "releasable_rate": 0.4545, "min_rate": 0.75},
        {"dimension": "workflow", "value": "a<b&c", "n": 12, "releasable_rate": 0.3333, "min_rate": 0.75},
    ],
    "causes": CAUSES,
}
RUNBOOK = "Fix the first failed stage first; see the slice report."


def blocked_alert(decision: dict = BLOCKED, runbook: str | None = RUNBOOK):
    return release_alert(
        ReleaseDecision.model_validate(decision), "release:golden", "http://dagster.local:3000/", runbook
    )


def texts(message_blocks: list[dict]) -> list[str]:
    return [b["text"]["text"] for b in message_blocks if b["type"] == "section" and "text" in b]


def test_a_blocked_decision_names_gates_baselines_slices_index_run_and_causes():
    alert = blocked_alert()
    assert alert.kind == "regression" and alert.run_url == "http://dagster.local:3000/runs/abc-123"
    assert alert.causes == CAUSES and alert.runbook == RUNBOOK
    assert alert.failure_keys == [
        "baseline:admissible_rate",
        "baseline:precision",
        "gate:admissible_rate",
        "gate:context_recall",
        "gate:under_refusal",
        "slice:workflow=a<b&c",
        "slice:workflow=oncall",
    ]


def test_a_gate_and_a_baseline_on_one_metric_are_one_row_and_failed_gates_come_first():
    rows = blocked_alert().metric_rows()
    assert [r.name for r in rows] == ["admissible_rate", "under_refusal", "context_recall", "precision"]
    admissible = rows[0]
    assert admissible.gate == (">=", 1.0) and admissible.baseline == (">=", 1.0)
    assert rows[3].gate is None and rows[3].baseline == (">=", 1.0)  # a regression without a gate: last


def test_the_message_leads_with_the_cause_then_one_table_row_per_metric():
    message_blocks = blocks(blocked_alert())
    assert [b["type"] for b in message_blocks] == [
        "header",
        "section",  # why
        "section",  # worst cases
        "section",  # fields
        "section",  # metric table
        "section",  # slices
        "section",  # runbook
        "actions",
        "context",
    ]
    assert message_blocks[0]["text"]["text"] == "Release blocked: index ix-0002"
    why, worst, table, slices, runbook = texts(message_blocks)  # the fields section has no text
    assert why == (
        "*Why*: 36 of 84 cases fail first at admissibility (27 stale, 9 restricted); 4 at candidate "
        "retrieval; 5 at context selection"
    )
    assert "ACC-01 (admissibility: stale): What do I need?" in worst
    assert "&lt;!channel&gt;" in worst and "<!channel>" not in worst  # a question cannot ping the channel
    fields = " ".join(f["text"] for f in message_blocks[3]["fields"])
    assert "ix-0002" in fields and "demo-2026.11" in fields and "abc-123" in fields
    assert "4 metrics, 2 slices" in fields
    assert table.count("admissible_rate") == 1  # gate and baseline: one row with both bars
    row = next(line for line in table.splitlines() if line.startswith("admissible_rate"))
    assert row.split() == ["admissible_rate", "0.5942", "&gt;=", "1.0000", "&gt;=", "1.0000"]
    assert table.index("admissible_rate") < table.index("under_refusal") < table.index("precision")
    assert "workflow=a&lt;b&amp;c" in slices and "(n=12)" in slices  # mrkdwn control characters escaped
    assert runbook == f"*Runbook*: {RUNBOOK}"
    assert message_blocks[7]["elements"][0]["url"] == "http://dagster.local:3000/runs/abc-123"
    assert len(json.dumps(message_blocks)) < 40_000


def test_the_fallback_text_carries_the_cause_the_worst_rows_and_the_runbook_on_one_line():
    text = fallback_text(blocked_alert())
    assert text.startswith(
        "Release blocked: index ix-0002 Why: 36 of 84 cases fail first at admissibility "
        "(27 stale, 9 restricted);"
    )
    assert "admissible_rate 0.5942 (needs &gt;= 1.0000; baseline &gt;= 1.0000)" in text
    assert "(+1 more metric)" in text and "2 failed slices" in text and text.endswith(f"Runbook: {RUNBOOK}")
    assert "\n" not in text


def test_the_more_counts_agree_between_the_text_and_the_table():
    many = {
        **BLOCKED,
        "failed_gates": [
            {"metric": f"metric_{i:02d}", "value": 0.1, "op": ">=", "threshold": 0.9, "delta": -0.8}
            for i in range(60)
        ],
        "regressions": [],
    }
    alert = blocked_alert(many)
    table = texts(blocks(alert))[2]
    assert "… and 48 more metrics" in table and len(table) <= 3000  # 12 rows shown of 60
    assert "(+57 more metrics)" in fallback_text(alert)  # 3 shown of the same 60
    assert len(alert.metric_rows()) == 60


def test_control_characters_from_data_are_escaped_in_the_fallback_too():
    hostile = {**BLOCKED, "index_version": "<!channel> ix", "causes": None}
    text = fallback_text(blocked_alert(hostile))
    assert "<!channel>" not in text and "&lt;!channel&gt; ix" in text
    assert not re.search(r"<[^ ]", text)


def test_a_production_alert_names_tonight_and_the_trailing_nights_with_their_n_and_the_p_value():
    drop = Drop(
        metric="compliance",
        slice="channel=api",
        nights=1,
        current=0.85,
        current_n=400,
        trailing=0.95,
        trailing_n=5600,
        trailing_days=14,
        worse_by=0.1,
        p_value=2e-9,
        q_value=3e-8,
    )
    alert = drop_alert("2026-11-22", [drop], run_id="n-1", runbook="Check the retriever's logs.")
    assert alert.title == "Production metrics of 2026-11-22: 1 significant drop"
    assert alert.failure_keys == ["drop:compliance@channel=api"]
    text = fallback_text(alert)
    assert (
        "compliance @ channel=api 0.8500 (tonight, n=400) vs 0.9500 over 14 trailing nights (n=5600)" in text
    )
    assert "10.0 points worse, p &lt;0.0001, q &lt;0.0001" in text and "needs" not in text
    table = texts(blocks(alert))[-2]
    assert "0.8500 (400)" in table and "0.9500 (5600, 14)" in table and "10.0 pts" in table
    assert "baseline" not in table.lower() and "needs" not in table
    recovered = drop_alert("2026-11-23", [], run_id="n-2")
    assert (
        recovered.kind == "recovered"
        and fallback_text(recovered) == "Recovered: production metrics of 2026-11-23 (run n-2)"
    )


def test_an_all_traffic_drop_the_traffic_mix_explains_says_so_in_the_text_and_under_the_table():

    from ragspine_pipeline.scoring.significance import drop_tests
    from tests.scoring.test_weekly_and_mix import FIRST, night

    rng = np.random.default_rng(8)
    days = [night(rng, FIRST + timedelta(days=i), 0.10) for i in range(30)]
    tests = drop_tests(night(rng, FIRST + timedelta(days=30), 0.45), days)  # slice b grows, no slice worse
    alert = drop_alert("2026-02-04", [Drop.of(t) for t in tests.alerts], run_id="n-1")
    [drop] = alert.drops
    assert drop.note.startswith("traffic mix changed: workflow=b grew from 10.")
    assert f"({drop.note})" in fallback_text(alert)
    [table] = [t for t in texts(blocks(alert)) if "Significant drops" in t]
    assert f"production_compliance @ all traffic: {drop.note}" in table


def test_one_run_with_a_release_and_an_extraction_alert_is_one_message():
    extraction = gate_alert([], "extraction", "Extraction channels", run_id="abc-123")
    text, message_blocks = message([extraction, blocked_alert()])
    assert text.startswith("Release blocked: index ix-0002")  # the regression leads
    assert text.endswith("Also: Recovered: Extraction channels.")
    assert [b["type"] for b in message_blocks].count("header") == 1
    assert "*Recovered: Extraction channels*" in texts(message_blocks)


# The same release, repaired: nothing blocks it any more, so it ships (the decision follows its reasons).
SHIPPED = {**BLOCKED, "failed_gates": [], "regressions": [], "failed_slices": []}


def test_a_recovery_and_a_run_failure_render_without_a_table():
    recovered = release_alert(ReleaseDecision.model_validate(SHIPPED), "release:golden")
    assert recovered.kind == "recovered" and recovered.findings == [] and recovered.causes is None
    assert fallback_text(recovered) == "Recovered: release ships on index ix-0002 (run abc-123)"
    assert "actions" not in [b["type"] for b in blocks(recovered)]  # no webserver URL configured

    failed = run_failure_alert(
        "reeval_on_index_rebuild",
        "r-9",
        "golden_traces",
        "cannot reach\n  http://sut",
        runbook="Is the SUT up?",
    )
    assert fallback_text(failed) == (
        "Evaluation run failed: reeval_on_index_rebuild at step golden_traces: cannot reach http://sut "
        "Runbook: Is the SUT up?"
    )
    assert "cannot reach http://sut" in blocks(failed)[2]["text"]["text"]


def test_the_fabrication_count_reads_as_a_count_not_a_rate_and_its_baseline_is_the_same_row():
    fabricated = {
        **BLOCKED,
        "failed_gates": [{"metric": "fabrication", "value": 2.0, "op": "<=", "threshold": 0.0, "delta": 2.0}],
        "regressions": [{"metric": "fabrication_count", "baseline": 0, "current": 2, "delta": 2}],
        "causes": None,
    }
    text = fallback_text(blocked_alert(fabricated))
    assert "fabrication 2 (needs &lt;= 0; baseline &lt;= 0)" in text


def test_a_count_follows_the_rates_whatever_its_size():
    with_count = {
        **BLOCKED,
        "failed_gates": [
            *BLOCKED["failed_gates"],
            {"metric": "fabrication", "value": 3.0, "op": "<=", "threshold": 0.0, "delta": 3.0},
        ],
    }
    names = [row.name for row in blocked_alert(with_count).metric_rows()]
    assert names == ["admissible_rate", "under_refusal", "context_recall", "fabrication", "precision"]


def test_a_release_blocked_by_mixed_index_versions_says_so_first():
    mixed = {
        **BLOCKED,
        "failed_gates": [],
        "regressions": [],
        "failed_slices": [],
        "causes": None,
        "integrity": [
            {"reason": "mixed_index_versions", "detail": "traces name ix-A (20 traces), ix-B (20 traces)"}
        ],
    }
    alert = blocked_alert(mixed)
    assert fallback_text(alert).startswith(
        "Release blocked: index ix-0002 Blocked: traces name ix-A (20 traces), ix-B (20 traces)."
    )
    assert texts(blocks(alert))[0] == "*Blocked*: traces name ix-A (20 traces), ix-B (20 traces)"


def test_a_channel_below_its_threshold_shows_its_correct_and_total_cells():
    from ragspine_pipeline.alerts.model import Finding

    finding = Finding(
        kind="channel", name="color_mapping", value=0.775, reference=0.95, reference_kind="baseline",
        op=">=", delta=-0.175, n=40, correct=31,
    )  # fmt: skip
    alert = gate_alert([finding], "extraction", "Extraction channels", run_id="abc-123")
    [row] = alert.metric_rows()
    assert row.counts == (31, 40)
    table = next(text for text in texts(blocks(alert)) if text.startswith("*Channels below"))
    assert re.search(r"color_mapping\s+0\.7750 \(31/40\)", table), table


def test_a_decision_without_an_index_version_says_nothing_of_an_index():
    """A service without an index manifest names no index: the title says nothing of one (never
    "index unknown index")."""
    blocked = blocked_alert({**BLOCKED, "index_version": None})
    recovered = release_alert(
        ReleaseDecision.model_validate({**SHIPPED, "index_version": None}), "release:golden"
    )
    assert blocked.title == "Release blocked" and recovered.title == "Recovered: release ships"
    assert "unknown" not in fallback_text(blocked) + fallback_text(recovered)


def test_a_metric_that_failed_only_its_baseline_shows_the_gate_that_held():
    """The gate column carries the gate a metric passed (its cell is "—" only where no gate exists)."""
    gates = [
        {"metric": "precision", "op": ">=", "threshold": 0.95, "value": 0.96, "pass": True},
        {"metric": "under_refusal", "op": "<=", "threshold": 0.1, "value": 0.4, "pass": False},
    ]
    only_baselines = {"failed_gates": [], "failed_slices": [], "regressions": BLOCKED["regressions"][:1]}
    alert = blocked_alert({**BLOCKED, **only_baselines, "gates": gates})
    precision = next(r for r in alert.metric_rows() if r.name == "precision")
    assert precision.held == (">=", 0.95) and precision.gate is None
    table = next(t for t in texts(blocks(alert)) if "```" in t)
    row = next(line for line in table.split("\n") if line.startswith("precision"))
    assert "&gt;= 0.9500 holds" in row and row.endswith("&gt;= 1.0000```")  # gate, then baseline
    assert "precision 0.8000 (gate &gt;= 0.9500 holds; baseline &gt;= 1.0000)" in fallback_text(alert)
    assert set(alert.held_gates) == {"precision"}  # only the gates that held

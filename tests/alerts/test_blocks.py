"""Alerts built from a release decision, and their Block Kit message and plain-text fallback."""

from __future__ import annotations

import json

from ragspine_pipeline.alerts.blocks import blocks, fallback_text
from ragspine_pipeline.alerts.model import release_alert, run_failure_alert

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
    "regressions": [{"metric": "precision", "baseline": 1.0, "current": 0.8, "delta": -0.2}],
    "failed_slices": [
        {"dimension": "workflow", "value": "oncall", "n": 11, "releasable_rate": 0.4545, "min_rate": 0.75},
        {"dimension": "workflow", "value": "a<b&c", "n": 12, "releasable_rate": 0.3333, "min_rate": 0.75},
    ],
}


def test_a_blocked_decision_names_gates_baselines_slices_index_and_run():
    alert = release_alert(BLOCKED, "release:golden", "http://dagster.local:3000/")
    assert alert.kind == "regression" and alert.run_url == "http://dagster.local:3000/runs/abc-123"
    assert alert.failure_keys == [
        "baseline:precision",
        "gate:admissible_rate",
        "gate:context_recall",
        "gate:under_refusal",
        "slice:workflow=a<b&c",
        "slice:workflow=oncall",
    ]
    # Worst first, in each metric's own direction: 0.41 short, 0.3 over, 0.2 below baseline, 0.05 short.
    assert [f.name for f in alert.worst_first()][:4] == [
        "admissible_rate",
        "under_refusal",
        "precision",
        "context_recall",
    ]


def test_the_block_kit_message_has_header_fields_table_slices_and_a_button():
    message = blocks(release_alert(BLOCKED, "release:golden", "http://dagster.local:3000"))
    assert [b["type"] for b in message] == [
        "header",
        "section",
        "section",
        "section",
        "section",
        "actions",
        "context",
    ]
    assert message[0]["text"]["text"] == "Release blocked: index ix-0002"
    fields = " ".join(f["text"] for f in message[1]["fields"])
    assert "ix-0002" in fields and "demo-2026.11" in fields and "abc-123" in fields and "3 gates" in fields
    assert message[2]["text"]["text"] == (
        "*Failed gates*: `under_refusal`, `admissible_rate`, `context_recall`"  # every one, by name
    )
    table = message[3]["text"]["text"]
    assert table.index("admissible_rate") < table.index("under_refusal") < table.index("precision")
    assert "0.5942" in table and "&gt;= 1.0000" in table and "(baseline)" in table
    slices = message[4]["text"]["text"]
    assert "workflow=a&lt;b&amp;c" in slices and "(n=12)" in slices  # mrkdwn control characters escaped
    assert message[5]["elements"][0]["url"] == "http://dagster.local:3000/runs/abc-123"
    assert len(json.dumps(message)) < 40_000


def test_the_fallback_text_carries_the_worst_findings_on_one_line():
    text = fallback_text(release_alert(BLOCKED, "release:golden"))
    assert text.startswith("Release blocked: index ix-0002: admissible_rate 0.5942 (needs >= 1.0000)")
    assert "(+3 more)" in text and "\n" not in text


def test_a_recovery_and_a_run_failure_render_without_a_table():
    recovered = release_alert({**BLOCKED, "decision": "ship"}, "release:golden")
    assert recovered.kind == "recovered" and recovered.findings == []
    assert fallback_text(recovered) == "Recovered: release ships on index ix-0002"
    assert "actions" not in [b["type"] for b in blocks(recovered)]  # no webserver URL configured

    failed = run_failure_alert(
        "reeval_on_index_rebuild", "r-9", "golden_traces", "cannot reach\n  http://sut"
    )
    assert fallback_text(failed) == (
        "Evaluation run failed: reeval_on_index_rebuild at step golden_traces: cannot reach http://sut"
    )
    assert "cannot reach http://sut" in blocks(failed)[2]["text"]["text"]


def test_many_findings_stay_within_slack_limits():
    many = {
        **BLOCKED,
        "failed_gates": [
            {"metric": f"metric_{i}", "value": 0.1, "op": ">=", "threshold": 0.9, "delta": -0.8}
            for i in range(60)
        ],
    }
    message = blocks(release_alert(many, "release:golden"))
    named, table = message[2]["text"]["text"], message[3]["text"]["text"]
    assert "metric_59" in named and len(named) <= 3000
    assert "… and 53 more" in table and len(table) <= 3000


def test_the_fabrication_count_reads_as_a_count_not_a_rate():
    fabricated = {
        **BLOCKED,
        "failed_gates": [{"metric": "fabrication", "value": 2.0, "op": "<=", "threshold": 0.0, "delta": 2.0}],
        "regressions": [{"metric": "fabrication_count", "baseline": 0, "current": 2, "delta": 2}],
    }
    text = fallback_text(release_alert(fabricated, "release:golden"))
    assert "fabrication 2 (needs <= 0)" in text and "fabrication_count 2 (baseline <= 0)" in text

"""Nightly production metrics in the code location: a significant drop against the trailing nights is a
WARN check and one Slack alert (never a failed run), and every test is recorded with its p-value. Steady
nights are neither; how the test behaves under sampling noise and day-to-day variation is simulated in
tests/scoring/test_significance.py and bench/bench_drift_alarms.py."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from ragspine_pipeline.defs.local import backfill_production
from tests.defs.declared import demo_definitions

# Whole code-location runs (Dagster jobs executed end to end): the system layer.
pytestmark = pytest.mark.system

FIRST = date(2026, 11, 1)
TRACES = 400


def write_day(store: Path, day: date, compliance: float, rng: np.random.Generator) -> None:
    """One day of traces, exactly ``compliance`` of them compliant, in random order; an answer without
    a citation list is non-compliant."""
    folder = store / f"dt={day.isoformat()}"
    folder.mkdir(parents=True)
    lines = []
    cited = rng.permutation(TRACES) < round(compliance * TRACES)
    for i in range(TRACES):
        answer = {"claim": "Freeze starts Friday."}
        if cited[i]:
            answer["citations"] = ["freeze#1"]
        trace = {"request_id": f"{day}-{i}", "answer": answer, "retrieved_ids": ["freeze#1"]}
        lines.append(json.dumps({**trace, "tags": {"channel": "slack"}}))
    (folder / "part-0.jsonl").write_text("\n".join(lines) + "\n")


def nightly_definitions(tmp_path: Path, sample_size: int | None = None, **env: str):
    """The code location on the traces written under ``tmp_path`` (no demo), every day sampled whole
    (or ``sample_size`` traces a night), with the other settings ``env`` gives."""
    return demo_definitions(
        {
            "RAGSPINE_HOME": str(tmp_path / "no-demo"),
            "RAGSPINE_TRACE_STORE": str(tmp_path / "traces"),
            "RAGSPINE_REPORTS": str(tmp_path / "reports"),
            "RAGSPINE_WORK": str(tmp_path / "work"),
            "RAGSPINE_ALERTS_OUTBOX": str(tmp_path / "alerts" / "outbox.jsonl"),
            "RAGSPINE_SAMPLE_SIZE": str(TRACES if sample_size is None else sample_size),
            **env,
        }
    )


def test_a_significant_drop_warns_and_alerts_once_steady_nights_do_not(tmp_path, monkeypatch, fake_slack):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-production")
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-production")
    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    rng = np.random.default_rng(3)
    days = [FIRST + timedelta(days=i) for i in range(9)]
    for day in days[:8]:
        write_day(tmp_path / "traces", day, 0.95, rng)  # steady nights
    write_day(tmp_path / "traces", days[8], 0.85, rng)  # ten points down
    defs = nightly_definitions(tmp_path)
    with dg.instance_for_test() as instance:
        runs = backfill_production(defs, instance, [d.isoformat() for d in days])
    assert all(run.success for run in runs)  # a drop is a warning, not a failed run
    checks = [
        {c.check_name: c for c in run.get_asset_check_evaluations()}["no_significant_drop"] for run in runs
    ]
    assert [c.passed for c in checks] == [True] * 8 + [False]
    assert checks[-1].severity == dg.AssetCheckSeverity.WARN
    drops = {(d["metric"], d["slice"]): d for d in checks[-1].metadata["drops"].value}
    drop = drops[("production_compliance", "all traffic")]
    assert drop["nights"] == 1 and drop["trailing_days"] == 8 and drop["trailing_n"] == 8 * TRACES
    assert drop["current"] == 0.85 and drop["p_value"] < 0.001 and drop["q_value"] < 0.02
    assert ("production_compliance", "channel=slack") in drops  # the one slice, tested on its own
    [post] = fake_slack.posts
    assert post["text"].startswith(
        f"Production metrics of {days[8]}: 4 significant drops"
    )  # compliance and citation validity, overall and in the slice
    assert (
        "production_compliance @ all traffic 0.8500 (tonight, n=400) vs 0.9500 over 8 trailing nights"
        in post["text"]
    )
    summary = json.loads((tmp_path / "reports" / "production" / f"{days[8]}.json").read_text())
    tests = summary["drop_tests"]["tests"]
    assert summary["drop_tests"]["tested"] == sum(t["p_value"] is not None for t in tests) >= 4
    assert all(t["reason"] for t in tests if t["p_value"] is None)  # an untested rate says why


def _old_night(day: date, rate: float) -> dict:
    """A night's summary as written before the production metrics were renamed: ``compliance``,
    ``citation_validity``, ``admissible_rate`` and ``fabrication`` were their names."""
    k = round(rate * TRACES)
    entry = {"value": rate, "n": TRACES, "successes": k, "low": rate - 0.02, "high": rate + 0.02}
    metrics = {
        "refusal_rate": {"value": 0.0, "n": TRACES, "successes": 0, "low": 0.0, "high": 0.01},
        "compliance": entry,
        "citation_validity": entry,
        "fabrication": {"value": 0, "n": 0, "rate": 0.0, "low": 0.0, "high": 1.0},
    }
    return {"day": day.isoformat(), "n": TRACES, "metrics": metrics,
            "slices": {"channel": {"slack": {"n": TRACES, "metrics": metrics}}}}  # fmt: skip


def test_nights_written_under_the_old_metric_names_are_still_trailing_nights(tmp_path):
    days = [FIRST + timedelta(days=i) for i in range(9)]
    folder = tmp_path / "reports" / "production"
    folder.mkdir(parents=True)
    for day in days[:8]:
        (folder / f"{day}.json").write_text(json.dumps(_old_night(day, 0.95)))
    write_day(tmp_path / "traces", days[8], 0.85, np.random.default_rng(3))  # ten points down
    defs = nightly_definitions(tmp_path)
    with dg.instance_for_test() as instance:
        (run,) = backfill_production(defs, instance, [days[8].isoformat()])
    assert run.success
    summary = json.loads((folder / f"{days[8]}.json").read_text())
    assert "production_compliance" in summary["metrics"] and "compliance" not in summary["metrics"]
    tests = {(t["metric"], t["slice"], t["nights"]): t for t in summary["drop_tests"]["tests"]}
    for metric in ("production_compliance", "retrieved_citation_rate"):
        test = tests[(metric, "all traffic", 1)]
        assert test["trailing_days"] == 8 and test["trailing_n"] == 8 * TRACES, metric
        assert test["alert"], metric  # the old nights count: a ten-point drop against them

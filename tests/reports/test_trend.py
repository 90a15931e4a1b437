"""The trend over past golden runs compares like with like: only runs of this run's golden set and baseline
mode, with one line saying when the golden set changed and what was left out."""

from __future__ import annotations

import dagster as dg
import pytest

from ragspine_pipeline.defs.reports import golden_history
from ragspine_pipeline.reports.html import render_html
from ragspine_pipeline.reports.html_trend import comparable_runs
from ragspine_pipeline.reports.slice_report import slice_markdown
from tests.reports.test_html import figures, notes, parse, table_rows

DAY = 86_400.0
START = 1_795_000_000.0  # 2026-11-18 UTC


def _run(i: int, golden: str | None, mode: str | None, releasable: float) -> dict:
    run = {"run_id": f"run-{i}", "timestamp": START + i * DAY, "index_version": f"ix-{i}",
           "decision": "ship", "metrics": {"releasable_rate": releasable, "precision": 0.9}}  # fmt: skip
    # a materialisation written before metric_table recorded them has neither entry
    return run | ({"golden_version": golden} if golden else {}) | ({"mode": mode} if mode else {})


HISTORY = [
    _run(0, None, None, 0.70),  # recorded before the entries existed: an unknown golden set
    *(_run(i, "tiny-10", "golden", 1.0) for i in (1, 2, 3)),  # a 10-case set: every case passes
    *(_run(i, "demo-2026.11", "golden", 0.9) for i in (4, 5)),
    _run(6, "demo-2026.11", "paired", 0.5),  # the same set judged in another baseline mode
    _run(7, "demo-2026.11", "golden", 0.92),  # this run
]
REPORT = {
    "gates": [{"metric": "precision", "op": ">=", "threshold": 0.8, "value": 0.9, "pass": True}],
    "release": {"decision": "ship", "run_id": "run-7", "golden_version": "demo-2026.11",
                "failed_gates": [], "failed_slices": [], "regressions": []},
}  # fmt: skip
LEFT_OUT = (
    "Golden set changed on 2026-11-22: tiny-10 → demo-2026.11; 4 earlier runs on other golden sets not "
    "shown; 1 run of this golden set in another mode (paired) not shown."
)


def test_the_trend_shows_only_runs_of_this_golden_set_and_mode_and_says_what_changed():
    root = parse(render_html(REPORT, history=HISTORY, mode="golden"))
    (section,) = root.all("section", id="trend")
    runs = [row.all("td")[0].content() for row in table_rows(section)]
    assert runs == ["run-4", "run-5", "run-7"]
    chart = figures(root)["trend"].all("svg")[0]
    points = [c.content() for c in chart.all("circle") if c.content().startswith("releasable_rate")]
    assert points == ["releasable_rate at ix-4: 0.9000", "releasable_rate at ix-5: 0.9000",
                      "releasable_rate at ix-7: 0.9200"]  # fmt: skip
    (line,) = [p for p in section.all("p") if p.attrs.get("data-note") == "trend-left-out"]
    assert line.content() == LEFT_OUT

    markdown = slice_markdown(REPORT, history=HISTORY, mode="golden")
    trend = markdown[markdown.index("## Trend") :]
    assert f"_{LEFT_OUT}_" in trend
    assert [row.split(" | ")[0] for row in trend.splitlines() if row.startswith("| `")] == [
        "| `run-4`",
        "| `run-5`",
        "| `run-7`",
    ]


def test_without_a_mode_every_run_of_the_golden_set_is_shown():
    trend = comparable_runs(HISTORY, "demo-2026.11")
    assert [run["run_id"] for run in trend.runs] == ["run-4", "run-5", "run-6", "run-7"]
    assert trend.left_out.endswith("4 earlier runs on other golden sets not shown.")


def test_a_run_without_a_golden_version_compares_with_runs_without_one_only():
    trend = comparable_runs(HISTORY, "unknown", "golden")  # what metric_table records for an unfrozen set
    assert [run["run_id"] for run in trend.runs] == []  # run-0 has no mode recorded either
    trend = comparable_runs(HISTORY, None)
    assert [run["run_id"] for run in trend.runs] == ["run-0"]
    assert trend.left_out == (
        "golden set changed: demo-2026.11 → unknown; 7 earlier runs on other golden sets not shown."
    )


def test_a_golden_set_that_leaves_too_few_runs_says_so_instead_of_a_chart():
    history = [*HISTORY[:4], HISTORY[-1]]  # the first run on the new golden set
    root = parse(render_html(REPORT, history=history, mode="golden"))
    assert "trend" not in figures(root) and {"trend", "trend-left-out"} <= notes(root)


@pytest.mark.system  # Dagster runs
def test_golden_history_reads_the_golden_version_and_mode_of_each_materialisation():
    with dg.instance_for_test() as instance:
        for metadata in (
            {"index_version": "ix-1"},  # recorded before metric_table carried the two entries
            {"index_version": "ix-2", "golden_version": "demo-2026.11", "mode": "golden"},
        ):
            event = dg.AssetMaterialization(
                "metric_table", metadata={**metadata, "metrics": {"precision": 0.9}}
            )
            instance.report_runless_asset_event(event)
        history = golden_history(instance, dg.AssetKey("metric_table"))
    assert [(h["index_version"], h["golden_version"], h["mode"]) for h in history] == [
        ("ix-1", None, None),
        ("ix-2", "demo-2026.11", "golden"),
    ]


@pytest.mark.system  # Dagster runs
def test_a_run_that_decided_and_then_failed_is_no_decision(tmp_path):
    """The decision is made (metric_table, the tag) and a later step fails: the failure path withdraws
    the tag, and the trend leaves the run out; a run that succeeded stays in."""
    from ragspine_pipeline.defs.alerts import finish_failed_run
    from ragspine_pipeline.defs.release import DECISION_TAG
    from ragspine_pipeline.defs.resources import AlertsResource

    @dg.asset
    def metric_table(context) -> dg.Output[None]:
        context.instance.add_run_tags(context.run.run_id, {DECISION_TAG: "ship"})
        return dg.Output(None, metadata={"decision": "ship", "metrics": {"precision": 0.9}})

    @dg.asset(deps=[metric_table], config_schema={"fail": bool})
    def later_step(context) -> None:
        if context.op_execution_context.op_config["fail"]:
            raise RuntimeError("the trace store went away")

    alerts = AlertsResource(outbox_path=str(tmp_path / "outbox.jsonl"), webserver_base_url=None)
    with dg.instance_for_test() as instance:
        runs = {}
        for fail in (False, True):
            config = {"ops": {"later_step": {"config": {"fail": fail}}}}
            result = dg.materialize(
                [metric_table, later_step], instance=instance, run_config=config, raise_on_error=False
            )
            runs[fail] = instance.get_run_by_id(result.run_id)
        assert runs[True].status == dg.DagsterRunStatus.FAILURE
        finish_failed_run(alerts, runs[True], [], instance)  # what the failure sensor does
        assert instance.get_run_by_id(runs[True].run_id).tags[DECISION_TAG] == "none: the run failed"
        assert instance.get_run_by_id(runs[False].run_id).tags[DECISION_TAG] == "ship"
        history = golden_history(instance, dg.AssetKey("metric_table"))
    assert [h["run_id"] for h in history] == [runs[False].run_id]

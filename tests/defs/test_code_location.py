"""The code location end to end on a temporary SQLite instance and a freshly written demo.

One demo (a module-scoped fixture) serves every test here: init it once, materialise the whole graph
once, then exercise the degraded rebuild, the sensor, and the failure modes against it.
"""

from __future__ import annotations

import json
import sys
from datetime import date, timedelta

import dagster as dg
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ragspine_pipeline.decision.causes import cause_sentence
from ragspine_pipeline.decision.gates import DEFAULT_GATES, DEFAULT_QA_GATES
from ragspine_pipeline.decision.release import ReleaseDecision
from ragspine_pipeline.defs.automation import run_key
from ragspine_pipeline.defs.io import to_table
from ragspine_pipeline.defs.release import (
    BASELINE_CHECK,
    DECISION_TAG,
    INDEX_CHECK,
    SHIPS_CHECK,
    SLICE_CHECK,
    check_name,
    committed_gates,
    release_gates_check,
)
from ragspine_pipeline.demo.build import init_demo, rebuild_index
from ragspine_pipeline.reports.metric_table import SCHEMA as METRIC_TABLE_SCHEMA
from tests.defs.declared import demo_definitions, demo_env, demo_service

TODAY = date(2026, 11, 22)
YESTERDAY = (TODAY - timedelta(days=1)).isoformat()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    init_demo(root, today=TODAY, traces_per_day=120)
    return root


@pytest.fixture(scope="module")
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture(scope="module")
def healthy_run(demo, instance, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    defs = demo_definitions(demo_env(demo, out))
    night = defs.resolve_job_def("nightly_eval").execute_in_process(
        instance=instance, partition_key=YESTERDAY, raise_on_error=False
    )
    assert night.success, [e.message for e in night.all_events if e.is_failure]
    # Launched as `dg launch --job full_eval` launches it: no partition to name.
    result = defs.resolve_job_def("full_eval").execute_in_process(instance=instance, raise_on_error=False)
    return defs, result, out


def test_the_definitions_load_with_one_check_per_committed_gate():
    defs = demo_definitions()
    dg.Definitions.validate_loadable(defs)
    assert {job.name for job in defs.jobs} >= {"nightly_eval", "reeval_on_index_rebuild"}
    checks = {key.name for key in defs.resolve_asset_graph().asset_check_keys}
    _config, gates = committed_gates(demo_service().gates_config)
    assert {check_name(g.metric) for g in gates} | {SLICE_CHECK} <= checks
    assert defs.resolve_sensor_def("index_rebuild_sensor").default_status == dg.DefaultSensorStatus.STOPPED
    schedule = defs.resolve_schedule_def("nightly_eval_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.cron_schedule == "0 2 * * *"


def test_a_config_without_gates_gets_a_check_for_every_default_gate(tmp_path):
    config = tmp_path / "gates.yaml"
    config.write_text("k: 5\n")
    _config, gates = committed_gates(config)
    assert [g.metric for g in gates] == [*DEFAULT_GATES, *DEFAULT_QA_GATES]
    check = release_gates_check(config)
    names = {key.name for key in check.check_keys}
    fixed = {SHIPS_CHECK, SLICE_CHECK, BASELINE_CHECK, INDEX_CHECK}
    assert names == {check_name(g.metric) for g in gates} | fixed


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_the_healthy_demo_ships_and_writes_every_report(healthy_run, instance):
    _defs, result, out = healthy_run
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    latest = out / "reports" / "latest"
    decision = json.loads((latest / "release_decision.json").read_text())
    assert decision["decision"] == "ship"
    assert decision["failed_gates"] == [] and decision["failed_slices"] == []
    assert instance.get_run_by_id(result.run_id).tags[DECISION_TAG] == "ship"
    table = pq.read_table(latest / "metric_table.parquet")
    metrics = set(table.column("metric").to_pylist())
    assert {"releasable", "admissible", "context_recall", "claim_faithfulness", "citation_hit"} <= metrics
    assert table.num_rows == len(set(table.column("qid").to_pylist())) * len(metrics)  # long: case x metric
    assert "Slice report" in (latest / "slice_report.md").read_text()
    html = (latest / "slice_report.html").read_text()
    assert "<svg" in html and 'data-chart="gates"' in html
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks if c.severity == dg.AssetCheckSeverity.ERROR)
    # A shipping run's reasons say there are none, rather than showing empty tables.
    [event] = [
        e for e in result.get_asset_materialization_events() if e.asset_key.path == ["release_decision"]
    ]
    reasons = event.materialization.metadata["reasons"].value
    assert reasons == "None: every gate, slice and baselined metric holds."


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_the_whole_graph_is_two_named_jobs_and_the_report_follows_everything_it_shows(healthy_run):
    """`full_eval` is everything but a production day and is not partitioned, so it runs as launched
    without a partition; `nightly_eval` is the production day; together they are the whole graph."""
    defs, result, _out = healthy_run
    assert result.dagster_run.job_name == "full_eval"
    full, nightly = defs.resolve_job_def("full_eval"), defs.resolve_job_def("nightly_eval")
    assert full.partitions_def is None and nightly.partitions_def is not None
    production = {dg.AssetKey("production_traces"), dg.AssetKey("production_metrics")}
    assert not production & set(full.asset_layer.selected_asset_keys)
    assert set(full.asset_layer.selected_asset_keys) | set(nightly.asset_layer.selected_asset_keys) == set(
        defs.resolve_asset_graph().materializable_asset_keys
    )
    parents = defs.resolve_asset_graph().get(dg.AssetKey("slice_report")).parent_keys
    assert parents == {dg.AssetKey(k) for k in ("metric_table", "production_metrics", "extraction_scores")}


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_every_table_loads_as_a_dataframe_and_the_decision_as_its_model(healthy_run, instance):
    defs, _result, out = healthy_run
    with defs.get_asset_value_loader(instance) as loader:
        table = loader.load_asset_value("metric_table")
        decision = loader.load_asset_value("release_decision", python_type=ReleaseDecision)
        plain = loader.load_asset_value("release_decision")  # a notebook without this package
        slices = loader.load_asset_value("slice_report")
        metrics = loader.load_asset_value("production_metrics", partition_key=YESTERDAY)
        sample = loader.load_asset_value("production_traces", partition_key=YESTERDAY)
    for frame in (table, slices, metrics, sample):
        assert isinstance(frame, pd.DataFrame) and all(isinstance(t, pd.ArrowDtype) for t in frame.dtypes)
    latest = out / "reports" / "latest"
    written = pq.read_table(latest / "metric_table.parquet").replace_schema_metadata(None)
    assert to_table(table, METRIC_TABLE_SCHEMA).equals(written)
    record = json.loads((latest / "release_decision.json").read_text())
    assert isinstance(decision, ReleaseDecision) and decision.record() == record
    assert plain == decision.model_dump(mode="json", by_alias=True)
    assert decision.baseline_figures["n_cases"] == len(set(table["qid"]))
    assert len(slices) > 0 and not slices["failed"].any()
    overall = metrics[metrics["dimension"].isna()].set_index("metric")
    summary = json.loads((out / "reports" / "production" / f"{YESTERDAY}.json").read_text())
    assert overall.loc["refusal_rate", "value"] == summary["metrics"]["refusal_rate"]["value"]
    assert len(sample) == summary["n"] == 80  # RAGSPINE_SAMPLE_SIZE


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_a_shipping_run_promotes_the_baseline(healthy_run, demo):
    _defs, result, _out = healthy_run
    baseline = json.loads((demo / "baseline.json").read_text())
    assert baseline["golden"]["metrics"]["releasable_rate"] > 0
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {
        "golden_set",
        "golden_traces",
        "metric_table",
        "release_decision",
        "baseline",
        "slice_report",
    } <= materialized


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_production_metadata_counts_quarantined_lines(healthy_run, instance):
    days = [(TODAY - timedelta(days=d)).isoformat() for d in range(1, 8)]
    _defs, _result, _out = healthy_run
    event = instance.get_latest_materialization_event(dg.AssetKey("production_traces"))
    metadata = event.asset_materialization.metadata
    assert event.asset_materialization.partition in days
    assert metadata["dagster/row_count"].value > 0
    assert metadata["read"].value >= metadata["valid"].value + metadata["quarantined"].value


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_a_degraded_index_blocks_records_the_decision_and_does_not_promote(healthy_run, demo, instance):
    defs, _result, out = healthy_run
    before = (demo / "baseline.json").read_text()
    manifest = rebuild_index(demo, degraded=True)
    job = defs.resolve_job_def("reeval_on_index_rebuild")
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    # A blocked release is a successful evaluation: the run succeeds, tagged with its verdict, ...
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert instance.get_run_by_id(result.run_id).tags[DECISION_TAG] == "block"
    decision = json.loads((out / "reports" / "runs" / result.run_id / "release_decision.json").read_text())
    assert decision["decision"] == "block"
    assert decision["index_version"] == manifest["index_version"]
    assert "admissible_rate" in {g["metric"] for g in decision["failed_gates"]}
    assert decision["failed_slices"]
    # ... with its causes, which the asset's metadata states in one sentence.
    assert next(iter(decision["causes"]["first_failed_stage"])) == "admissibility"
    event = instance.get_latest_materialization_event(dg.AssetKey("release_decision"))
    assert event.asset_materialization.metadata["why"].value == cause_sentence(decision["causes"])
    # ... and every failed hard gate (and the verdict) is a failed ERROR check: red in the UI.
    evaluations = result.get_asset_check_evaluations()
    failed_checks = {c.check_name for c in evaluations if not c.passed}
    hard = {check_name(g["metric"]) for g in decision["failed_gates"] if g["severity"] == "hard"}
    assert hard and hard | {SHIPS_CHECK, SLICE_CHECK} <= failed_checks
    assert all(c.severity == dg.AssetCheckSeverity.ERROR for c in evaluations if c.check_name in hard)
    failed_gate_checks = {n for n in failed_checks if n.startswith("gate_")}
    assert failed_gate_checks == {check_name(g["metric"]) for g in decision["gates"] if g["pass"] is False}
    # The UI's reasons: the failed gates, then the failed slices, each a table; the slice check too.
    reasons = event.asset_materialization.metadata["reasons"].value
    assert reasons.startswith("| gate | value | needs | delta | severity |")
    assert "| slice | n | releasable | 95% CI | needs |" in reasons
    [slice_check] = [c for c in result.get_asset_check_evaluations() if c.check_name == SLICE_CHECK]
    table = slice_check.metadata["failed_slices"].value.splitlines()
    worst = decision["failed_slices"][0]
    assert table[0] == "| slice | n | releasable | 95% CI | needs |"
    assert len(table) == 2 + len(decision["failed_slices"]) == 2 + slice_check.metadata["failed"].value
    assert table[2].startswith(f"| {worst['dimension']}={worst['value']} | {worst['n']} | ")
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "release_decision" in materialized and "baseline" not in materialized
    assert (demo / "baseline.json").read_text() == before
    rebuild_index(demo)  # healthy again for the tests that follow


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_a_failed_extraction_channel_is_shown_in_the_report_not_skipped(healthy_run, demo, instance):
    defs, _result, out = healthy_run
    rebuild_index(demo, degraded_parser=True)
    result = defs.resolve_job_def("reeval_on_index_rebuild").execute_in_process(
        instance=instance, raise_on_error=False
    )
    failed = {c.check_name for c in result.get_asset_check_evaluations() if not c.passed}
    assert {"channel_color_mapping", "channel_header_attribution"} <= failed
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {"extraction_scores", "slice_report"} <= materialized
    page = (out / "reports" / "runs" / result.run_id / "slice_report.md").read_text()
    assert "color_mapping" in page and result.run_id in page
    rebuild_index(demo)  # healthy again for the tests that follow


def test_the_sensor_requests_one_run_per_new_index_version(demo, instance, tmp_path):
    defs = demo_definitions(demo_env(demo, tmp_path))
    index_rebuild_sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    resources = {"index_manifest": defs.resources["index_manifest"]}
    version = json.loads((demo / "index" / "manifest.json").read_text())["index_version"]

    first = index_rebuild_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert [r.run_key for r in first.run_requests] == [run_key(version)] and first.cursor == version
    again = index_rebuild_sensor(
        dg.build_sensor_context(instance=instance, cursor=version, resources=resources)
    )
    assert isinstance(again, dg.SkipReason) and version in again.skip_message

    newer = rebuild_index(demo)["index_version"]
    third = index_rebuild_sensor(
        dg.build_sensor_context(instance=instance, cursor=version, resources=resources)
    )
    assert [r.run_key for r in third.run_requests] == [run_key(newer)] and third.cursor == newer


def test_a_missing_manifest_makes_the_sensor_skip_with_a_reason(tmp_path, instance):
    defs = demo_definitions(demo_env(tmp_path / "nowhere", tmp_path))
    index_rebuild_sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    context = dg.build_sensor_context(
        instance=instance, resources={"index_manifest": defs.resources["index_manifest"]}
    )
    outcome = index_rebuild_sensor(context)
    assert isinstance(outcome, dg.SkipReason) and "manifest.json" in outcome.skip_message


@pytest.mark.system  # a whole code-location run
def test_a_changed_golden_set_fails_golden_set_with_the_spec_message(demo, tmp_path):
    changed = tmp_path / "golden"
    changed.mkdir()
    gold = (demo / "golden" / "gold.jsonl").read_text().splitlines()
    (changed / "gold.jsonl").write_text("\n".join(gold[1:]) + "\n")  # one case removed
    (changed / "gold.jsonl.lock").write_text((demo / "golden" / "gold.jsonl.lock").read_text())
    defs = demo_definitions(demo_env(demo, tmp_path, RAGSPINE_GOLDEN=str(changed / "gold.jsonl")))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("reeval_on_index_rebuild").execute_in_process(
            instance=instance, raise_on_error=False
        )
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.step_failure_data.user_failure_data.description
    assert "changed" in message and "gold.jsonl" in message and "\n" not in message


@pytest.mark.system  # a whole code-location run against a closed port (~15 s)
def test_an_unreachable_sut_fails_golden_traces_with_a_clear_error(demo, tmp_path, closed_port, monkeypatch):
    monkeypatch.setenv("RAGSPINE_STEP_RETRIES", "0")  # the step's error, not its retries (test_unattended)
    env = {"RAGSPINE_SUT": "http", "RAGSPINE_SUT_URL": f"http://127.0.0.1:{closed_port}"}
    defs = demo_definitions(demo_env(demo, tmp_path, **env))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("reeval_on_index_rebuild").execute_in_process(
            instance=instance, raise_on_error=False
        )
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "golden_traces"
    message = failure.step_failure_data.user_failure_data.description
    assert f"127.0.0.1:{closed_port}" in message and "\n" not in message


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_the_baseline_step_refuses_a_decision_a_concurrent_promotion_made_stale(healthy_run, demo, instance):
    """The run decided against the baseline it read; by the time it promotes, another run has promoted a
    stricter value. The step compares again under the lock, writes nothing, and says why."""
    defs, result, _out = healthy_run
    assert result.success
    decision = result.output_for_node("golden_evaluation", "release_decision")
    path = demo / "baseline.json"
    original = path.read_text()
    stricter = json.loads(original)
    stricter["golden"]["metrics"]["releasable_rate"] = 0.99  # a concurrent, better run promoted it meanwhile
    path.write_text(json.dumps(stricter))
    before = path.read_text()
    with (
        dg.build_asset_context(
            resources={"eval_files": defs.resources["eval_files"]}, instance=instance
        ) as context,
        pytest.raises(dg.Failure, match=r"the baseline moved since this run decided .*releasable_rate"),
    ):
        list(defs.resolve_assets_def("baseline")(context, decision))
    assert path.read_text() == before
    path.write_text(original)  # the module's demo, as the other tests left it


def test_runs_execute_in_process_unless_the_environment_asks_for_processes_or_celery(monkeypatch):
    from ragspine_pipeline.errors import InputError

    for name in ("nightly_eval", "reeval_on_index_rebuild"):
        assert demo_definitions().resolve_job_def(name).executor_def.name == "in_process"
    monkeypatch.setenv("RAGSPINE_EXECUTOR", "multiprocess")
    assert demo_definitions().resolve_job_def("nightly_eval").executor_def.name == "multiprocess"
    pytest.importorskip("dagster_celery", reason="dagster-celery is not installed (the deploy extra)")
    monkeypatch.setenv("RAGSPINE_EXECUTOR", "celery")
    executor = demo_definitions().resolve_job_def("nightly_eval").executor_def
    assert executor.name == "celery"
    monkeypatch.setenv("RAGSPINE_EXECUTOR", "kubernetes")
    with pytest.raises(InputError, match="unknown executor 'kubernetes'"):
        demo_definitions()
    monkeypatch.setenv("RAGSPINE_EXECUTOR", "celery")
    monkeypatch.setitem(sys.modules, "dagster_celery", None)  # a host without the deploy extra
    with pytest.raises(InputError, match=r"celery needs dagster-celery: pip install -e '\.\[deploy\]'"):
        demo_definitions()


def test_locations_derived_from_an_s3_work_folder_stay_s3_uris():
    service = demo_service({"RAGSPINE_WORK": "s3://evals/work", "RAGSPINE_HOME": "/srv/demo"})
    assert service.files.work_dir == "s3://evals/work" and service.sut.answers_dir is None
    assert service.judge.cache_uri == "s3://evals/work/judge-cache"
    assert service.files.golden_path == "/srv/demo/golden/gold.jsonl"


def test_the_rebuild_sensor_interval_comes_from_the_environment():
    from ragspine_pipeline.defs.automation import sensor_interval
    from ragspine_pipeline.errors import InputError

    assert sensor_interval({}) == 60
    assert sensor_interval({"RAGSPINE_REBUILD_SENSOR_INTERVAL_S": "5"}) == 5
    for bad in ("0", "-1", "1.5", "soon"):
        with pytest.raises(InputError, match="RAGSPINE_REBUILD_SENSOR_INTERVAL_S"):
            sensor_interval({"RAGSPINE_REBUILD_SENSOR_INTERVAL_S": bad})


def test_versions_replaced_between_ticks_are_named_never_skipped_silently(demo, instance, tmp_path):
    defs = demo_definitions(demo_env(demo, tmp_path))
    index_rebuild_sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    resources = {"index_manifest": defs.resources["index_manifest"]}
    evaluated = json.loads((demo / "index" / "manifest.json").read_text())["index_version"]
    first = rebuild_index(demo)["index_version"]  # published, then replaced before the next tick
    second = rebuild_index(demo)["index_version"]
    context = dg.build_sensor_context(instance=instance, cursor=evaluated, resources=resources)
    outcome = index_rebuild_sensor(context)
    [request] = outcome.run_requests
    assert request.run_key == run_key(second) and outcome.cursor == second
    assert request.tags["ragspine/superseded_versions"] == first
    again = index_rebuild_sensor(
        dg.build_sensor_context(instance=instance, cursor=second, resources=resources)
    )
    assert isinstance(again, dg.SkipReason)


def test_a_version_a_run_evaluated_meanwhile_is_not_called_missed(demo, tmp_path):
    defs = demo_definitions(demo_env(demo, tmp_path))
    sensor = defs.resolve_sensor_def("index_rebuild_sensor")
    cursor = json.loads((demo / "index" / "manifest.json").read_text())["index_version"]
    first = rebuild_index(demo)["index_version"]
    second = rebuild_index(demo)["index_version"]
    with dg.instance_for_test() as instance:
        # `make run` (not the sensor) evaluated the first one: its metric table names the index.
        instance.report_runless_asset_event(
            dg.AssetMaterialization("metric_table", metadata={"index_version": first})
        )
        outcome = sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
    [request] = outcome.run_requests
    assert request.run_key == run_key(second) and "ragspine/superseded_versions" not in request.tags
    rebuild_index(demo)  # healthy again for the tests that follow


def test_what_the_sensor_says_about_superseded_versions():
    from ragspine_pipeline.defs.automation import superseded

    assert superseded(None, ["a"]) == ([], None)  # the first tick: nothing was evaluated before
    assert superseded("b", ["a", "b"]) == ([], None)  # the version after the cursor is the live one
    assert superseded("a", ["a", "b", "c"])[0] == ["b", "c"]
    missed, note = superseded("z", ["x", "y"])
    assert missed == ["x", "y"] and "does not reach back to the last evaluated version z" in note
    assert "keeps no previous_versions" in superseded("a", [])[1]
    # A version a run evaluated by other means (make run, a run launched by hand) was not missed.
    assert superseded("a", ["a", "b", "c"], {"b"}) == (
        ["c"],
        "1 version(s) replaced before they were evaluated: c",
    )
    assert superseded("a", ["a", "b"], {"b"}) == ([], None)
    assert superseded("z", ["x", "y"], {"x", "y"}) == ([], None)


@pytest.mark.system  # the demo's whole graph run (healthy_run)
def test_every_gated_metric_is_a_number_on_the_metric_table_so_the_ui_plots_it(healthy_run, instance):
    _defs, result, out = healthy_run
    [event] = [
        e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("metric_table")
    ]
    metadata = event.materialization.metadata
    decision = json.loads((out / "reports" / "latest" / "release_decision.json").read_text())
    gated = {gate["metric"]: gate["value"] for gate in decision["gates"] if gate["applicable"]}
    assert gated and {f"gate/{m}" for m in gated} == {k for k in metadata if k.startswith("gate/")}
    for metric, value in gated.items():
        entry = metadata[f"gate/{metric}"]
        assert isinstance(entry, dg.FloatMetadataValue) and abs(entry.value - value) < 1e-4

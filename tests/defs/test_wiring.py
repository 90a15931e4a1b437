"""The wiring of a declared service, checked in milliseconds without running anything: the
:class:`Service` a ``defs.yaml`` resolves to, and the asset graph, jobs, checks, sensors and schedule the
component builds for it. The whole runs that go through the same wiring end to end are system tests."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.component import RagEvaluation, definitions_of
from ragspine_pipeline.defs.release import check_name, committed_gates
from ragspine_pipeline.errors import InputError
from tests.defs.declared import demo_service

DAYS = {"production_traces", "production_metrics"}


def declared(root: Path, **attributes) -> dg.Definitions:
    """A service named support_bot declared under ``root`` (its project root), as a defs.yaml would."""
    settings = {
        "golden_set": "golden/gold.jsonl",
        "trace_store": "traces",
        "sut": {"kind": "http", "url": "{{ env.SB_URL }}"},
    }
    declaration = RagEvaluation.resolve_from_dict({**settings, **attributes})
    return declaration.service(root / "defs" / "support_bot", root)


def test_the_demo_declaration_is_the_unprefixed_demo_read_from_the_environment():
    service = demo_service(
        {"RAGSPINE_HOME": "/srv/demo", "RAGSPINE_WORK": "s3://evals/work", "RAGSPINE_SAMPLE_SIZE": "50"}
    )
    assert service.name is None and service.key("golden_set") == dg.AssetKey("golden_set")
    assert service.node("full_eval") == "full_eval" and service.alerts.service is None
    assert service.files.golden_path == "/srv/demo/golden/gold.jsonl"
    assert service.files.work_dir == "s3://evals/work" and service.files.production_sample_size == 50
    assert service.files.extraction_facts == "/srv/demo/extraction/facts.jsonl" and service.extracts
    assert service.sut.kind == "reference" and service.sut.manifest_path == "/srv/demo/index/manifest.json"


def test_a_named_declaration_resolves_its_templated_settings_and_paths_against_the_project_root(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    service = declared(tmp_path, nightly_at="03:30", sample_size=120, alerts={"runbook": "https://wiki/sb"})
    assert service.name == "support_bot" and service.alerts.service == "support_bot"
    assert service.files.golden_path == str(tmp_path / "golden" / "gold.jsonl")
    assert service.files.baseline_path == str(tmp_path / "var" / "support_bot" / "baseline.json")
    assert service.alerts.outbox_path == str(tmp_path / "var" / "support_bot" / "alerts" / "outbox.jsonl")
    assert service.files.production_sample_size == 120 and service.nightly_at == (3, 30)
    assert service.alerts.runbook_url == "https://wiki/sb"
    assert service.sut.kind == "declared" and "http://127.0.0.1:9/answer" in service.sut.settings_json
    assert not service.extracts  # no facts and truth named: no extraction assets at all


def test_a_named_services_graph_is_prefixed_and_each_job_selects_its_own_part(tmp_path, monkeypatch):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    service = declared(tmp_path, nightly_at="03:30")
    defs = definitions_of(service)
    graph = defs.resolve_asset_graph()
    keys = graph.materializable_asset_keys
    assert {key.path[-1] for key in keys} == {
        "golden_set",
        "golden_traces",
        "metric_table",
        "release_decision",
        "baseline",
        "slice_report",
        *DAYS,
    }
    assert all(key.path[0] == "support_bot" for key in keys)
    full = set(defs.resolve_job_def("support_bot__full_eval").asset_layer.selected_asset_keys)
    nightly = set(defs.resolve_job_def("support_bot__nightly_eval").asset_layer.selected_asset_keys)
    assert full == {key for key in keys if key.path[-1] not in DAYS}  # everything but a production day
    assert {key.path[-1] for key in nightly} == DAYS | {"slice_report"}  # the night, and the report
    schedule = defs.resolve_schedule_def("support_bot__nightly_eval_schedule")
    assert schedule.cron_schedule == "30 3 * * *" and schedule.job_name == "support_bot__nightly_eval"
    sensors = {sensor.name for sensor in defs.sensors}
    assert {"support_bot__index_rebuild_sensor", "support_bot__evaluation_run_failure_sensor"} <= sensors
    assert all(name.startswith("support_bot__") for name in sensors)


def test_every_gate_of_the_services_config_is_a_check_on_its_release_decision(tmp_path, monkeypatch):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  precision: {min: 0.80}\n  chr: {min: 0.75}\n")
    service = declared(tmp_path, gates="gates.yaml")
    checks = definitions_of(service).resolve_asset_graph().asset_check_keys
    on_decision = {c.name for c in checks if c.asset_key == dg.AssetKey(["support_bot", "release_decision"])}
    _config, committed = committed_gates(gates)
    assert {check_name(gate.metric) for gate in committed} <= on_decision
    assert {"gate_precision", "gate_chr"} <= on_decision
    assert {"release_ships", "slice_gate", "no_regression_vs_baseline", "regression_alert"} <= on_decision


def test_a_malformed_setting_is_one_line_naming_the_file_and_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    with pytest.raises(InputError) as info:
        declared(tmp_path, nightly_at="25:00")
    assert str(info.value).startswith(str(tmp_path / "defs" / "support_bot" / "defs.yaml"))
    assert "nightly_at '25:00' is not HH:MM" in str(info.value)


def test_a_services_alerts_carry_the_runbook_lines_of_its_own_gates_config(tmp_path, monkeypatch):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    gates = tmp_path / "gates.yaml"
    gates.write_text("alerts:\n  runbook:\n    release: Roll the index back first.\n")
    service = declared(tmp_path, gates="gates.yaml", alerts={"runbook": "https://wiki/sb"})
    assert service.alerts.runbook("release").startswith("Roll the index back first.")
    assert "https://wiki/sb" in service.alerts.runbook("release")  # the service's link, beside its line
    assert service.alerts.runbook("production") != service.alerts.runbook("release")


def test_a_trace_store_of_opentelemetry_spans_is_declared_with_its_format_and_span_settings(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    from ragspine_pipeline.sources.span_store import SpanTraceStore
    from ragspine_pipeline.sources.trace_store import LocalTraceStore

    store = {"path": "collector", "format": "otlp", "citation_pattern": r"\[(\w+#\d+)\]"}
    service = declared(tmp_path, trace_store=store)
    opened = service.trace_store.open()
    assert isinstance(opened, SpanTraceStore) and opened.settings.citation_pattern == r"\[(\w+#\d+)\]"
    assert opened.describe() == str(tmp_path / "collector")
    assert isinstance(declared(tmp_path).trace_store.open(), LocalTraceStore)  # a path: trace lines
    with pytest.raises(InputError, match="citation pattern"):
        declared(tmp_path, trace_store={**store, "citation_pattern": "(a)(b)"}).trace_store.open()


def test_nested_settings_take_values_from_the_environment_too(tmp_path, monkeypatch):
    """``{{ env.* }}`` resolves inside the alerts, the trace store, the extraction and the judge as at the
    top level (before, a nested value was kept as the template's own text: an outbox named
    ``{{ env.SB_OUTBOX }}``)."""
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    monkeypatch.setenv("SB_OUTBOX", "postgresql://evals@127.0.0.1:5432/alerts")
    monkeypatch.setenv("SB_SPANS", "s3://spans/sb")
    monkeypatch.setenv("SB_JUDGE_CALLS", "40")
    service = declared(
        tmp_path,
        alerts={"outbox": "{{ env.SB_OUTBOX }}", "slack_channel": "{{ env('SB_CHANNEL', '#sb-evals') }}"},
        trace_store={"path": "{{ env.SB_SPANS }}", "format": "otlp"},
        extraction={"facts": "{{ env('SB_FACTS', 'extraction/facts.jsonl') }}", "truth": "truth.json"},
        judge={"max_calls": "{{ env.SB_JUDGE_CALLS }}", "repeat": 3},
    )
    assert service.alerts.outbox_path == "postgresql://evals@127.0.0.1:5432/alerts"
    assert service.alerts.slack_channel == "#sb-evals"
    assert service.trace_store.uri == "s3://spans/sb" and service.trace_store.format == "otlp"
    assert service.files.extraction_facts == str(tmp_path / "extraction" / "facts.jsonl") and service.extracts
    assert service.files.extraction_baseline == str(tmp_path / "var/support_bot/extraction/baseline.json")
    assert service.judge.max_calls == 40 and service.judge.repeat == 3
    assert service.judge.cache_uri == str(tmp_path / "var" / "support_bot" / "work" / "judge-cache")


def test_every_setting_of_the_demo_is_a_setting_any_service_has(tmp_path, monkeypatch):
    """What the demo reads from its variables, a named service states in its own defs.yaml: the sample's
    strata and shards, the replay's repeats, the alert expiry, the judge's budget, the S3 region, the
    demo's own engine as SUT."""
    service = declared(
        tmp_path,
        sut={"kind": "reference"},
        index_manifest="index/manifest.json",
        sample_stratify="product",
        sample_shards=4,
        replay_repeat=3,
        s3_region="eu-west-1",
        alerts={"ttl_hours": 6},
        judge={"production_sample": 0, "thresholds": "answer_relevancy=4"},
    )
    assert service.sut.kind == "reference" and service.sut.repeat == 3
    assert service.sut.manifest_path == str(tmp_path / "index" / "manifest.json")
    assert service.files.production_stratify == "product" and service.files.production_shards == 4
    assert service.trace_store.region == "eu-west-1" and service.index_manifest.region == "eu-west-1"
    assert service.alerts.ttl_hours == 6 and service.judge.production_sample == 0
    assert service.judge.thresholds == "answer_relevancy=4"


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ({"sample_size": 0}, "0", "sample_size"),
        ({"sample_shards": 300}, "300", "sample_shards"),
        ({"replay_repeat": 0}, "0", "replay_repeat"),
        ({"replay_max_failed_share": 1.5}, "1.5", "replay_max_failed_share"),
        ({"alerts": {"ttl_hours": 0}}, "0", "alerts.ttl_hours"),
        ({"judge": {"repeat": 0}}, "0", "judge.repeat"),
    ],
)
def test_a_number_out_of_range_is_one_line_naming_the_setting(tmp_path, monkeypatch, setting, value, named):
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    with pytest.raises(InputError) as info:
        declared(tmp_path, **setting)
    message = str(info.value)
    assert message.startswith(str(tmp_path / "defs" / "support_bot" / "defs.yaml")) and "\n" not in message
    assert f"{named}:" in message and info.value.field == named, message


def test_each_variable_the_demo_reads_reaches_its_setting(tmp_path):
    recorded = tmp_path / "answers.jsonl"
    env = {
        "RAGSPINE_HOME": str(tmp_path / "demo"),
        "RAGSPINE_SUT": "recorded",
        "RAGSPINE_SUT_RECORDED": str(recorded),
        "RAGSPINE_GATES_CONFIG": str(tmp_path / "gates.yaml"),
        "RAGSPINE_SAMPLE_STRATIFY": "product",
        "RAGSPINE_SAMPLE_SHARDS": "8",
        "RAGSPINE_REPLAY_REPEAT": "2",
        "RAGSPINE_REPLAY_REUSE_ANSWERS": "1",
        "RAGSPINE_REPLAY_MAX_FAILED_SHARE": "0.1",
        "RAGSPINE_ALERT_TTL_HOURS": "6",
        "RAGSPINE_UI_URL": "https://dagster.example",
        "RAGSPINE_RUNBOOK_URL": "https://wiki/evals",
        "RAGSPINE_JUDGE_REPEAT": "3",
        "RAGSPINE_JUDGE_MAX_TOKENS": "90000",
        "RAGSPINE_JUDGE_THRESHOLDS": "answer_relevancy=4",
        "RAGSPINE_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    (tmp_path / "gates.yaml").write_text("gates:\n  precision: {min: 0.8}\n")
    service = demo_service(env)
    assert service.sut.kind == "declared" and str(recorded) in service.sut.settings_json
    assert service.sut.repeat == 2 and service.sut.reuse_answers and service.sut.max_failed_share == 0.1
    assert service.gates_config == tmp_path / "gates.yaml"
    assert service.files.production_stratify == "product" and service.files.production_shards == 8
    assert service.alerts.ttl_hours == 6 and service.alerts.webserver_base_url == "https://dagster.example"
    assert service.alerts.runbook_url == "https://wiki/evals"
    assert service.judge.repeat == 3 and service.judge.max_tokens == 90000
    assert service.judge.thresholds == "answer_relevancy=4"
    assert service.files.s3_endpoint_url == "http://127.0.0.1:9000" == service.trace_store.endpoint_url
    assert service.trace_store.region == "eu-west-1"
    http = demo_service({"RAGSPINE_SUT": "http", "RAGSPINE_SUT_URL": "http://127.0.0.1:9/"})
    assert '"url":"http://127.0.0.1:9/answer"' in http.sut.settings_json


def test_a_services_production_days_start_at_its_own_trace_stores_first_day(tmp_path, monkeypatch):
    """Not at the demo's store's: a team's service with a month of traces can be backfilled from its
    first day, whatever the demo's store holds."""
    monkeypatch.setenv("SB_URL", "http://127.0.0.1:9/answer")
    monkeypatch.delenv("RAGSPINE_PARTITIONS_START", raising=False)
    for day in ("2026-10-03", "2026-10-04"):
        (tmp_path / "traces" / f"dt={day}").mkdir(parents=True)
        (tmp_path / "traces" / f"dt={day}" / "part-0.jsonl").write_text("{}\n")
    defs = definitions_of(declared(tmp_path))
    days = defs.get_assets_def(dg.AssetKey(["support_bot", "production_traces"])).partitions_def
    assert days.get_first_partition_key() == "2026-10-03"

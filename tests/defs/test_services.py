"""Several services in one code location, each a `ragspine_pipeline.RagEvaluation` in a defs.yaml: two
services on loopback HTTP fakes with different JSON shapes (one behind a bearer token) evaluated side by
side, one ships and one blocks, each with its own assets, baseline, alerts and reports, and the token
nowhere; `dg list components`, `dg scaffold defs` then `dg check defs` in a project of one's own; an
instance without its required settings fails to load with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.defs.io import IO_MANAGER_KEY, ObjectStoreIOManager
from ragspine_pipeline.errors import InputError
from tests.defs.declared import DEMO_DECLARATION
from tests.fake_rag_service import NESTED_MAPPING, FakeRagService

ROOT = Path(__file__).resolve().parents[2]
WFGY = ROOT / "examples" / "wfgy"
TOKEN = "tok-beta-4f1e9c2d7a"
GATES = "gates:\n  precision: {min: 0.80}\n  chr: {min: 0.75}\n  compliance: {min: 0.98}\n"
PYPROJECT = """\
[project]
name = "evals"
version = "0.0.1"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "evals"
"""


def project(folder: Path) -> Path:
    """A Dagster project of the reader's own: `evals`, its services under `evals/defs/`."""
    (folder / "evals" / "defs").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "evals" / "__init__.py").write_text("")
    (folder / "evals" / "defs" / "__init__.py").write_text("")
    (folder / "evals" / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n"
        "defs = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n"
    )
    return folder


def declare(folder: Path, name: str, attributes: dict) -> None:
    path = folder / "evals" / "defs" / name / "defs.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"type": "ragspine_pipeline.RagEvaluation", "attributes": attributes}))


def declare_demo(folder: Path, prefixed: bool = True) -> None:
    """The embedded demo declared in the reader's project as the code location declares it (its
    ``defs.yaml``, every setting read from the environment), under the name ``demo``."""
    text = (DEMO_DECLARATION / "defs.yaml").read_text(encoding="utf-8")
    path = folder / "evals" / "defs" / "demo" / "defs.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text.replace("prefixed: false", f"prefixed: {str(prefixed).lower()}"))


def traces(worse: bool = False) -> dict[str, dict]:
    rows = [json.loads(line) for line in (WFGY / "traces.jsonl").read_text().splitlines()]
    if worse:  # every other answer loses its citations
        for row in rows[::2]:
            row["answer_json"] = {**row["answer_json"], "citations": []}
    return {row["qid"]: row for row in rows}


def forget(package: str = "evals") -> None:
    """Drop an earlier test's project package of the same name from this process's imports: each test
    writes its own ``evals``, and a worker process runs many such tests."""
    for module in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[module]


def load(folder: Path, monkeypatch, package: str = "evals") -> dg.Definitions:
    monkeypatch.syspath_prepend(str(folder))
    forget(package)
    return dg.load_from_defs_folder(path_within_project=folder / package)


@pytest.mark.system  # a whole code-location runs
def test_two_services_in_one_code_location_are_evaluated_apart(tmp_path, monkeypatch, fake_slack):
    folder = project(tmp_path / "evals-project")
    shutil.copy(WFGY / "gold.jsonl", folder / "gold.jsonl")
    (folder / "gates.yaml").write_text(GATES)
    (folder / "traces").mkdir()
    monkeypatch.setenv("BETA_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_CHANNEL", "#rag-releases")
    monkeypatch.setenv("SLACK_API_BASE_URL", fake_slack.url)
    with (
        FakeRagService(traces()) as alpha_service,
        FakeRagService(traces(worse=True), shape="nested", token=TOKEN, path="/v2/ask") as beta_service,
    ):
        common = {"golden_set": "gold.jsonl", "gates": "gates.yaml", "trace_store": "traces"}
        monkeypatch.setenv("ALPHA_URL", alpha_service.url)  # a setting filled from the environment
        alpha_sut = {"kind": "http", "url": "{{ env.ALPHA_URL }}"}
        declare(folder, "alpha", {**common, "sut": alpha_sut, "nightly_at": "03:30"})
        beta_sut = {
            "kind": "http",
            "url": beta_service.url,
            "headers": {"Authorization": "Bearer ${BETA_TOKEN}"},
            "body": {"id": "{qid}", "input": {"text": "{question}"}},
            "response": NESTED_MAPPING,
        }
        beta_alerts = {"slack_channel": "#beta-eval", "reports_url": "https://reports.example.com/beta"}
        declare(folder, "beta", {**common, "sut": beta_sut, "alerts": beta_alerts})
        monkeypatch.chdir(folder)
        defs = load(folder, monkeypatch)
        assert {job.name for job in defs.jobs} >= {"alpha__nightly_eval", "beta__reeval_on_index_rebuild"}
        assert defs.resolve_schedule_def("alpha__nightly_eval_schedule").cron_schedule == "30 3 * * *"
        assert defs.resolve_schedule_def("beta__nightly_eval_schedule").cron_schedule == "0 2 * * *"
        with dg.instance_for_test() as instance:
            for name in ("alpha", "beta"):
                job = defs.resolve_job_def(f"{name}__reeval_on_index_rebuild")
                job.execute_in_process(instance=instance, raise_on_error=False)
            for name in ("alpha", "beta"):  # the run-status sensors: each service posts its own runs
                for run in instance.get_runs():
                    assert run.is_success, run.job_name  # a blocked release is a successful evaluation
                    sensor = defs.resolve_sensor_def(f"{name}__evaluation_run_success_sensor")
                    [record] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)
                    sensor(
                        dg.build_run_status_sensor_context(
                            sensor_name=sensor.name,
                            dagster_event=record.get_dagster_event(),
                            dagster_instance=instance,
                            dagster_run=run,
                        )
                    )
            materialized = {
                key.to_user_string()
                for key in instance.get_asset_keys()
                if instance.get_latest_materialization_event(key)
            }
            logs = " ".join(
                str(record) for run in instance.get_runs() for record in instance.all_logs(run.run_id)
            )
    assert {"alpha/release_decision", "beta/release_decision", "alpha/baseline"} <= materialized
    assert "beta/baseline" not in materialized  # a blocked release promotes nothing
    decision = {
        name: json.loads((folder / "var" / name / "reports" / "latest" / "release_decision.json").read_text())
        for name in ("alpha", "beta")
    }
    assert decision["alpha"]["decision"] == "ship" and decision["beta"]["decision"] == "block"
    assert (folder / "var" / "alpha" / "baseline.json").exists()
    assert not (folder / "var" / "beta" / "baseline.json").exists()
    assert beta_service.unauthorised == 0 and sum(beta_service.asked.values()) == 20
    beta_outbox = (folder / "var" / "beta" / "alerts" / "outbox.jsonl").read_text()
    assert (
        '"title": "beta: Release blocked' in beta_outbox and '"stream": "beta/release:golden"' in beta_outbox
    )
    alpha_outbox = folder / "var" / "alpha" / "alerts" / "outbox.jsonl"
    assert not alpha_outbox.exists() or "Release blocked" not in alpha_outbox.read_text()
    [post] = fake_slack.posts  # alpha shipped: nothing to say; beta blocked, in its own channel
    assert post["channel"] == "#beta-eval" and post["text"].startswith("beta: Release blocked")
    buttons = {
        e["text"]["text"]: e["url"] for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]
    }
    run_id = decision["beta"]["run_id"]
    assert buttons["Open the report"] == f"https://reports.example.com/beta/runs/{run_id}/slice_report.html"
    assert (folder / "var" / "beta" / "reports" / "runs" / run_id / "slice_report.html").exists()
    written = [p for p in folder.rglob("*") if p.is_file()]
    assert all(TOKEN not in p.read_text(errors="replace") for p in written)
    assert TOKEN not in logs


def test_an_instance_without_its_settings_fails_to_load_with_one_line(tmp_path, monkeypatch):
    folder = project(tmp_path / "evals-project")
    declare(folder, "gamma", {"golden_set": "gold.jsonl", "trace_store": "traces"})
    with pytest.raises(Exception) as info:
        load(folder, monkeypatch)
    cause = info.value
    while not isinstance(cause, InputError) and cause.__cause__ is not None:
        cause = cause.__cause__
    assert isinstance(cause, InputError)
    assert (
        str(cause)
        == f"{folder / 'evals' / 'defs' / 'gamma' / 'defs.yaml'}: sut is not set: say which sut to evaluate"
    )


def test_a_service_without_extraction_has_no_extraction_assets_or_checks(tmp_path, monkeypatch):
    """No facts and truth named: no extraction assets, channel checks or alert (not four green checks on
    nothing), and every job of the service still resolves; the demo keeps its channels."""
    folder = project(tmp_path / "evals-project")
    sut = {"kind": "http", "url": "http://127.0.0.1:9/answer"}
    declare(folder, "gamma", {"golden_set": "gold.jsonl", "trace_store": "traces", "sut": sut})
    declare_demo(folder)
    defs = load(folder, monkeypatch)
    keys = {"/".join(key.path) for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert not {k for k in keys if k.startswith("gamma/") and "extraction" in k}
    assert {"demo/extraction_scores", "demo/extraction_baseline"} <= keys
    checks = {f"{c.asset_key.path[0]}:{c.name}" for c in defs.resolve_asset_graph().asset_check_keys}
    assert not {c for c in checks if c.startswith("gamma:") and ("channel" in c or "extraction" in c)}
    assert "demo:extraction_alert" in checks
    for job in ("gamma__full_eval", "gamma__reeval_on_index_rebuild", "gamma__nightly_eval"):
        assert defs.resolve_job_def(job).name == job


def test_each_services_jobs_select_its_own_steps_only(tmp_path, monkeypatch):
    """The demo without a prefix beside a named service: its plain `full_eval` runs the demo's steps, not
    the other service's, and the other's jobs only its own."""
    folder = project(tmp_path / "evals-project")
    sut = {"kind": "http", "url": "http://127.0.0.1:9/answer"}
    declare(folder, "gamma", {"golden_set": "gold.jsonl", "trace_store": "traces", "sut": sut})
    declare_demo(folder, prefixed=False)
    defs = load(folder, monkeypatch)
    graph = defs.resolve_asset_graph()
    every = {key for key in graph.materializable_asset_keys}
    gamma = {key for key in every if key.path[0] == "gamma"}
    for job, own in (("full_eval", every - gamma), ("gamma__full_eval", gamma)):
        selected = set(defs.resolve_job_def(job).asset_layer.selected_asset_keys)
        days = {key for key in own if key.path[-1] in ("production_traces", "production_metrics")}
        assert selected == own - days, job


def test_in_a_project_of_ones_own_each_service_runs_and_stores_as_in_the_code_location(tmp_path, monkeypatch):
    """A project's own definitions set no executor or IO manager (Dagster's defaults: a process per step,
    pickles): each service's jobs still execute in process, as ``RAGSPINE_EXECUTOR`` says, and every value
    a step hands on goes through the service's IO manager (Parquet, JSON, whole or absent), under a key
    of its own beside the project's own ``io_manager``; two services share it."""
    folder = project(tmp_path / "evals-project")
    sut = {"kind": "http", "url": "http://127.0.0.1:9/answer"}
    declare(folder, "gamma", {"golden_set": "gold.jsonl", "trace_store": "traces", "sut": sut})
    declare_demo(folder)
    own = folder / "evals" / "defs" / "own_store" / "definitions.py"  # the project's own default store
    own.parent.mkdir()
    own.write_text(
        "import dagster as dg\n\ndefs = dg.Definitions(resources={'io_manager': dg.mem_io_manager})\n"
    )
    defs = load(folder, monkeypatch)
    assert defs.resources["io_manager"] is dg.mem_io_manager  # the project's, untouched
    jobs = [job for job in defs.resolve_all_job_defs() if not job.name.startswith("__")]
    assert len(jobs) == 6
    assert {job.executor_def.name for job in jobs} == {"in_process"}
    stored = {  # what each step hands on (a check's result is recorded, not stored)
        (handle.name, out.io_manager_key)
        for job in jobs
        for handle in job.graph.iterate_node_handles()
        if isinstance(node := job.graph.get_node(handle).definition, dg.OpDefinition)
        for out in node.output_defs
        if job.asset_layer.get_asset_check_key_for_node_output(handle, out.name) is None
    }
    assert stored and {key for _, key in stored} == {IO_MANAGER_KEY}, stored
    assert isinstance(defs.resources[IO_MANAGER_KEY], ObjectStoreIOManager)
    monkeypatch.setenv("RAGSPINE_EXECUTOR", "multiprocess")
    again = load(folder, monkeypatch)
    assert again.resolve_job_def("gamma__full_eval").executor_def.name == "multiprocess"


def dg_command(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(folder), "VIRTUAL_ENV": str(Path(sys.executable).parent.parent)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return subprocess.run(
        [str(Path(sys.executable).parent / "dg"), *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.system  # three `dg` subprocesses (~15 s)
def test_the_component_is_listed_scaffolded_and_checked_in_a_project_of_ones_own(tmp_path):
    folder = project(tmp_path / "evals-project")
    listed = dg_command(folder, "list", "components")
    assert "ragspine_pipeline.RagEvaluation" in listed.stdout, listed.stderr
    scaffolded = dg_command(folder, "scaffold", "defs", "ragspine_pipeline.RagEvaluation", "support_bot")
    assert scaffolded.returncode == 0, scaffolded.stderr
    text = (folder / "evals" / "defs" / "support_bot" / "defs.yaml").read_text()
    assert "name: support_bot" in text and text.startswith("# One evaluated service")
    checked = dg_command(folder, "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr


@pytest.mark.system  # a whole code-location run (~6 s)
def test_a_scaffolded_service_evaluates_the_demo_as_written(tmp_path, monkeypatch):
    from ragspine_pipeline.cli import main

    folder = project(tmp_path / "evals-project")
    assert (
        dg_command(folder, "scaffold", "defs", "ragspine_pipeline.RagEvaluation", "support_bot").returncode
        == 0
    )
    assert main(["demo", "init", "--root", str(folder / "var" / "demo"), "--traces-per-day", "40"]) == 0
    monkeypatch.chdir(folder)
    # On a deployed host RAGSPINE_HOME is the first service's: a degraded index there is not this one's.
    live = tmp_path / "first-service"
    assert main(["demo", "init", "--root", str(live), "--traces-per-day", "40"]) == 0
    assert main(["demo", "rebuild-index", "--root", str(live), "--degraded"]) == 0
    monkeypatch.setenv("RAGSPINE_HOME", str(live))
    defs = load(folder, monkeypatch)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("support_bot__reeval_on_index_rebuild").execute_in_process(
            instance=instance, raise_on_error=False
        )
    decision = json.loads(
        (folder / "var" / "support_bot" / "reports" / "latest" / "release_decision.json").read_text()
    )
    assert decision["decision"] == "ship", [e.message for e in result.all_events if e.is_failure]
    own = json.loads((folder / "var" / "demo" / "index" / "manifest.json").read_text())["index_version"]
    assert decision["index_version"] == own  # asked of its own demo index, not $RAGSPINE_HOME's
    assert (folder / "var" / "support_bot" / "baseline.json").exists()


@pytest.mark.system  # `dg` subprocesses and a whole run (~14 s)
def test_a_project_from_init_loads_in_dagster_and_decides_against_the_service(tmp_path, monkeypatch):
    """`ragspine-eval init` writes a Dagster project too: `dg check defs` passes, and its service's
    re-evaluation asks the (loopback) service and decides."""
    from ragspine_pipeline.cli import main
    from tests.test_your_service_doc import answers

    with FakeRagService(answers(), token=TOKEN, path="/v1/answer") as service:
        folder = tmp_path / "support-bot"
        assert main(["init", str(folder), "--sut-url", service.url]) == 0
        # A second service scaffolded in it reads the project's own files, its outputs apart (not the demo).
        scaffold = ("scaffold", "defs", "ragspine_pipeline.RagEvaluation", "second_bot")
        assert dg_command(folder, *scaffold).returncode == 0
        second = (folder / "support_bot_evaluation" / "defs" / "second_bot" / "defs.yaml").read_text()
        assert "golden_set: golden/gold.jsonl" in second and "sut: sut.yaml" in second
        assert "var/demo" not in second and "baseline: var/second_bot/baseline.json" in second
        checked = dg_command(folder, "check", "defs")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        shutil.rmtree(folder / "support_bot_evaluation" / "defs" / "second_bot")  # one service below
        monkeypatch.setenv("SUPPORT_BOT_TOKEN", TOKEN)
        monkeypatch.chdir(folder)
        defs = load(folder, monkeypatch, "support_bot_evaluation")
        with dg.instance_for_test() as instance:
            job = defs.resolve_job_def("support_bot__reeval_on_index_rebuild")
            result = job.execute_in_process(instance=instance, raise_on_error=False)
            # Every job runs as `dg launch --job` launches it: full_eval names no partition, the nightly
            # job one day of a trace store that is still empty.
            full = defs.resolve_job_def("support_bot__full_eval").execute_in_process(
                instance=instance, raise_on_error=False, tags={"dagster/retry_strategy": "FROM_FAILURE"}
            )
            nightly = defs.resolve_job_def("support_bot__nightly_eval")
            day = nightly.partitions_def.get_last_partition_key()
            night = nightly.execute_in_process(instance=instance, partition_key=day, raise_on_error=False)
    for run in (result, full, night):
        assert run.success, [e.message for e in run.all_events if e.is_failure]
    decision = json.loads((folder / "var" / "reports" / "latest" / "release_decision.json").read_text())
    assert decision["decision"] == "ship" and decision["metrics"]["under_refusal"] == 0.0
    # Each run asks the service anew (answers belong to the run that asked): 5 cases, two runs.
    assert dict(service.asked) == {f"SUPPORT-BOT-00{i}": 2 for i in range(1, 6)} and service.unauthorised == 0


def test_a_setting_given_twice_in_defs_yaml_is_refused_with_one_line(tmp_path, monkeypatch):
    """Dagster's reading of defs.yaml keeps the last of two equal keys; the component refuses them, so a
    setting written twice never changes what is evaluated unseen."""
    folder = project(tmp_path / "evals-project")
    path = folder / "evals" / "defs" / "gamma" / "defs.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "type: ragspine_pipeline.RagEvaluation\n"
        "attributes:\n"
        "  golden_set: gold.jsonl\n"
        "  trace_store: traces\n"
        "  sut: {kind: http, url: 'http://127.0.0.1:9/answer'}\n"
        "  golden_set: other.jsonl\n"
    )
    with pytest.raises(Exception) as info:
        load(folder, monkeypatch)
    cause = info.value
    while not isinstance(cause, InputError) and cause.__cause__ is not None:
        cause = cause.__cause__
    assert str(cause) == f"{path}:6: duplicate key 'golden_set' (first on line 3)"

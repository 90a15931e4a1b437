"""``ragspine-eval deploy check`` and ``deploy bootstrap`` against real endpoints: moto's S3 server on
loopback and, for a complete deployment, a fresh database on the loopback PostgreSQL (those tests are
system tests, and skipped with the reason where PostgreSQL is absent)."""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from ragspine_pipeline.cli.app import main
from ragspine_pipeline.defs.judge import DEPLOYED_POOLS as POOLS
from ragspine_pipeline.demo.build import init_demo
from ragspine_pipeline.sources.manifest import read_manifest
from ragspine_pipeline.sources.s3 import s3_client
from ragspine_pipeline.sources.trace_store import open_trace_store
from tests.conftest import PG, SECRET_KEY, give_database

ROOT = Path(__file__).resolve().parents[2]
CELERY_INSTANCE = ROOT / "deploy" / "celery" / "dagster.yaml"
SLACK_TOKEN = "xoxb-fake-slack-token-0451"
PG_PASSWORD = "fake-pg-password-7731"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    init_demo(root, today=date(2026, 11, 22), traces_per_day=40)
    return root


@pytest.fixture
def settings(monkeypatch, s3_endpoint, tmp_path):
    """A deployment's S3 settings on the moto server, in two buckets of their own (not yet created),
    the Slack settings, and DAGSTER_HOME holding a copy of deploy/celery/dagster.yaml."""
    evals, traces = f"evals-{uuid.uuid4().hex[:8]}", f"traces-{uuid.uuid4().hex[:8]}"
    env = {
        "RAGSPINE_S3_ENDPOINT_URL": s3_endpoint,
        "RAGSPINE_TRACE_STORE": f"s3://{traces}/prod",
        "RAGSPINE_INDEX_MANIFEST": f"s3://{evals}/index/manifest.json",
        "RAGSPINE_EXTRACTION_FACTS": f"s3://{evals}/extraction/facts.jsonl",
        "RAGSPINE_BASELINE": f"s3://{evals}/baseline.json",
        "RAGSPINE_EXTRACTION_BASELINE": f"s3://{evals}/extraction/baseline.json",
        "RAGSPINE_IO_URI": f"s3://{evals}/io",
        "RAGSPINE_REPORTS": f"s3://{evals}/reports",
        "RAGSPINE_WORK": f"s3://{evals}/work",
        "DAGSTER_COMPUTE_LOG_BUCKET": evals,
        "DAGSTER_COMPUTE_LOG_PREFIX": "compute-logs",
        "DAGSTER_S3_ENDPOINT_URL": s3_endpoint,
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_CHANNEL": "#evals",
        "DAGSTER_HOME": str(tmp_path / "dagster-home"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("RAGSPINE_JUDGE_CACHE", "RAGSPINE_ALERTS_OUTBOX", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    home = Path(env["DAGSTER_HOME"])
    home.mkdir()
    shutil.copyfile(CELERY_INSTANCE, home / "dagster.yaml")
    return {"evals": evals, "traces": traces, **env}


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(["deploy", *argv])
    out, err = capsys.readouterr()
    return code, (out + err).splitlines()


def test_check_prints_one_line_per_missing_thing_and_no_secret(settings, monkeypatch, capsys):
    monkeypatch.delenv("SLACK_CHANNEL")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", PG_PASSWORD)
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER"):
        monkeypatch.delenv(name, raising=False)

    code, lines = run(capsys, "check")

    assert code == 1
    home = settings["DAGSTER_HOME"]
    assert lines == [
        f"DAGSTER_PG_HOST: not set (named by {home}/dagster.yaml)",
        f"DAGSTER_PG_PORT: not set (named by {home}/dagster.yaml)",
        f"DAGSTER_PG_DB: not set (named by {home}/dagster.yaml)",
        f"DAGSTER_PG_USER: not set (named by {home}/dagster.yaml)",
        f"bucket {settings['traces']} (RAGSPINE_TRACE_STORE): does not exist "
        "(`ragspine-eval deploy bootstrap` creates it)",
        f"bucket {settings['evals']} (RAGSPINE_INDEX_MANIFEST, RAGSPINE_EXTRACTION_FACTS, RAGSPINE_BASELINE, "
        "RAGSPINE_EXTRACTION_BASELINE, RAGSPINE_IO_URI, RAGSPINE_REPORTS, RAGSPINE_WORK, "
        "DAGSTER_COMPUTE_LOG_BUCKET): does not exist (`ragspine-eval deploy bootstrap` creates it)",
        "Slack: SLACK_CHANNEL not set: alerts stay in the outbox",
        "deploy check: 7 thing(s) missing",
    ]
    text = "\n".join(lines)
    for secret in (PG_PASSWORD, SLACK_TOKEN, SECRET_KEY):
        assert secret not in text


def test_check_names_missing_credentials_and_region(settings, monkeypatch, capsys):
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "RAGSPINE_S3_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name)

    code, lines = run(capsys, "check", "--config", str(Path(settings["DAGSTER_HOME"]) / "absent.yaml"))

    assert code == 1
    assert lines[0].endswith("absent.yaml: no instance config here (copy one of deploy/*/dagster.yaml)")
    assert lines[1].startswith("AWS region: not set")
    assert lines[2].startswith("AWS credentials: none found")
    assert len(lines) == 4


def test_check_without_dagster_home_says_so(settings, monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME")
    code, lines = run(capsys, "check")
    assert code == 1 and lines[0] == "DAGSTER_HOME: not set (the folder holding the instance's dagster.yaml)"


def test_check_scrubs_a_secret_value_a_driver_quotes(monkeypatch):
    from ragspine_pipeline.cli.deploy import scrub

    monkeypatch.setenv("DAGSTER_PG_PASSWORD", PG_PASSWORD)
    line = scrub(f'connection to server failed: password "{PG_PASSWORD}" rejected', os.environ)
    assert PG_PASSWORD not in line and '"***"' in line


def test_bootstrap_creates_the_buckets_and_seeds_what_the_sources_read(settings, demo, capsys):
    code, lines = run(capsys, "bootstrap", "--from", str(demo))

    assert code == 0, lines
    assert lines[:2] == [
        f"bucket {settings['traces']}: created (RAGSPINE_TRACE_STORE)",
        f"bucket {settings['evals']}: created (RAGSPINE_INDEX_MANIFEST, RAGSPINE_EXTRACTION_FACTS, "
        "RAGSPINE_BASELINE, RAGSPINE_EXTRACTION_BASELINE, RAGSPINE_IO_URI, RAGSPINE_REPORTS, RAGSPINE_WORK, "
        "DAGSTER_COMPUTE_LOG_BUCKET)",
    ]
    endpoint = settings["RAGSPINE_S3_ENDPOINT_URL"]
    # The stores read the seeded objects as they read the local folder.
    remote = open_trace_store(settings["RAGSPINE_TRACE_STORE"], endpoint_url=endpoint)
    local = open_trace_store(str(demo / "traces"))
    assert remote.days() == local.days() and len(local.days()) == 7
    for day in local.days():
        assert remote.objects(day) == local.objects(day)
    manifest = read_manifest(settings["RAGSPINE_INDEX_MANIFEST"], endpoint_url=endpoint)
    assert manifest == read_manifest(str(demo / "index" / "manifest.json"))
    seeded = [line for line in lines[2:] if "uploaded" in line]
    assert [line.split(":")[0] for line in seeded] == [
        "RAGSPINE_TRACE_STORE",
        "RAGSPINE_INDEX_MANIFEST",
        "RAGSPINE_EXTRACTION_FACTS",
        "RAGSPINE_EXTRACTION_BASELINE",
    ]
    assert "RAGSPINE_BASELINE: nothing to seed" in "\n".join(lines)  # the demo has no baseline yet

    # Again: nothing is replaced, a baseline that moved on least of all.
    evals = settings["evals"]
    client = s3_client(endpoint_url=endpoint)
    client.put_object(Bucket=evals, Key="extraction/baseline.json", Body=b'{"ratcheted": true}')
    code, again = run(capsys, "bootstrap", "--from", str(demo))
    assert code == 0
    assert all(": exists (" in line for line in again[:2])
    assert all(" 0 uploaded" in line for line in again if "uploaded" in line)
    body = client.get_object(Bucket=evals, Key="extraction/baseline.json")["Body"].read()
    assert body == b'{"ratcheted": true}'


def test_bootstrap_without_an_s3_setting_is_unusable(monkeypatch, capsys, aws_env):
    for name in ("RAGSPINE_TRACE_STORE", "RAGSPINE_REPORTS", "DAGSTER_COMPUTE_LOG_BUCKET"):
        monkeypatch.delenv(name, raising=False)
    assert main(["deploy", "bootstrap"]) == 2
    assert "no setting names an S3 location" in capsys.readouterr().err


def _postgres_env(monkeypatch, database: str) -> None:
    monkeypatch.setenv("DAGSTER_PG_HOST", PG["host"])
    monkeypatch.setenv("DAGSTER_PG_PORT", str(PG["port"]))
    monkeypatch.setenv("DAGSTER_PG_USER", PG["user"])
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")  # trust authentication: set, and empty
    monkeypatch.setenv("DAGSTER_PG_DB", database)


def test_check_passes_on_a_complete_deployment_and_names_pools_not_set(
    settings, database, demo, monkeypatch, capsys
):
    _postgres_env(monkeypatch, database)
    monkeypatch.setenv(
        "RAGSPINE_ALERTS_OUTBOX", f"postgresql://{PG['user']}@{PG['host']}:{PG['port']}/{database}"
    )
    assert run(capsys, "bootstrap", "--from", str(demo))[0] == 0

    code, lines = run(capsys, "check")
    assert code == 1
    assert lines == [
        *(
            f"pool {pool}: not set: run `dagster instance concurrency set {pool} 1` once, "
            "before starting the daemon and the workers"
            for pool in POOLS
        ),
        f"deploy check: {len(POOLS)} thing(s) missing",
    ]

    with dg.DagsterInstance.from_config(settings["DAGSTER_HOME"]) as instance:
        for pool in POOLS:
            instance.event_log_storage.set_concurrency_slots(pool, 1)
    code, lines = run(capsys, "check")
    assert (code, lines) == (0, ["deploy check: nothing missing"])


def test_check_names_an_unreachable_postgres(settings, closed_port, monkeypatch, capsys):
    _postgres_env(monkeypatch, "dagster")
    monkeypatch.setenv("DAGSTER_PG_PORT", str(closed_port))
    code, lines = run(capsys, "check")
    assert code == 1
    assert lines[0].startswith(f"PostgreSQL 127.0.0.1:{closed_port}/dagster as postgres: cannot connect: ")


def test_wait_reports_a_finished_run_and_its_exit_says_how_it_ended(tmp_path, monkeypatch, capsys):
    """`deploy wait RUN_ID` on the instance at $DAGSTER_HOME: a run that succeeded without deciding
    exits 0, a failed one 2, an unknown one 2, each in one line; a DAGSTER_HOME Dagster cannot use is one
    line too. (A ship and a block under a real daemon: tests/test_your_service_doc.py.)"""

    @dg.op
    def fine() -> None:
        pass

    @dg.op
    def broken() -> None:
        raise RuntimeError("the step broke")

    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        ok = dg.GraphDefinition("ok", node_defs=[fine]).to_job().execute_in_process(instance=instance)
        failed = (
            dg.GraphDefinition("bad", node_defs=[broken])
            .to_job()
            .execute_in_process(instance=instance, raise_on_error=False)
        )
    assert main(["deploy", "wait", ok.run_id, "--timeout", "5"]) == 0
    assert capsys.readouterr().out == f"run {ok.run_id} (ok): SUCCESS\n"
    assert main(["deploy", "wait", failed.run_id, "--timeout", "5"]) == 2
    assert capsys.readouterr().out == f"run {failed.run_id} (bad): FAILURE\n"
    assert main(["deploy", "wait", "no-such-run", "--timeout", "1"]) == 2
    assert capsys.readouterr().out == "deploy wait: no run no-such-run on the instance at $DAGSTER_HOME\n"
    monkeypatch.setenv("DAGSTER_HOME", "relative/home")
    assert main(["deploy", "wait", ok.run_id]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be an absolute path" in err


def test_check_says_when_the_instances_user_may_not_create_its_tables(
    settings, database, pg_role, monkeypatch, capsys
):
    """PostgreSQL 15 and later: a database the superuser created (`createdb dagster`) does not let
    another role create tables in `public`; `deploy check` says so, and how to fix it, before the
    instance would fail on its first table. Made its owner (`createdb --owner`), the role may."""
    role = pg_role
    _postgres_env(monkeypatch, database)
    monkeypatch.setenv("DAGSTER_PG_USER", role)
    code, lines = run(capsys, "check")
    where = f"PostgreSQL {PG['host']}:{PG['port']}/{database} as {role}"
    assert code == 1 and lines[0] == (
        f"{where}: {role} may not create tables in schema public (PostgreSQL 15 and later: only the "
        f"database's owner may; create it with `createdb --owner {role} {database}` or "
        f"`ALTER DATABASE {database} OWNER TO {role}`)"
    )
    give_database(database, role)
    code, lines = run(capsys, "check")
    assert not [line for line in lines if line.startswith(where)]
    assert any(line.startswith("pool ") for line in lines)  # it got as far as the instance: it loads


def test_check_names_every_services_evaluation_pool_of_the_code_location(
    settings, database, monkeypatch, capsys, tmp_path
):
    """A service added to the deployed code location claims its own evaluation pool
    (`second_bot__evaluation`): `deploy -m MODULE check` names it until it is set, as it names the shipped
    pools; a module that does not load is one line."""
    from tests.defs.test_services import declare, forget, project

    forget("evals")  # another test's `evals` project, imported earlier in this worker
    folder = project(tmp_path / "evals-project")
    sut = {"kind": "http", "url": "http://127.0.0.1:9/answer"}
    declare(folder, "second_bot", {"golden_set": "gold.jsonl", "trace_store": "traces", "sut": sut})
    monkeypatch.syspath_prepend(str(folder))
    _postgres_env(monkeypatch, database)
    with dg.DagsterInstance.from_config(settings["DAGSTER_HOME"]) as instance:
        for pool in POOLS:
            instance.event_log_storage.set_concurrency_slots(pool, 1)
    monkeypatch.chdir(folder)
    code, lines = run(capsys, "check", "--module", "evals.definitions")
    assert code == 1 and lines[0] == (
        "pool second_bot__evaluation: not set: run `dagster instance concurrency set "
        "second_bot__evaluation 1` once, before starting the daemon and the workers"
    )
    with dg.DagsterInstance.from_config(settings["DAGSTER_HOME"]) as instance:
        instance.event_log_storage.set_concurrency_slots("second_bot__evaluation", 1)
    code, lines = run(capsys, "check", "--module", "evals.definitions")
    assert not [line for line in lines if line.startswith(("pool ", "code location "))]
    code, lines = run(capsys, "check", "--module", "no_such_module")
    assert (
        code == 1
        and lines[0] == "code location no_such_module: does not load: No module named 'no_such_module'"
    )

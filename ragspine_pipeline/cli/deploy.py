"""``ragspine-eval deploy check|bootstrap|wait``: is a host's deployment complete, the S3 side of a new
one, and the end of a run launched on it.

``check`` reads what every process of a deployed instance reads — ``$DAGSTER_HOME/dagster.yaml`` (or
``--config``) and the environment — and prints one line for each thing missing: an unset variable the
instance config names, PostgreSQL out of reach, an instance that does not load, a pool without its row
and limit, AWS credentials or region, a bucket that does not exist, the Slack settings. Exit 0 when
nothing is missing, 1 otherwise. Values are never printed, only names; a message that quotes a secret's
value (a driver's error) has it replaced by ``***``.

``bootstrap`` creates every bucket the settings name and, with ``--from FOLDER``, seeds the objects a
first run reads from a folder laid out as ``RAGSPINE_HOME`` is (the demo's, ``ragspine-eval demo
init``): the trace store, the index manifest, the extracted facts and the baselines. It never replaces
an object that exists (a baseline only ratchets), so running it again changes nothing.

``wait RUN_ID`` waits for a run on the instance at ``$DAGSTER_HOME`` (launched with ``dagster job
launch``, so that the daemon starts it) to end, and prints how it ended and its release decision with
why it blocked. Exit 0 when the run succeeded and did not block, 1 when it blocked, 2 when it failed,
was canceled, is unknown or had not ended by ``--timeout``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ragspine_pipeline.cli.args import EXIT_GATE_FAILED, EXIT_PASS, EXIT_UNUSABLE, UsageError
from ragspine_pipeline.cli.deploy_s3 import (
    COMPUTE_LOG_BUCKET,
    S3_SETTINGS,
    bootstrap,
    first_line,
    s3_endpoint,
    s3_problems,
    s3_region,
    s3_targets,
)

# Values that are secrets: never printed, and scrubbed from any message that is.
SECRETS = (
    "DAGSTER_PG_PASSWORD",
    "PGPASSWORD",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "SLACK_BOT_TOKEN",
    "RAGSPINE_JUDGE_API_KEY",
)
_CONNECT_TIMEOUT_S = 5


def run_check(args: argparse.Namespace) -> int:
    env = os.environ
    missing = [*instance_problems(args.config, env, args.module), *s3_problems(env), *slack_problems(env)]
    for line in missing:
        print(scrub(line, env))
    if missing:
        print(f"deploy check: {len(missing)} thing(s) missing")
        return EXIT_GATE_FAILED
    print("deploy check: nothing missing")
    return EXIT_PASS


def run_bootstrap(args: argparse.Namespace) -> int:
    env = os.environ
    source = Path(args.source) if args.source else None
    if source is not None and not source.is_dir():
        raise UsageError(f"deploy bootstrap: --from {source}: not a folder")
    targets = s3_targets(env)
    if not targets:
        raise UsageError(
            "deploy bootstrap: no setting names an S3 location "
            f"({', '.join(S3_SETTINGS)}, {COMPUTE_LOG_BUCKET})"
        )
    for line in bootstrap(env, targets, source):
        print(line)
    return EXIT_PASS


def run_wait(args: argparse.Namespace) -> int:
    import dagster as dg

    from ragspine_pipeline.defs.release import DECISION_TAG

    deadline = time.monotonic() + args.timeout
    try:
        instance = dg.DagsterInstance.get()
    except dg.DagsterInvariantViolationError as exc:  # DAGSTER_HOME unset, relative or not a folder
        raise UsageError(f"deploy wait: {' '.join(str(exc).split())}") from None
    with instance:
        run = instance.get_run_by_id(args.run_id)
        while run is not None and not run.is_finished and time.monotonic() < deadline:
            time.sleep(args.poll)
            run = instance.get_run_by_id(args.run_id)
        if run is None:
            print(f"deploy wait: no run {args.run_id} on the instance at $DAGSTER_HOME")
            return EXIT_UNUSABLE
        if not run.is_finished:
            print(f"run {run.run_id} ({run.job_name}): still {run.status.value} after {args.timeout:g} s")
            return EXIT_UNUSABLE
        decision = run.tags.get(DECISION_TAG)
        decided = f", release decision: {decision.upper()}" if decision in ("ship", "block") else ""
        print(f"run {run.run_id} ({run.job_name}): {run.status.value}{decided}")
        where = _decision_path(instance, run.run_id)
    if where is not None:
        for line in _decision_lines(where):
            print(f"  {line}")
    if run.status != dg.DagsterRunStatus.SUCCESS:
        return EXIT_UNUSABLE
    return EXIT_GATE_FAILED if decision == "block" else EXIT_PASS


def _decision_path(instance: Any, run_id: str) -> str | None:
    """Where the run wrote its release decision (its ``release_decision`` materialisation says), if it
    decided."""
    import dagster as dg

    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = record.asset_materialization
        if materialization is not None and materialization.asset_key.path[-1] == "release_decision":
            entry = materialization.metadata.get("decision_path")
            return None if entry is None else str(entry.value)
    return None


def _decision_lines(where: str) -> list[str]:
    """Why the decision blocked (each failed gate, regression, slice) and the cases that failed, then
    where the decision is; S3 as the instance's settings reach it."""
    from ragspine_pipeline.decision.release import ReleaseDecision
    from ragspine_pipeline.sources.objects import ObjectFolder

    folder, name = where.rsplit("/", 1)
    decision = ReleaseDecision.model_validate(
        ObjectFolder(folder, endpoint_url=s3_endpoint(os.environ), region=s3_region(os.environ)).read_json(
            name, "release decision"
        )
    )
    lines = decision.reasons()
    failing = (decision.causes or {}).get("worst_cases") or []
    if failing and not decision.ships:
        lines.append("failing case(s): " + ", ".join(f"{c['qid']} ({c.get('label')})" for c in failing))
    return [*lines, f"decision: {where}"]


def code_location_pools(module: str | None) -> tuple[set[str], str | None]:
    """The pools the steps of the code location ``module`` claim (every service's evaluation pool among
    them), or why the module does not load; nothing to read without a module."""
    if not module:
        return set(), None
    import importlib

    import dagster as dg

    try:
        defs = getattr(importlib.import_module(module), "defs", None)
        if not isinstance(defs, dg.Definitions):
            return set(), f"code location {module}: no Definitions named defs"
        jobs = defs.resolve_all_job_defs()
    except Exception as exc:  # any reason it does not load is the user's to fix, in one line
        return set(), f"code location {module}: does not load: {first_line(exc)}"
    return {op.pool for job in jobs for op in job.graph.iterate_op_defs() if op.pool}, None


def instance_problems(config: str | None, env: Mapping[str, str], module: str | None = None) -> list[str]:
    """What stops the instance config from loading, or its pools from holding (the shipped ones, and
    those the steps of the code location ``module`` claim); [] when nothing does."""
    from ragspine_pipeline.defs.judge import DEPLOYED_POOLS  # the pools the steps claim, named once

    if config:
        path = Path(config)
    elif env.get("DAGSTER_HOME"):
        path = Path(env["DAGSTER_HOME"]) / "dagster.yaml"
    else:
        return ["DAGSTER_HOME: not set (the folder holding the instance's dagster.yaml)"]
    if not path.is_file():
        return [f"{path}: no instance config here (copy one of deploy/*/dagster.yaml)"]
    try:
        document = yaml.safe_load(path.read_text("utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        return [f"{path}: not readable YAML: {first_line(exc)}"]
    unset = [name for name in dict.fromkeys(_env_references(document)) if name not in env]
    if unset:
        return [f"{name}: not set (named by {path})" for name in unset]
    if unreachable := _postgres_problem(document, env):
        return [unreachable]
    problems = _outbox_problems(env)
    try:
        from dagster import DagsterInstance

        instance = DagsterInstance.from_config(str(path.parent), config_filename=path.name)
    except Exception as exc:  # any reason the instance does not load is the user's to fix, in one line
        return [*problems, f"{path}: the instance does not load: {first_line(exc)}"]
    wanted, problem = code_location_pools(module)
    if problem:
        problems.append(problem)
    with instance:
        storage = instance.event_log_storage
        pools = storage.get_concurrency_keys()
        for pool in dict.fromkeys([*DEPLOYED_POOLS, *sorted(wanted)]):
            if pool not in pools:
                problems.append(
                    f"pool {pool}: not set: run `dagster instance concurrency set {pool} 1` once, "
                    "before starting the daemon and the workers"
                )
            elif (limit := storage.get_concurrency_info(pool).limit) is None or limit < 1:
                problems.append(f"pool {pool}: limit {limit}: none of its steps would ever run")
    return problems


def slack_problems(env: Mapping[str, str]) -> list[str]:
    from ragspine_pipeline.alerts.slack import SlackSettings

    missing = SlackSettings.from_env(env).missing
    return [f"Slack: {missing}"] if missing else []


def scrub(text: str, env: Mapping[str, str]) -> str:
    """``text`` with the value of every secret setting replaced by ``***`` (longest first), and every
    password of a PostgreSQL location it quotes (``password=…``, ``//user:…@``)."""
    from ragspine_pipeline.alerts.outbox import without_passwords

    for value in sorted((env.get(name) or "" for name in SECRETS), key=len, reverse=True):
        if len(value) >= 4:  # an empty or trivial value would mangle the line, not hide anything
            text = text.replace(value, "***")
    return without_passwords(text)


def _env_references(node: Any) -> Iterator[str]:
    """The environment variables a Dagster config names (``{env: NAME}``), in order."""
    if isinstance(node, dict):
        if set(node) == {"env"} and isinstance(node["env"], str):
            yield node["env"]
            return
        for value in node.values():
            yield from _env_references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _env_references(value)


def _resolved(value: Any, env: Mapping[str, str]) -> Any:
    return env[value["env"]] if isinstance(value, dict) and set(value) == {"env"} else value


def _postgres_problem(document: dict, env: Mapping[str, str]) -> str | None:
    """A line when the instance's PostgreSQL (``storage: postgres: postgres_db``, or the same settings
    under ``storage: custom: config``, as the shipped file's storage class has them) cannot be reached."""
    storage = document.get("storage") or {}
    settings = (storage.get("postgres") or ((storage.get("custom") or {}).get("config")) or {}).get(
        "postgres_db"
    )
    if not isinstance(settings, dict):
        return None
    values = {key: _resolved(value, env) for key, value in settings.items()}
    where = (
        f"{values.get('hostname')}:{values.get('port', 5432)}/{values.get('db_name')} "
        f"as {values.get('username')}"
    )
    port = str(values.get("port") or 5432)
    if not port.isdigit():
        return f"PostgreSQL {where}: the port is not a number: {port!r}"
    settings = {
        "host": values.get("hostname"),
        "port": int(port),
        "dbname": values.get("db_name"),
        "user": values.get("username"),
        "password": values.get("password") or None,
    }
    problem, may_create = _connect(MAY_CREATE_TABLES, **settings)
    if problem:
        return f"PostgreSQL {where}: cannot connect: {problem}"
    if not may_create:
        return (
            f"PostgreSQL {where}: {values.get('username')} may not create tables in schema public "
            "(PostgreSQL 15 and later: only the database's owner may; create it with "
            f"`createdb --owner {values.get('username')} {values.get('db_name')}` or "
            f"`ALTER DATABASE {values.get('db_name')} OWNER TO {values.get('username')}`)"
        )
    return None


def _outbox_problems(env: Mapping[str, str]) -> list[str]:
    outbox = env.get("RAGSPINE_ALERTS_OUTBOX") or ""
    if not outbox.startswith("postgresql://"):
        return []
    problem, _ = _connect(dsn=outbox)  # the password from PGPASSWORD or ~/.pgpass, as the outbox reads it
    return [f"RAGSPINE_ALERTS_OUTBOX: cannot connect: {problem}"] if problem else []


# Whether the instance's user may create its tables: CREATE on schema ``public``, or the tables are there
# already (an instance made by a role that may).
MAY_CREATE_TABLES = (
    "SELECT has_schema_privilege(current_user, 'public', 'CREATE') OR to_regclass('public.runs') IS NOT NULL"
)


def _connect(query: str | None = None, **settings: Any) -> tuple[str | None, Any]:
    """``(None, the first value of query's row)`` when PostgreSQL accepts a connection with
    ``settings`` (and answers ``query`` on it, when given), else ``(why not in one line, None)``."""
    import psycopg2

    try:
        connection = psycopg2.connect(connect_timeout=_CONNECT_TIMEOUT_S, **settings)
    except psycopg2.Error as exc:
        return first_line(exc), None
    try:
        if query is None:
            return None, None
        with connection.cursor() as cursor:
            cursor.execute(query)
            return None, cursor.fetchone()[0]
    except psycopg2.Error as exc:
        return first_line(exc), None
    finally:
        connection.close()

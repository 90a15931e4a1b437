"""The operations subcommands of ``ragspine-eval`` (``cli.parser``): demo, deploy, alerts and incidents."""

from __future__ import annotations

from datetime import date
from typing import Any

from ragspine_pipeline.cli.args import POSITIVE

DEMO_ROOT = "var/demo"


def add_demo(commands: Any) -> None:
    demo = commands.add_parser("demo", help="the embedded demo: a policy corpus, golden set, index, traces")
    demo_commands = demo.add_subparsers(dest="demo_command", required=True)
    init = demo_commands.add_parser("init", help="write the demo environment (idempotent)")
    init.add_argument("--root", default=DEMO_ROOT, help=f"demo folder (default: {DEMO_ROOT})")
    init.add_argument("--today", type=date.fromisoformat, help="the traces cover the 7 days before this")
    init.add_argument("--traces-per-day", type=POSITIVE, default=300)
    init.set_defaults(run="ragspine_pipeline.cli.demo:run_init")
    rebuild = demo_commands.add_parser("rebuild-index", help="publish a new demo index version")
    rebuild.add_argument("--root", default=DEMO_ROOT, help=f"demo folder (default: {DEMO_ROOT})")
    rebuild.add_argument(
        "--degraded", action="store_true", help="ACL filter off and fewer candidates kept: a regression"
    )
    rebuild.add_argument(
        "--degraded-parser",
        action="store_true",
        help="the build's document parser loses fills and merged spans: an extraction regression",
    )
    rebuild.set_defaults(run="ragspine_pipeline.cli.demo:run_rebuild_index")


def add_deploy(commands: Any) -> None:
    deploy = commands.add_parser(
        "deploy",
        help="a deployed instance: check it, create and seed its buckets, wait for a run",
    )
    deploy_commands = deploy.add_subparsers(dest="deploy_command", required=True)
    check = deploy_commands.add_parser(
        "check",
        help="the instance config, PostgreSQL, pools, AWS credentials, buckets and Slack settings",
        description="Read $DAGSTER_HOME/dagster.yaml and the environment as a deployed process does, and "
        "print one line for each thing missing (names only, never a value). Exit 0 when nothing is "
        "missing, 1 otherwise.",
    )
    check.add_argument("--config", help="the instance config to check (default: $DAGSTER_HOME/dagster.yaml)")
    check.add_argument(
        "-m",
        "--module",
        default="ragspine_pipeline.definitions",
        help="the code location whose services' pools must be set (default: ragspine_pipeline.definitions; "
        "'' for none)",
    )
    check.set_defaults(run="ragspine_pipeline.cli.deploy:run_check", extra="deploy")
    bootstrap = deploy_commands.add_parser(
        "bootstrap",
        help="create every bucket the settings name; with --from, seed traces, manifest, facts, baselines",
        description="Create the buckets of every s3:// setting (RAGSPINE_TRACE_STORE, RAGSPINE_REPORTS, "
        "..., DAGSTER_COMPUTE_LOG_BUCKET) and, with --from, upload the trace store, index manifest, "
        "extracted facts and baselines from a folder laid out as RAGSPINE_HOME to their settings' "
        "locations. An object that exists is kept. Exit 0, 2 when a bucket or object cannot be written.",
    )
    bootstrap.add_argument(
        "--from",
        dest="source",
        metavar="FOLDER",
        help="seed from this folder: traces/, index/manifest.json, extraction/facts.jsonl, baseline.json, "
        "extraction/baseline.json (the demo's layout)",
    )
    bootstrap.set_defaults(run="ragspine_pipeline.cli.deploy:run_bootstrap")
    wait = deploy_commands.add_parser(
        "wait",
        help="wait for a run to end; print how it ended and its release decision",
        description="Wait for the run RUN_ID of the instance at $DAGSTER_HOME to end (a run `dagster job "
        "launch` queued: the daemon starts it), then print its status, its release decision and why it "
        "blocked. Exit 0 when it succeeded and did not block, 1 when it blocked, 2 when it failed, was "
        "canceled, is unknown or had not ended by --timeout.",
    )
    wait.add_argument("run_id", metavar="RUN_ID")
    wait.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait (default 3600)")
    wait.add_argument("--poll", type=float, default=2.0, help="seconds between two looks (default 2)")
    wait.set_defaults(run="ragspine_pipeline.cli.deploy:run_wait", extra="dagster")


def add_alerts(commands: Any) -> None:
    alerts = commands.add_parser("alerts", help="the alert outbox: what is pending, and delivering it")
    alerts_commands = alerts.add_subparsers(dest="alerts_command", required=True)
    outbox_help = (
        "the outbox: a JSONL file or postgresql://user@host:port/db (default: $RAGSPINE_ALERTS_OUTBOX, "
        "else var/alerts/outbox.jsonl)"
    )
    listing = alerts_commands.add_parser("list", help="pending, delivered and expired alerts, oldest first")
    listing.add_argument("--outbox", help=outbox_help)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run="ragspine_pipeline.cli.alerts:run_list")
    flushing = alerts_commands.add_parser(
        "flush",
        help="deliver pending alerts to Slack (SLACK_BOT_TOKEN, SLACK_CHANNEL, SLACK_API_BASE_URL)",
        description="Exit 0 when nothing is left pending, 1 when some alerts could not be delivered.",
    )
    flushing.add_argument("--outbox", help=outbox_help)
    flushing.add_argument(
        "--ttl-hours",
        type=float,
        help="alerts older than this are marked expired, never posted "
        "(default: $RAGSPINE_ALERT_TTL_HOURS, else 24)",
    )
    flushing.set_defaults(run="ragspine_pipeline.cli.alerts:run_flush")


def add_incidents(commands: Any) -> None:
    incidents = commands.add_parser(
        "incidents",
        help="open production incidents, and accepting a rate's new level",
        description="A production incident stays open until its rates are back at the level they dropped "
        "from, or a person accepts their new level. Exit 0; 2 when the outbox or a rate is unusable.",
    )
    incidents_commands = incidents.add_subparsers(dest="incidents_command", required=True)
    outbox_help = (
        "the outbox: a JSONL file or postgresql://user@host:port/db (default: $RAGSPINE_ALERTS_OUTBOX, "
        "else var/alerts/outbox.jsonl)"
    )
    listing = incidents_commands.add_parser(
        "list", help="every open incident's rates: since when, the level each dropped from, the accepted ones"
    )
    listing.add_argument("--outbox", help=outbox_help)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run="ragspine_pipeline.cli.incidents:run_list")
    accept = incidents_commands.add_parser(
        "accept",
        help="accept the level rates stand at now as their new one: closes their incident as accepted",
        description="Each RATE is metric@slice (retrieved_citation_rate@all traffic) or a metric (every "
        "rate of its incident). The acceptance is recorded with who (RAGSPINE_ACTOR, else USER), when and "
        "why, replied in the incident's Slack thread, and from then on the rate is compared only with the "
        "nights since it dropped.",
    )
    accept.add_argument("rates", nargs="+", metavar="RATE", help="metric@slice, or metric")
    accept.add_argument("--reason", required=True, help="why the new level is right (one line, kept)")
    accept.add_argument(
        "--stream",
        help="the service's production stream (<service>/production); needed when several have incidents",
    )
    accept.add_argument("--outbox", help=outbox_help)
    accept.set_defaults(run="ragspine_pipeline.cli.incidents:run_accept")

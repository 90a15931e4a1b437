"""``ragspine-eval``: the scorer as a command, for the service's own CI. SPEC §7.

Exit codes: 0 ship (every gate, slice and baseline holds), 1 block, 2 unusable input (the message names
file, line and field), 3 an internal error (a bug: the traceback is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import uuid
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path

from ragspine_pipeline import __version__
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.outbox import DEFAULT_OUTBOX, open_outbox
from ragspine_pipeline.cli_args import whole_number
from ragspine_pipeline.cli_extraction import add_extraction_parser
from ragspine_pipeline.cli_judge import add_judge_parser
from ragspine_pipeline.cli_sample import add_sample_parser
from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision import golden
from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.decision.evaluation import (
    KNOWN_METRICS,
    LAYERED_METRICS,
    Evaluation,
    coverage_warnings,
    default_gates_for,
    evaluate,
    promoted_entry,
    with_baseline,
    with_replays,
)
from ragspine_pipeline.decision.gates import Gate, GateSpecError, parse_gates
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.reports.evaluation import ReportInputs, write_json, write_markdown
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint

EXIT_PASS, EXIT_GATE_FAILED, EXIT_UNUSABLE, EXIT_INTERNAL = 0, 1, 2, 3

_POSITIVE = whole_number(1)


class UsageError(Exception):
    """A command line that cannot run (exit 2)."""


DEMO_ROOT = "var/demo"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (InputError, UsageError, SourceError) as exc:  # a store that cannot be read is unusable input too
        print(f"ragspine-eval: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except BrokenPipeError:  # e.g. `ragspine-eval score … | head`: the reader left; exit as SIGPIPE would
        sys.stderr.close()
        return 128 + 13
    except Exception:  # a bug, not a verdict: never let a traceback's exit status 1 read as "blocked"
        traceback.print_exc()
        print(
            f"ragspine-eval: internal error (exit {EXIT_INTERNAL}); please report the traceback above",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragspine-eval",
        description="Score a RAG service's traces against a golden set and decide whether it may ship.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    score = commands.add_parser(
        "score",
        help="metrics, gates and the release decision for a gold file and a trace file",
        description="Exit 0 when the release ships, 1 when it is blocked, 2 when the input is unusable.",
    )
    score.add_argument("--gold", required=True, help="golden set (JSONL or JSON array, any SPEC dialect)")
    score.add_argument(
        "--trace",
        required=True,
        action="append",
        help="traces of the system under test (JSONL); give it N times for N replays of the golden set: "
        "the first decides, every one counts towards the per-case flakiness in the report",
    )
    score.add_argument("--k", type=_POSITIVE, help="cut-off for recall@k (default: config, else 5)")
    score.add_argument(
        "--gates",
        help="complete gate set, e.g. precision=0.80,chr=0.75,under=0.05,over=0.10; overrides the config's "
        "(default: the gates of the dialects the data carries: precision, chr, under_refusal, "
        "over_refusal, compliance when the traces cite or retrieve; the QA gates and fabrication when "
        "the golden set has QA cases)",
    )
    score.add_argument(
        "--evidence", help="evidence registry (JSONL): adds the layered, permission-safe metrics"
    )
    score.add_argument("--config", help="gates config (YAML): gates, slice gate, k, required versions")
    score.add_argument(
        "--references",
        help="directory of reference texts, one per narrative_doc (DOC.txt or DOC.md): RAGSpine's "
        "answer_accuracy gate measures narrative answers against them (overrides the config's)",
    )
    score.add_argument(
        "--baseline",
        help="baseline file (JSON, keyed by mode; a path or s3://bucket/key): regressions block; read, "
        "compared and promoted under a lock (S3: conditional writes), so concurrent runs never lower it",
    )
    score.add_argument("--mode", default=baselines.DEFAULT_MODE, help="baseline mode (default: golden)")
    score.add_argument(
        "--promote", action="store_true", help="after a shipping run, tighten the baseline (never loosens)"
    )
    score.add_argument("--run-id", help="identifier recorded in the decision (default: generated)")
    score.add_argument(
        "--index-version",
        help="the index the traces must come from: traces naming another index, or several, block "
        "(mixed_index_versions); without it, several index versions in the traces still block",
    )
    score.add_argument("--format", choices=("json", "markdown"), default="json")
    score.add_argument("--out", help="write the report here instead of standard output")
    score.set_defaults(run=_score)

    gold = commands.add_parser("golden", help="freeze or verify the golden set").add_subparsers(
        dest="golden_command", required=True
    )
    freeze = gold.add_parser("freeze", help="write G.lock: version, content hash, approver, time")
    freeze.add_argument("--gold", required=True)
    freeze.add_argument("--version", required=True, dest="golden_version")
    freeze.add_argument("--approved-by", required=True)
    freeze.set_defaults(run=_golden_freeze)
    verify = gold.add_parser(
        "verify", help="exit 0 when the content matches the lock, 1 when it changed, 2 when there is no lock"
    )
    verify.add_argument("--gold", required=True)
    verify.set_defaults(run=_golden_verify)

    add_extraction_parser(commands)
    add_sample_parser(commands)
    add_judge_parser(commands)
    demo = commands.add_parser("demo", help="the embedded demo: a policy corpus, golden set, index, traces")
    demo_commands = demo.add_subparsers(dest="demo_command", required=True)
    init = demo_commands.add_parser("init", help="write the demo environment (idempotent)")
    init.add_argument("--root", default=DEMO_ROOT, help=f"demo folder (default: {DEMO_ROOT})")
    init.add_argument("--today", type=date.fromisoformat, help="the traces cover the 7 days before this")
    init.add_argument("--traces-per-day", type=_POSITIVE, default=300)
    init.set_defaults(run=_demo_init)
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
    rebuild.set_defaults(run=_demo_rebuild)

    alerts = commands.add_parser("alerts", help="the alert outbox: what is pending, and delivering it")
    alerts_commands = alerts.add_subparsers(dest="alerts_command", required=True)
    outbox_help = (
        f"the outbox: a JSONL file or postgresql://user@host:port/db (default: $RAGSPINE_ALERTS_OUTBOX, "
        f"else {DEFAULT_OUTBOX})"
    )
    listing = alerts_commands.add_parser("list", help="pending, delivered and expired alerts, oldest first")
    listing.add_argument("--outbox", help=outbox_help)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_alerts_list)
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
    flushing.set_defaults(run=_alerts_flush)
    return parser


# -- score -----------------------------------------------------------------------------------------


def _score(args: argparse.Namespace) -> int:
    if args.promote and not args.baseline:
        raise UsageError("--promote needs --baseline")
    config = load_config(args.config, KNOWN_METRICS) if args.config else EvalConfig()
    if args.references:
        config = config.model_copy(update={"references": args.references})
    gates = _gates(args, config)
    # ``faithfulness`` is also RAGSpine's narrative gate, measured from the traces alone.
    layered_gates = [
        g.metric for g in gates or () if g.metric in LAYERED_METRICS and g.metric != "faithfulness"
    ]
    if layered_gates and not args.evidence:
        raise UsageError(f"gates on {', '.join(layered_gates)} need --evidence")
    warnings: list[str] = []
    lock, unfrozen = golden.verified_lock(args.gold)
    warnings += [unfrozen] if unfrozen else []
    store = None
    if args.baseline:  # read first: a broken baseline should not cost a full scoring pass
        store = open_versioned(args.baseline, "baseline", endpoint_url=s3_endpoint())
        baselines.parse_baseline(store.read(), store.name)
    run_id = args.run_id or f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    gold, traces = load_gold(args.gold).table, load_traces(args.trace[0]).table
    evidence = load_evidence(args.evidence).table if args.evidence else None

    evaluation = evaluate(
        gold,
        traces,
        gates=gates or default_gates_for(gold, traces),
        config=config,
        run_id=run_id,
        evidence=evidence,
        lock=lock,
        k=args.k,
        expected_index_version=args.index_version,
    )
    if len(args.trace) > 1:
        replays = [load_traces(path).table for path in args.trace[1:]]
        evaluation = with_replays(evaluation, gold, replays, config=config, evidence=evidence, k=args.k)
    if store is not None:
        evaluation, promoted = _judge_against_baseline(args, store, evaluation, config, run_id)
        if args.promote:
            warnings.append(_promotion_note(args, evaluation, promoted))
    warnings += coverage_warnings(evaluation.grounded.counts)
    if evaluation.comparison is not None and evaluation.comparison.unmeasured:
        unmeasured = ", ".join(evaluation.comparison.unmeasured)
        warnings.append(f"baseline metrics not measured by this run: {unmeasured}")
    for warning in warnings:
        print(f"ragspine-eval: warning: {warning}", file=sys.stderr)
    inputs = ReportInputs(args.gold, args.trace[0], args.evidence, warnings)
    write = write_json if args.format == "json" else write_markdown
    with _output(args.out) as out:
        write(evaluation, inputs, out)
    return EXIT_PASS if evaluation.passed else EXIT_GATE_FAILED


def _gates(args: argparse.Namespace, config: EvalConfig) -> list[Gate] | None:
    """The user's complete gate set: ``--gates``, else the config's; None when neither gives one."""
    if args.gates is not None:
        try:
            return parse_gates(args.gates, KNOWN_METRICS)
        except GateSpecError as exc:
            raise UsageError(f"--gates: {exc}") from None
    return config.gate_list(KNOWN_METRICS)


def _judge_against_baseline(
    args: argparse.Namespace, store, evaluation: Evaluation, config: EvalConfig, run_id: str
) -> tuple[Evaluation, bool]:
    """Compare the run with the baseline as it is under the baseline's lock, and (with ``--promote``)
    ratchet it in the same update: ``(the judged evaluation, whether the baseline moved)``. A concurrent
    run's promotion is never compared against a stale copy, and never lowered."""
    judged, promoted = evaluation, False

    def judge(entry: baselines.BaselineEntry | None) -> baselines.BaselineEntry | None:
        nonlocal judged, promoted
        judged = with_baseline(evaluation, entry, config)
        new = promoted_entry(judged, entry, config, run_id) if args.promote else None
        promoted = new is not None
        return new

    baselines.locked_update(store, args.mode, KNOWN_METRICS, judge)
    return judged, promoted


def _promotion_note(args: argparse.Namespace, evaluation: Evaluation, promoted: bool) -> str:
    if not evaluation.passed:
        return f"not promoting {args.baseline}: the release is blocked, the baseline is unchanged"
    if not promoted:
        return f"not promoting {args.baseline}: no significant improvement (paired test), it is unchanged"
    return f"promoted {args.baseline} (mode {args.mode}): every listed metric is now at least as strict"


@contextmanager
def _output(path: str | None):
    if path is None:
        yield sys.stdout
        return
    with atomic_writer(path, "report") as fh:  # a reader never sees half a report
        yield fh


# -- golden ----------------------------------------------------------------------------------------


def _golden_freeze(args: argparse.Namespace) -> int:
    lock = golden.freeze(args.gold, args.golden_version, args.approved_by)
    print(json.dumps(lock.__dict__, indent=2))
    return EXIT_PASS


def _golden_verify(args: argparse.Namespace) -> int:
    verification = golden.verify(args.gold)
    print(verification.message(args.gold), file=sys.stdout if verification.status == "ok" else sys.stderr)
    return {"ok": EXIT_PASS, "changed": EXIT_GATE_FAILED, "unlocked": EXIT_UNUSABLE}[verification.status]


# -- demo ------------------------------------------------------------------------------------------


def _demo_init(args: argparse.Namespace) -> int:
    from ragspine_pipeline.demo.build import init_demo

    summary = init_demo(Path(args.root), today=args.today, traces_per_day=args.traces_per_day)
    state = "written" if summary.changed else "unchanged"
    print(f"demo {state}: {Path(args.root).absolute()}")
    return EXIT_PASS


def _demo_rebuild(args: argparse.Namespace) -> int:
    from ragspine_pipeline.demo.build import rebuild_index

    manifest = rebuild_index(Path(args.root), degraded=args.degraded, degraded_parser=args.degraded_parser)
    print(
        f"index {manifest['index_version']} published: {Path(args.root).absolute() / 'index'}/manifest.json"
    )
    return EXIT_PASS


# -- alerts ----------------------------------------------------------------------------------------


def _outbox(args: argparse.Namespace) -> AlertOutbox:
    return open_outbox(args.outbox or os.environ.get("RAGSPINE_ALERTS_OUTBOX") or DEFAULT_OUTBOX)


def _alerts_list(args: argparse.Namespace) -> int:
    with _outbox(args) as outbox:
        view = outbox.read()
    if args.format == "json":
        rows = [
            {
                "id": e.alert.id,
                "status": e.status,
                "kind": e.alert.kind,
                "title": e.alert.title,
                "run_id": e.alert.run_id,
                "created_at": e.alert.created_at,
                "delivered_at": e.delivered_at,
                "expired_at": e.expired_at,
                "attempts": e.attempts,
                "last_error": e.last_error,
            }
            for e in view.entries
        ]
        print(json.dumps({"outbox": str(outbox.path), "alerts": rows, "set_aside": view.set_aside}, indent=2))
        return EXIT_PASS
    print(
        f"{outbox.path}: {len(view.pending)} pending, {len(view.delivered)} delivered, "
        f"{len(view.expired)} expired"
    )
    for e in view.entries:
        status = {
            "delivered": f"delivered {e.delivered_at}",
            "expired": f"expired {e.expired_at}",
            "pending": f"PENDING ({e.attempts} attempt(s))",
        }[e.status]
        print(f"  {e.alert.created_at}  {status:<32}  {e.alert.kind:<11}  {e.alert.title}")
        if e.pending and e.last_error:
            print(f"      last error: {e.last_error}")
    if view.set_aside:
        print(f"{view.set_aside} corrupt line(s) set aside in {outbox.corrupt_path}", file=sys.stderr)
    return EXIT_PASS


def _alerts_flush(args: argparse.Namespace) -> int:
    from ragspine_pipeline.alerts.delivery import flush
    from ragspine_pipeline.alerts.slack import ttl_hours_from_env

    outbox = _outbox(args)
    if args.ttl_hours is not None and not args.ttl_hours > 0:
        raise UsageError("--ttl-hours must be positive")
    try:
        ttl = args.ttl_hours or ttl_hours_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with outbox:
        result = flush(outbox, ttl_hours=ttl)
    expired = f", {len(result.expired)} expired" if result.expired else ""
    print(
        f"{len(result.delivered)} delivered, {result.pending} pending{expired} "
        f"({result.messages} Slack message(s); {outbox.path})"
    )
    if result.skipped:
        print(f"not attempted: {result.skipped}", file=sys.stderr)
    if result.error:
        print(f"stopped: {result.error}", file=sys.stderr)
    for alert_id, error in result.failed.items():
        print(f"  {alert_id}: {error}", file=sys.stderr)
    if result.set_aside:
        print(f"{result.set_aside} corrupt line(s) set aside in {outbox.corrupt_path}", file=sys.stderr)
    return EXIT_PASS if result.pending == 0 else EXIT_GATE_FAILED


if __name__ == "__main__":
    sys.exit(main())

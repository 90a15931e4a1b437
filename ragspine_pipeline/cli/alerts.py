"""``ragspine-eval alerts list|flush``: what the alert outbox holds, and delivering it to Slack."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.outbox import DEFAULT_OUTBOX, open_outbox
from ragspine_pipeline.cli.args import EXIT_GATE_FAILED, EXIT_PASS, UsageError


def outbox_of(args: argparse.Namespace) -> AlertOutbox:
    return open_outbox(args.outbox or os.environ.get("RAGSPINE_ALERTS_OUTBOX") or DEFAULT_OUTBOX)


def run_list(args: argparse.Namespace) -> int:
    """A read command: it writes nothing (no lock file, no corrupt line moved, no state rewritten)."""
    with outbox_of(args) as outbox:
        view = outbox.read(read_only=True)
    unreadable = getattr(view, "corrupt", 0)
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
                "ts": e.ts,  # the Slack message that carried it
                "thread_ts": e.thread_ts,  # the thread it replied in (a recovery), or None
                "expired_at": e.expired_at,
                "attempts": e.attempts,
                "last_error": e.last_error,
            }
            for e in view.entries
        ]
        listing = {
            "outbox": str(outbox.path),
            "alerts": rows,
            "set_aside": view.set_aside,
            "unreadable": unreadable,
        }
        print(json.dumps(listing, indent=2))
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
    if unreadable:
        print(
            f"{unreadable} unreadable line(s) in {outbox.path}, left where they are "
            "(`alerts flush` sets them aside)",
            file=sys.stderr,
        )
    return EXIT_PASS


def run_flush(args: argparse.Namespace) -> int:
    # Imported here, not at the top: slack-sdk is needed to deliver, not to list.
    from ragspine_pipeline.alerts.delivery import flush
    from ragspine_pipeline.alerts.slack import ttl_hours_from_env

    outbox = outbox_of(args)
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

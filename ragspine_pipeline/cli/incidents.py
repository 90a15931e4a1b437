"""``ragspine-eval incidents list|accept``: the open production incidents an alert outbox holds, and a
person's acceptance of a rate's new level (recorded who, when and why, like a baseline set by hand)."""

from __future__ import annotations

import argparse
import json

from ragspine_pipeline.alerts.nightly import acceptance_alert
from ragspine_pipeline.alerts.streams import StreamState, incident_rows
from ragspine_pipeline.cli.alerts import outbox_of
from ragspine_pipeline.cli.args import EXIT_PASS, UsageError
from ragspine_pipeline.cli.baseline import actor


def run_list(args: argparse.Namespace) -> int:
    """A read command: it writes nothing."""
    with outbox_of(args) as outbox:
        streams = _with_incidents(outbox.states())
        name = str(outbox.path)
    if args.format == "json":
        print(
            json.dumps(
                {"outbox": name, "streams": {s: incident_rows(st) for s, st in streams.items()}}, indent=2
            )
        )
        return EXIT_PASS
    if not streams:
        print(f"{name}: no open incident")
        return EXIT_PASS
    for stream, state in streams.items():
        print(f"{stream}: {len(state.incidents)} open incident(s)")
        for row in incident_rows(state):
            level = "" if row["level"] is None else f"  dropped from {row['level']:.4f}"
            print(f"  {row['rate']:<48} since {row['opened'] or '?'}{level}  {row['status']}")
    return EXIT_PASS


def run_accept(args: argparse.Namespace) -> int:
    reason = " ".join(args.reason.split())
    if not reason or not reason.isprintable() or len(args.reason.strip().splitlines()) != 1:
        raise UsageError(
            "--reason must say why, on one line of printable text (it is kept with the acceptance)"
        )
    by = actor("accepting the new level", "with the acceptance")
    if not by.isprintable():
        raise UsageError("RAGSPINE_ACTOR (or USER) must be printable: it is shown in Slack and the report")
    with outbox_of(args) as outbox:
        streams = _with_incidents(outbox.states())
        stream = _stream(args.stream, streams)
        state = streams[stream]
        known = set(state.open_levels()) | set(state.incidents)
        unknown = [rate for rate in args.rates if rate not in known]
        if unknown:
            raise UsageError(
                f"{unknown[0]!r} is no open incident's rate on {stream}; open: {', '.join(sorted(known))}"
            )
        alert = acceptance_alert(args.rates, by=by, reason=reason, stream=stream)
        outbox.observe(alert)
        after = outbox.states().get(stream)
    still = sorted(after.incidents) if after is not None else []
    print(
        f"{stream}: accepted {', '.join(args.rates)} as the new level (by {by}: {reason}); "
        + (f"still open: {', '.join(still)}" if still else "no incident left open")
    )
    return EXIT_PASS


def _with_incidents(states: dict[str, StreamState]) -> dict[str, StreamState]:
    return {stream: state for stream, state in sorted(states.items()) if state.incidents or state.accepted}


def _stream(given: str | None, streams: dict[str, StreamState]) -> str:
    """The stream an acceptance is about: ``given``, or the only one with open incidents."""
    open_streams = [stream for stream, state in streams.items() if state.incidents]
    if given is not None:
        if given not in open_streams:
            raise UsageError(
                f"no open incident on stream {given!r}; open on: {', '.join(open_streams) or 'none'}"
            )
        return given
    if len(open_streams) != 1:
        raise UsageError(
            "no open incident to accept" if not open_streams
            else f"several streams have open incidents ({', '.join(open_streams)}): say which with --stream"
        )  # fmt: skip
    return open_streams[0]

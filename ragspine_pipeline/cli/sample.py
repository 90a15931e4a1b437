"""``ragspine-eval sample``: a seeded (optionally stratified) sample of one day of production traces.

The sample goes to ``--out`` (atomically) or standard output; a one-line JSON summary of the pass
(counts, quarantine per reason, allocation when stratified, redactions) is the last line on standard
error. Exit codes: 0 sampled (an empty day included), 2 unusable input (``main`` prints the
InputError on one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ragspine_pipeline.cli.args import span_settings
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import jsonl_lines, write_jsonl
from ragspine_pipeline.redaction import redact_line, redact_trace
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.sampling import QUARANTINE_MAX_BYTES, sample_day
from ragspine_pipeline.sources.span_store import open_store
from ragspine_pipeline.sources.trace_store import check_day

EXIT_SAMPLED = 0


def run_sample(args: argparse.Namespace) -> int:
    try:
        day = check_day(args.date)
    except ValueError as exc:
        raise InputError("--date", str(exc)) from None
    if args.stratify is not None and not args.stratify.strip():
        raise InputError("--stratify", "names no tag dimension")
    quarantine = None if args.quarantine is None else Path(args.quarantine)
    spans = span_settings(args) if args.format == "otlp" else None
    store = open_store(args.source, spans=spans, endpoint_url=args.endpoint_url)
    try:
        sample = sample_day(
            store,
            day,
            n=args.n,
            seed=args.seed,
            quarantine=quarantine,
            stratify=args.stratify,
            floor=args.floor,
            redact=redact_trace if args.redact else None,
            redact_text=redact_line if args.redact else None,
            quarantine_max_bytes=args.quarantine_max_bytes or QUARANTINE_MAX_BYTES,
        )
    except SourceError as exc:
        raise InputError(exc.location, exc.cause) from None
    if args.out:
        write_jsonl(sample.records, args.out, "trace sample")
    else:
        sys.stdout.writelines(jsonl_lines(sample.records, "standard output"))
        sys.stdout.flush()
    if sample.counts["read"] == 0:
        print(f"ragspine-eval: warning: no trace lines for {day} in {store.describe()}", file=sys.stderr)
    summary: dict[str, Any] = {"source": store.describe(), "date": day, "seed": args.seed, **sample.counts}
    if sample.allocation is not None:
        summary["allocation"] = sample.allocation
        if sample.allocation["exceeded_n"]:
            strata = len(sample.allocation["strata"])
            print(
                f"ragspine-eval: warning: sampled {sample.counts['sampled']} traces, more than --n "
                f"{args.n}: each of the {strata} strata keeps at least --floor {args.floor} traces (or all "
                "it has), so that its rates mean something; lower --floor or raise --n",
                file=sys.stderr,
            )
    if sample.quarantine_path is not None:
        summary["quarantine"] = str(sample.quarantine_path)
    print(json.dumps(summary, ensure_ascii=False), file=sys.stderr)
    return EXIT_SAMPLED

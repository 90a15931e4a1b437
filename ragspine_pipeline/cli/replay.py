"""``ragspine-eval replay``: ask a system under test every golden question and write its traces.

The SUT is declared in a YAML file (``--sut``: ``kind: http | python | recorded`` and its settings, as
the component's ``sut:`` block). Answers are kept per case as they arrive (``--answers DIR``), so a
replay that was interrupted or failed part way asks only what is missing when run again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ragspine_pipeline.cli.args import EXIT_PASS
from ragspine_pipeline.contracts.columns import load_gold
from ragspine_pipeline.sources.replay import AnswerStore, Progress, failure_warnings, replay
from ragspine_pipeline.sources.sut import load_sut_settings


def run_replay(args: argparse.Namespace) -> int:
    settings = load_sut_settings(args.sut)
    gold = load_gold(args.gold).table
    questions = list(
        zip(*(gold.column(name).to_pylist() for name in ("qid", "question", "reference_date")), strict=True)
    )
    client = settings.client()
    store = AnswerStore(args.answers, settings.identity(), args.index_version) if args.answers else None
    out = Path(args.out)
    quarantine = Path(args.quarantine) if args.quarantine else out.with_name(out.stem + ".quarantine.jsonl")

    def progress(state: Progress) -> None:
        print(state.line(), file=sys.stderr, flush=True)

    result = replay(
        questions,
        client.answer,
        out=out,
        quarantine=quarantine,
        concurrency=settings.concurrency,
        store=store,
        max_failed_share=args.max_failed_share,
        where=client.describe(),
        progress=progress,
        progress_every_s=args.progress_every,
    )
    for warning in failure_warnings(result.failed):
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"{result.answered} trace(s) written to {out} ({result.reused} kept from an earlier replay, "
        f"{result.unanswered} unanswered, {result.quarantined} quarantined to {quarantine}, "
        f"{len(result.failed)} failed) in {result.elapsed_s:.1f} s"
    )
    return EXIT_PASS

"""``ragspine-eval replay``: ask a system under test every golden question and write its traces.

The SUT is declared in a YAML file (``--sut``: ``kind: http | python | recorded`` and its settings, as
the component's ``sut:`` block). Answers are kept per case as they arrive (``--answers DIR``) for one
release of the service (``--release``, else the file's ``release:``) on one index (``--index-version``):
a replay of that release that was interrupted or failed part way asks only what is missing when run
again, and another release is asked everything. With neither a release nor an index version, each
replay keeps its answers to itself unless ``--reuse-answers`` says otherwise. Beside the traces,
``OUT.replay.json`` records the replay and every reuse, by the replay that stored the answers; ``score``
names them in the decision.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ragspine_pipeline.cli.args import EXIT_PASS, UsageError
from ragspine_pipeline.contracts.columns import load_gold
from ragspine_pipeline.sources.answer_store import AnswerStore, Stamp, reuse_warnings
from ragspine_pipeline.sources.replay import Progress, failure_warnings, replay
from ragspine_pipeline.sources.replay_record import write_replay_record
from ragspine_pipeline.sources.sut import expand_release, load_sut_settings


def run_replay(args: argparse.Namespace) -> int:
    if args.reuse_answers and not args.answers:
        raise UsageError("--reuse-answers needs --answers (the folder the earlier answers are kept in)")
    settings = load_sut_settings(args.sut)
    release = expand_release(args.release, os.environ, "--release") if args.release is not None else None
    stamp = Stamp.new(release or settings.release_identity())
    gold = load_gold(args.gold).table
    questions = list(
        zip(*(gold.column(name).to_pylist() for name in ("qid", "question", "reference_date")), strict=True)
    )
    client = settings.client()
    store = None
    if args.answers:
        known = stamp.release is not None or args.index_version is not None
        if not known and not args.reuse_answers:
            print(
                "ragspine-eval replay: no --release or --index-version (nor a release in the SUT file): "
                f"the answers kept in {args.answers} serve this replay only, a re-run asks every case again",
                file=sys.stderr,
            )
        store = AnswerStore(
            args.answers,
            settings.identity(),
            args.index_version,
            stamp,
            within=None if known else stamp.replay,  # nothing says whose answers: this replay's own
            reuse_earlier=args.reuse_answers,
        )
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
    record = write_replay_record(result, stamp, sut=client.describe(), index_version=args.index_version)
    for warning in [*reuse_warnings(result.reused_from), *failure_warnings(result.failed)]:
        print(f"warning: {warning}", file=sys.stderr)
    recorded = f"; replay {stamp.replay} recorded in {record}" if record else ""
    print(
        f"{result.answered} trace(s) written to {out} ({result.reused} reused from earlier replays, "
        f"{result.unanswered} unanswered, {result.quarantined} quarantined to {quarantine}, "
        f"{len(result.failed)} failed) in {result.elapsed_s:.1f} s{recorded}"
    )
    return EXIT_PASS

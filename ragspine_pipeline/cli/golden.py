"""``ragspine-eval golden freeze|verify``: lock the golden set's content, or check it against its lock."""

from __future__ import annotations

import argparse
import json
import sys

from ragspine_pipeline.cli.args import EXIT_GATE_FAILED, EXIT_PASS, EXIT_UNUSABLE
from ragspine_pipeline.decision import golden


def run_freeze(args: argparse.Namespace) -> int:
    lock = golden.freeze(args.gold, args.golden_version, args.approved_by)
    print(json.dumps(lock.__dict__, indent=2))
    return EXIT_PASS


def run_verify(args: argparse.Namespace) -> int:
    verification = golden.verify(args.gold)
    print(verification.message(args.gold), file=sys.stdout if verification.status == "ok" else sys.stderr)
    return {"ok": EXIT_PASS, "changed": EXIT_GATE_FAILED, "unlocked": EXIT_UNUSABLE}[verification.status]

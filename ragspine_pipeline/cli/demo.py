"""``ragspine-eval demo init|rebuild-index``: write the embedded demo, publish a new index version."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragspine_pipeline.cli.args import EXIT_PASS
from ragspine_pipeline.demo.build import init_demo, rebuild_index


def run_init(args: argparse.Namespace) -> int:
    summary = init_demo(Path(args.root), today=args.today, traces_per_day=args.traces_per_day)
    state = "written" if summary.changed else "unchanged"
    print(f"demo {state}: {Path(args.root).absolute()}")
    return EXIT_PASS


def run_rebuild_index(args: argparse.Namespace) -> int:
    manifest = rebuild_index(Path(args.root), degraded=args.degraded, degraded_parser=args.degraded_parser)
    print(
        f"index {manifest['index_version']} published: {Path(args.root).absolute() / 'index'}/manifest.json"
    )
    return EXIT_PASS

"""The ``ragspine-eval`` command line: every subcommand and its arguments.

Built on every start, ``--help`` and ``--version`` included, so this module imports only the standard
library and modules that do the same (``cli.args``, ``judge.prompts``, ``sources.strata``). A command's
implementation (pyarrow, pydantic, boto3, the openai SDK …) is imported when that command runs: each
subcommand's ``run`` names its handler as ``"module:function"`` and ``main`` imports it then. A command
that needs an optional extra names it (``extra="judge"``): without it, ``main`` prints one line naming
the extra and exits 2 (``cli.extras``). The subcommands are declared in ``parser_release`` (score and
the golden path), ``parser_nightly`` (sample, production, plan, judge) and ``parser_ops`` (demo,
deploy, alerts, incidents).

A default that belongs to the core and would cost an import here is applied by the handler and only
named in the help (``tests/cli/test_parser.py`` keeps the two equal).
"""

from __future__ import annotations

import argparse

from ragspine_pipeline import __version__
from ragspine_pipeline.cli.parser_nightly import add_judge, add_plan, add_production, add_sample
from ragspine_pipeline.cli.parser_ops import add_alerts, add_demo, add_deploy, add_incidents
from ragspine_pipeline.cli.parser_release import (
    SCHEMA_TYPES,
    add_baseline,
    add_check_traces,
    add_extraction,
    add_golden,
    add_init,
    add_replay,
    add_schema,
    add_score,
)

__all__ = ["SCHEMA_TYPES", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragspine-eval",
        description="Score a RAG service's traces against a golden set and decide whether it may ship.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_score(commands)
    add_replay(commands)
    add_golden(commands)
    add_baseline(commands)
    add_extraction(commands)
    add_sample(commands)
    add_production(commands)
    add_plan(commands)
    add_judge(commands)
    add_demo(commands)
    add_alerts(commands)
    add_incidents(commands)
    add_schema(commands)
    add_check_traces(commands)
    add_init(commands)
    add_deploy(commands)
    return parser

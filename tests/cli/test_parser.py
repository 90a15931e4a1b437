"""The parser is built without the core, so the defaults it can only name in its help must be the ones
the commands apply."""

from __future__ import annotations

import importlib

import pytest

from ragspine_pipeline.alerts.outbox import DEFAULT_OUTBOX
from ragspine_pipeline.cli import main
from ragspine_pipeline.cli.parser import build_parser
from ragspine_pipeline.decision.baseline import DEFAULT_MODE
from ragspine_pipeline.sources.sampling import QUARANTINE_MAX_BYTES


def _help(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_help_names_the_defaults_the_commands_apply(capsys):
    assert f"(default: {DEFAULT_MODE})" in _help(capsys, "score")
    assert f"(default {QUARANTINE_MAX_BYTES:,})" in _help(capsys, "sample")
    for command in ("list", "flush"):
        assert f"else {DEFAULT_OUTBOX})" in _help(capsys, "alerts", command)


def test_every_subcommand_names_a_handler_that_exists():
    """Handlers are named as strings (imported only when their command runs): each must resolve."""
    parser = build_parser()
    argv = {
        "score": ["score", "--gold", "g", "--trace", "t"],
        "golden freeze": ["golden", "freeze", "--gold", "g", "--version", "v", "--approved-by", "a"],
        "golden verify": ["golden", "verify", "--gold", "g"],
        "extraction": ["extraction", "--facts", "f", "--truth", "t"],
        "sample": ["sample", "--source", "s", "--date", "2026-01-01", "--n", "1", "--seed", "1"],
        "judge": ["judge", "--trace", "t"],
        "demo init": ["demo", "init"],
        "demo rebuild-index": ["demo", "rebuild-index"],
        "alerts list": ["alerts", "list"],
        "alerts flush": ["alerts", "flush"],
    }
    for name, args in argv.items():
        module, function = parser.parse_args(args).run.split(":")
        assert callable(getattr(importlib.import_module(module), function)), name

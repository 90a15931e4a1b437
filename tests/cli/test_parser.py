"""The parser is built without the core, so the defaults it can only name in its help must be the ones
the commands apply."""

from __future__ import annotations

import argparse
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
    """Handlers are named as strings (imported only when their command runs): each must resolve, for
    every subcommand the parser has, however deep."""

    def commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, str | None]:
        found = {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found |= commands(sub, f"{path} {name}".strip())
        return found or {path: parser.get_default("run")}

    handlers = commands(build_parser())
    assert {"score", "plan", "baseline set", "replay", "golden freeze", "alerts flush"} <= set(handlers)
    for name, handler in handlers.items():
        assert handler, name
        module, function = handler.split(":")
        assert callable(getattr(importlib.import_module(module), function)), name

"""A command whose optional extra is not installed says so in one line and exits 2, before it imports
anything that would fail on it (``cli.extras``). The installed-wheel side, without the extra for real, is
``tests/test_package.py``."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from ragspine_pipeline.cli import extras, main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wfgy"


@pytest.fixture
def without(monkeypatch):
    """Make the named distributions look uninstalled to ``cli.extras``."""

    def hide(*names: str) -> None:
        real = metadata.distribution

        def distribution(name: str):
            if name in names:
                raise metadata.PackageNotFoundError(name)
            return real(name)

        monkeypatch.setattr(extras.metadata, "distribution", distribution)

    return hide


def test_every_extra_of_the_dev_environment_is_installed():
    for extra in ("dagster", "deploy", "judge", "dev"):
        assert extras.missing(extra) == [], extra


def test_judge_without_its_extra_is_one_line_naming_it_and_exit_2(without, capsys):
    without("openai")
    code = main(["judge", "--trace", f"{EXAMPLE}/traces.jsonl", "--gold", f"{EXAMPLE}/gold.jsonl"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "ragspine-eval judge: needs the judge extra: pip install 'ragspine-pipeline[judge]'\n"


def test_a_command_without_an_extra_never_asks_for_one(without, capsys, tmp_path):
    without("openai", "krippendorff", "dagster", "pandas", "psycopg2-binary")
    gold, traces, report = EXAMPLE / "gold.jsonl", EXAMPLE / "traces.jsonl", tmp_path / "report.json"
    code = main(["score", "--gold", str(gold), "--trace", str(traces), "--out", str(report)])
    assert code in (0, 1) and "extra" not in capsys.readouterr().err and report.exists()


def test_an_extra_that_includes_another_lacks_what_that_one_lacks(without):
    without("pandas", "redis")
    assert extras.missing("deploy") == ["pandas", "redis"]
    assert extras.missing("dev") == ["pandas", "redis"]
    assert extras.missing("judge") == []


def test_without_the_projects_own_metadata_nothing_is_reported_missing(monkeypatch):
    def requires(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(extras.metadata, "requires", requires)
    assert extras.missing("judge") == []

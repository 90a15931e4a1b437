"""`ragspine-eval demo init` and `demo rebuild-index`, the commands behind `make run` and the regression."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.cli import main


def test_demo_init_is_idempotent_and_rebuild_publishes_the_next_version(tmp_path, capsys):
    root = tmp_path / "demo"
    args = ["demo", "init", "--root", str(root), "--today", "2026-11-22", "--traces-per-day", "20"]
    assert main(args) == 0
    assert "demo written" in capsys.readouterr().out
    manifest = (root / "index" / "manifest.json").read_bytes()
    assert main(args) == 0
    assert "demo unchanged" in capsys.readouterr().out
    assert (root / "index" / "manifest.json").read_bytes() == manifest

    assert main(["demo", "rebuild-index", "--root", str(root), "--degraded"]) == 0
    published = json.loads((root / "index" / "manifest.json").read_text())
    assert published["index_version"] in capsys.readouterr().out
    assert published["index_version"] != json.loads(manifest)["index_version"]
    assert published["engine"]["enforce_acl"] is False


def test_demo_init_rejects_a_malformed_date(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "init", "--root", str(tmp_path), "--today", "22/11/2026"])
    assert exit_info.value.code == 2
    assert "--today" in capsys.readouterr().err

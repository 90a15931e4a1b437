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


# -- nothing written when the root, the date or an existing file is unusable -----------------------


def snapshot(root) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes (a folder or special file by its kind)."""
    out: dict[str, bytes | str] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = (
            path.read_bytes() if path.is_file() else "dir" if path.is_dir() else "special"
        )
    return out


def init_demo_cli(root, today: str = "2026-11-22", timeout: float = 60):
    """The real command in its own process (a FIFO must not hang it: the timeout fails the test)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    argv = ["demo", "init", "--root", str(root), "--today", today, "--traces-per-day", "20"]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run(
        [sys.executable, "-m", "ragspine_pipeline.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def demo_root(tmp_path):
    root = tmp_path / "demo"
    assert main(["demo", "init", "--root", str(root), "--today", "2026-11-22", "--traces-per-day", "20"]) == 0
    return root


@pytest.mark.parametrize(
    ("breakage", "names"),
    [
        ("manifest_list", "manifest.json: expected a JSON object, got array"),
        ("manifest_latin1", "manifest.json"),
        ("manifest_deep", "manifest.json"),
        ("manifest_fifo", "manifest.json"),
        ("lock_garbage", "gold.jsonl.lock"),
        ("corpus_dir", "corpus.jsonl"),
        ("traces_file", "traces"),
    ],
)
def test_an_unusable_file_under_the_root_is_one_line_and_nothing_is_written(demo_root, breakage, names):
    import os
    import shutil

    manifest = demo_root / "index" / "manifest.json"
    if breakage == "manifest_list":
        manifest.write_text("[1, 2, 3]\n")
    elif breakage == "manifest_latin1":
        manifest.write_bytes('{"index_version": "caf\xe9"}'.encode("latin-1"))
    elif breakage == "manifest_deep":
        manifest.write_text('{"index_version": ' + "[" * 10_000 + "]" * 10_000 + "}")
    elif breakage == "manifest_fifo":
        manifest.unlink()
        os.mkfifo(manifest)
    elif breakage == "lock_garbage":
        (demo_root / "golden" / "gold.jsonl.lock").write_text("not json")
    elif breakage == "corpus_dir":
        (demo_root / "corpus.jsonl").unlink()
        (demo_root / "corpus.jsonl").mkdir()
    else:
        shutil.rmtree(demo_root / "traces")
        (demo_root / "traces").write_text("a file where the traces folder goes")
    (demo_root / "gates.yaml").unlink()  # something init would write first, were it to start
    before = snapshot(demo_root)
    done = init_demo_cli(demo_root, today="2026-11-23")  # a new day: init would write a partition
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and names in done.stderr
    assert snapshot(demo_root) == before


def test_a_file_as_root_is_one_line(tmp_path):
    root = tmp_path / "demo"
    root.write_text("not a folder")
    done = init_demo_cli(root)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not one" in done.stderr
    assert root.read_text() == "not a folder"


@pytest.mark.parametrize("today", ["0001-01-03", "1970-01-01"])
def test_a_today_too_early_for_the_days_before_it_is_one_line_and_writes_nothing(tmp_path, today):
    root = tmp_path / "demo"
    done = init_demo_cli(root, today=today)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--today" in done.stderr and "must be between 1970-01-10 and 9999-12-31" in done.stderr
    assert not root.exists()


def test_the_last_representable_day_works(tmp_path):
    assert init_demo_cli(tmp_path / "demo", today="9999-12-31").returncode == 0

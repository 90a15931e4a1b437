"""``--out``: one rule for every command that writes a report or a sample (``files.output_kind``).

A regular file (or a new path) is replaced atomically; a character device, FIFO or socket is written
to as it is (never renamed over, never unlinked, no temporary file beside it); a symbolic link is
resolved and the rule applied to its target (the link stays a link); a directory or a block device is
one error line, exit 2. The devices here are private nodes in a temporary folder (``os.mknod``), never
the system's own: a regression must not be able to replace ``/dev/null``.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ragspine_pipeline import cli
from tests.cli.test_extraction import FACTS, TRUTH

ROOT = Path(__file__).resolve().parents[1]
WFGY = ROOT / "examples" / "wfgy"
GOLD, TRACES = str(WFGY / "gold.jsonl"), str(WFGY / "traces.jsonl")
DAY = "2024-05-01"
NULL = os.makedev(1, 3)  # /dev/null's numbers: what is written there is gone, the node must stay
COMMANDS = ["score", "score-markdown", "extraction", "sample"]
EXPECTED_CODE = {"score": 0, "score-markdown": 0, "extraction": 0, "sample": 0}

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="making a device node (os.mknod) needs root"
)


def argv(name: str, inputs: Path) -> list[str]:
    """The command ``name`` on valid inputs (the CLI tests' examples), without ``--out``."""
    if name.startswith("score"):
        fmt = ["--format", "markdown"] if name == "score-markdown" else []
        return ["score", "--gold", GOLD, "--trace", TRACES, "--run-id", "run-1", *fmt]
    if name == "extraction":
        (inputs / "truth.json").write_text(json.dumps({"cells": TRUTH}), encoding="utf-8")
        (inputs / "facts.jsonl").write_text("".join(json.dumps(f) + "\n" for f in FACTS), encoding="utf-8")
        return ["extraction", "--facts", str(inputs / "facts.jsonl"), "--truth", str(inputs / "truth.json")]
    assert name == "sample"
    day = inputs / "store" / f"dt={DAY}"
    day.mkdir(parents=True)
    lines = [
        json.dumps({"request_id": f"r{i:03d}", "answer": "a", "tags": {"topic": "t"}}) for i in range(30)
    ]
    (day / "a.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return ["sample", "--source", str(inputs / "store"), "--date", DAY, "--n", "5", "--seed", "3"]


def run(capsys, args: list[str], out: Path | str) -> tuple[int, str]:
    code = cli.main([*args, "--out", str(out)])
    return code, capsys.readouterr().err


@pytest.fixture(params=COMMANDS)
def command(request, tmp_path_factory, capsys) -> tuple[str, list[str], bytes]:
    """A command, its arguments, and the bytes it writes to a regular file."""
    name = request.param
    inputs = tmp_path_factory.mktemp("inputs")
    args = argv(name, inputs)
    reference = inputs / "reference.out"
    code, err = run(capsys, args, reference)
    assert code == EXPECTED_CODE[name], err
    data = reference.read_bytes()
    assert data  # something to compare with
    return name, args, data


@pytest.fixture
def out_folder(tmp_path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_link_to_a_regular_file_replaces_the_file_and_stays_a_link(command, out_folder, capsys):
    name, args, reference = command
    target = out_folder / "real.out"
    target.write_text("old\n")
    target.chmod(0o640)
    link = out_folder / "link.out"
    link.symlink_to(target)
    code, err = run(capsys, args, link)
    assert code == EXPECTED_CODE[name], err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == reference
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert listing(out_folder) == ["link.out", "real.out"]  # no temporary file left beside either


@needs_root
@pytest.mark.parametrize("through_link", [False, True])
def test_a_character_device_stays_a_device(command, out_folder, capsys, through_link):
    name, args, _ = command
    device = out_folder / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, NULL)
    out = device
    if through_link:
        out = out_folder / "report.link"
        out.symlink_to(device)
    code, err = run(capsys, args, out)
    assert code == EXPECTED_CODE[name], err
    st = os.lstat(device)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == NULL  # the node itself, not a file put in its place
    assert not through_link or out.is_symlink()
    assert listing(out_folder) == sorted(["null", *(["report.link"] if through_link else [])])


class FifoReader:
    """A thread that opens a FIFO for reading and reads it to the end.

    The FIFO is also held open (non-blocking, never read) from the start, so that once the writer is
    done :meth:`result` can always end the thread: if it still waits in its open (the writer never
    came, or was gone before it), a writer opened through that descriptor releases it, and whatever
    the pipe holds is read. The test never hangs, whatever the command did to the path."""

    def __init__(self, path: Path) -> None:
        self.hold = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.path = path
        self.data: bytes | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            self.data = fh.read()

    def result(self, deadline_s: float = 60.0) -> bytes | None:
        """What the thread read; call it once the writer has finished."""
        try:
            self.thread.join(1.0)
            if self.thread.is_alive():
                os.close(os.open(f"/proc/self/fd/{self.hold}", os.O_WRONLY | os.O_NONBLOCK))
            self.thread.join(deadline_s)
            return self.data
        finally:
            os.close(self.hold)


@pytest.mark.parametrize("through_link", [False, True])
def test_a_fifo_receives_the_bytes_and_stays_a_fifo(command, out_folder, capsys, through_link):
    name, args, reference = command
    fifo = out_folder / "pipe"
    os.mkfifo(fifo)
    out = fifo
    if through_link:
        out = out_folder / "pipe.link"
        out.symlink_to(fifo)
    reader = FifoReader(fifo)
    code, err = run(capsys, args, out)
    received = reader.result()
    assert code == EXPECTED_CODE[name], err
    assert received == reference
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert listing(out_folder) == sorted(["pipe", *(["pipe.link"] if through_link else [])])


def test_dev_stdout_writes_to_the_pipe_it_names(tmp_path):
    """``--out /dev/stdout`` with standard output a pipe: the report arrives through the pipe (the
    link resolves to ``pipe:[…]``, which no rename could reach)."""
    argv_ = [sys.executable, "-m", "ragspine_pipeline.cli", "score", "--gold", GOLD, "--trace", TRACES]
    done = subprocess.run([*argv_, "--out", "/dev/stdout"], capture_output=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["pass"] is True
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert list(tmp_path.iterdir()) == []


REFUSED = ["directory", "link to a directory", "block device", "link to a block device"]


def refused_output(kind: str, folder: Path) -> Path:
    """An ``--out`` that no command may write: a directory or a block device, or a link to one."""
    if "block" in kind:
        if os.geteuid() != 0:
            pytest.skip("making a device node (os.mknod) needs root")
        target = folder / "b"
        os.mknod(target, stat.S_IFBLK | 0o600, os.makedev(7, 0))  # a loop device's numbers; never opened
    else:
        target = folder / "d"
        target.mkdir()
    if not kind.startswith("link"):
        return target
    link = folder / "l"
    link.symlink_to(target)
    return link


@pytest.mark.parametrize(
    "kind", ["directory", "link to a directory", "block device", "link to a block device"]
)
def test_a_directory_or_block_device_is_one_line_exit_2(command, out_folder, capsys, kind):
    _, args, _ = command
    out = refused_output(kind, out_folder)
    before = {p.name: os.lstat(p) for p in out_folder.iterdir()}
    code, err = run(capsys, args, out)
    lines = [line for line in err.splitlines() if not line.startswith("ragspine-eval: warning:")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"ragspine-eval: error: {out}: cannot write"), err
    assert "it is a " in lines[0] and ("directory" in lines[0] or "block device" in lines[0])
    after = {p.name: os.lstat(p) for p in out_folder.iterdir()}
    assert after.keys() == before.keys()  # nothing added beside it, nothing removed
    for key, st in before.items():
        assert (after[key].st_ino, after[key].st_mode) == (st.st_ino, st.st_mode)
    if (out_folder / "d").exists():
        assert list((out_folder / "d").iterdir()) == []


def test_a_new_file_in_a_system_folder_is_refused_and_nothing_is_made_there(command, capsys):
    # Root may create files in /dev; a report, a lock or an outbox of ours never goes there.
    _, args, _ = command
    out = Path("/dev") / f"ragspine-test-{os.getpid()}.out"
    try:
        code, err = run(capsys, args, out)
        lines = [line for line in err.splitlines() if not line.startswith("ragspine-eval: warning:")]
        assert code == 2 and len(lines) == 1 and "system folder" in lines[0], err
        assert not os.path.lexists(out)
    finally:
        if os.path.lexists(out):
            os.unlink(out)


def test_no_lock_or_outbox_is_made_in_a_system_folder():
    from ragspine_pipeline.alerts.builders import run_failure_alert
    from ragspine_pipeline.alerts.outbox import Outbox
    from ragspine_pipeline.errors import InputError
    from ragspine_pipeline.files import LockedFile

    name = f"ragspine-test-{os.getpid()}"
    made = [
        Path("/dev") / f".{name}.json.lock",
        Path("/dev") / f"{name}.jsonl",
        Path("/dev") / ".outbox.lock",
    ]
    before = {p for p in made if os.path.lexists(p)}
    try:
        with pytest.raises(InputError, match="/dev"):
            LockedFile(Path("/dev") / f"{name}.json", "baseline").update(lambda text: "{}")
        with pytest.raises(InputError, match="system folder"):
            Outbox(Path("/dev") / f"{name}.jsonl").observe(run_failure_alert("j", "r", None, "boom"))
        assert {p for p in made if os.path.lexists(p)} == before
    finally:
        for p in made:
            if p not in before and os.path.lexists(p):
                os.unlink(p)

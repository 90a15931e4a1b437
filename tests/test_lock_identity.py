"""The baseline lock is keyed on the file, not on the name it was given (``files.LockedFile``): two
symbolic links to one baseline, or two spellings of its path, take one lock, so promotions through them
serialise and never lower a value; a device or FIFO is refused before any lock file is made."""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragspine_pipeline import files
from ragspine_pipeline.errors import InputError
from tests.conftest import load_factor

ROUNDS = 20
PAUSE_S = 0.2  # how long each promotion holds what it read before it writes (the window of the race)

PROMOTER = f"""
import sys, time
from ragspine_pipeline import files
from ragspine_pipeline.decision import baseline

real_read = files.LockedFile.read


def read_then_pause(self):
    # Forced interleaving: the text read is held a while before the promotion writes its result.
    text = real_read(self)
    time.sleep({PAUSE_S})
    return text


files.LockedFile.read = read_then_pause
link = sys.argv[1]
print("ready", flush=True)
for line in sys.stdin:
    round_, value = line.split()
    baseline.promote(link, "golden", {{"precision": float(value)}}, passed=True, run=f"{{link}}-{{round_}}")
    print("done", flush=True)
"""


def read_line(process: subprocess.Popen, deadline: float, log: Path) -> str:
    """The child's next line of output, waited for until ``deadline`` (a condition, not a sleep)."""
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no answer from the promoter in time: {log.read_text()}"
        ready, _, _ = select.select([process.stdout], [], [], remaining)
        if ready:
            byte = os.read(process.stdout.fileno(), 1)
            assert byte, f"the promoter exited ({process.poll()}): {log.read_text()}"
            data += byte
    return data.decode().strip()


@pytest.mark.system  # two OS processes promoting at once, twenty rounds
def test_two_links_to_one_baseline_promoted_at_once_never_lower_it(tmp_path):
    store, ci_a, ci_b = (tmp_path / name for name in ("store", "ci-a", "ci-b"))
    for folder in (store, ci_a, ci_b):
        folder.mkdir()
    real = store / "baseline.json"
    real.write_text(json.dumps({"golden": {"metrics": {"precision": 0.5}}}) + "\n")
    links = [ci_a / "baseline.json", ci_b / "qa_baseline.json"]
    links[0].symlink_to(real)
    links[1].symlink_to(os.path.relpath(real, ci_b))
    logs = [tmp_path / f"promoter-{i}.log" for i in range(2)]
    promoters = [
        subprocess.Popen(
            [sys.executable, "-c", PROMOTER, str(link)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            bufsize=0,
            env=os.environ.copy(),
        )
        for link, log in zip(links, logs, strict=True)
    ]
    deadline_s = 120 * load_factor()
    try:
        for promoter, log in zip(promoters, logs, strict=True):
            assert read_line(promoter, time.monotonic() + deadline_s, log) == "ready"
        best = 0.5
        for round_ in range(ROUNDS):
            high, low = 0.5 + 0.02 * round_ + 0.01, 0.5 + 0.02 * round_  # each above the last round's best
            values = (
                (high, low) if round_ % 2 else (low, high)
            )  # which link carries the better run alternates
            for promoter, value in zip(promoters, values, strict=True):
                promoter.stdin.write(f"{round_} {value!r}\n".encode())
            deadline = time.monotonic() + deadline_s
            for promoter, log in zip(promoters, logs, strict=True):
                assert read_line(promoter, deadline, log) == "done"
            precision = json.loads(real.read_text())["golden"]["metrics"]["precision"]
            # Serialised, the second writer ratchets on top of the first: the better run's value stays.
            assert precision == high, f"round {round_}: the baseline went from {best} to {precision}"
            best = precision
    finally:
        for promoter in promoters:
            promoter.stdin.close()
        for promoter in promoters:
            try:
                promoter.wait(deadline_s)
            except subprocess.TimeoutExpired:
                promoter.kill()
    assert [p.returncode for p in promoters] == [0, 0]
    assert all(link.is_symlink() for link in links)
    assert sorted(p.name for p in store.iterdir()) == [".baseline.json.lock", "baseline.json"]
    assert [p.name for p in ci_a.iterdir()] == ["baseline.json"]  # no lock beside a link
    assert [p.name for p in ci_b.iterdir()] == ["qa_baseline.json"]


def test_every_path_to_one_file_has_one_lock(tmp_path):
    real = tmp_path / "store" / "baseline.json"
    real.parent.mkdir()
    real.write_text("{}\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "link.json").symlink_to(real)
    (tmp_path / "hop.json").symlink_to(tmp_path / "a" / "link.json")  # a link to a link
    spellings = [
        real,
        tmp_path / "a" / "link.json",
        tmp_path / "hop.json",
        tmp_path / "a" / ".." / "store" / "baseline.json",
    ]
    locks = {files.LockedFile(path, "baseline").lock_path() for path in spellings}
    assert locks == {real.parent / ".baseline.json.lock"}
    files.LockedFile(tmp_path / "hop.json", "baseline").update(lambda text: '{"x": 1}\n')
    assert real.read_text() == '{"x": 1}\n' and (tmp_path / "hop.json").is_symlink()
    assert (real.parent / ".baseline.json.lock").exists()
    assert not (tmp_path / ".hop.json.lock").exists() and not (tmp_path / "a" / ".link.json.lock").exists()


def test_a_dangling_link_is_not_taken_for_a_new_baseline(tmp_path):
    """A link whose baseline is gone (an unmounted share, say) is an error, not a fresh start."""
    (tmp_path / "store").mkdir()
    link = tmp_path / "baseline.json"
    link.symlink_to(tmp_path / "store" / "b.json")
    with pytest.raises(InputError, match="file not found"):
        files.LockedFile(link, "baseline").update(lambda text: "{}\n")
    assert link.is_symlink() and not (tmp_path / "store" / "b.json").exists()
    assert not (tmp_path / ".baseline.json.lock").exists()  # had there been one: beside the target


@pytest.mark.parametrize("kind", ["fifo", "character device", "link to a character device"])
def test_a_device_or_fifo_as_the_baseline_is_one_line_and_makes_no_lock_file(tmp_path, kind):
    if "device" in kind:
        if os.geteuid() != 0:
            pytest.skip("making a device node (os.mknod) needs root")
        os.mknod(tmp_path / "node", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        os.mkfifo(tmp_path / "node")
    path = tmp_path / "node"
    if kind.startswith("link"):
        (tmp_path / "link").symlink_to(path)
        path = tmp_path / "link"
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InputError, match="not a regular file") as raised:
        files.LockedFile(path, "baseline").update(lambda text: "{}\n")
    assert "\n" not in str(raised.value) and str(raised.value).startswith(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no lock file, nothing replaced
    mode = os.lstat(tmp_path / "node").st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)

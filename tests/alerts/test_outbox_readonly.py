"""Read commands never write, and an outbox path is checked before anything is created beside it:
``alerts list`` leaves a file that is not an outbox byte for byte as it was (no corrupt file, no lock, no
state); ``alerts flush`` on a device or a FIFO is one line, exit 2, and creates nothing in its folder;
the outbox's own files sit beside the file it resolves to."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from ragspine_pipeline import cli
from ragspine_pipeline.alerts.builders import release_alert
from ragspine_pipeline.alerts.outbox import Outbox, open_outbox
from tests.alerts.test_outbox import STREAM, decision

JUNK = b'meeting notes\nnot json at all\n{"a": 1}\n\xff\xfe not UTF-8\n[1, 2, 3]\n'


def _listing(folder) -> dict[str, bytes | str]:
    """Every entry of ``folder``: a regular file's bytes, anything else its kind."""
    out: dict[str, bytes | str] = {}
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        mode = os.lstat(path).st_mode
        out[entry] = Path(path).read_bytes() if stat.S_ISREG(mode) else stat.filemode(mode)
    return out


def _in_thread(call, timeout: float = 20):
    """``call()``'s result; an AssertionError when it has not returned in time (a FIFO opened blocking)."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "hung"
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.mark.parametrize("output", ["text", "json"])
def test_list_on_a_file_that_is_not_an_outbox_writes_nothing(tmp_path, capsys, output):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(JUNK)
    before = _listing(tmp_path)
    assert cli.main(["alerts", "list", "--outbox", str(notes), "--format", output]) == 0
    out, err = capsys.readouterr()
    assert _listing(tmp_path) == before  # the same bytes, and no notes.corrupt.jsonl, lock or state
    assert not (tmp_path / "notes.corrupt.jsonl").exists() and not (tmp_path / ".outbox.lock").exists()
    if output == "json":
        assert json.loads(out)["unreadable"] == 5 and json.loads(out)["set_aside"] == 0
    else:
        assert "5 unreadable line(s)" in err and "left where they are" in err


def test_list_counts_the_corrupt_lines_of_a_real_outbox_and_flush_then_sets_them_aside(tmp_path, capsys):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    assert outbox.observe(release_alert(decision(), STREAM)) is not None
    with open(outbox.path, "ab") as out:
        out.write(b"torn {\n")
    before = _listing(tmp_path)
    assert cli.main(["alerts", "list", "--outbox", str(outbox.path)]) == 0
    out, err = capsys.readouterr()
    assert "1 pending" in out and "1 unreadable line(s)" in err
    assert _listing(tmp_path) == before  # nothing moved, the lock and state untouched
    assert outbox.states()[STREAM].status == "failing"
    assert _listing(tmp_path) == before  # reading the state writes nothing either
    # A write command still cleans up: the corrupt line is set aside once.
    assert cli.main(["alerts", "flush", "--outbox", str(outbox.path)]) == 1  # no Slack token: pending
    assert "1 corrupt line(s) set aside" in capsys.readouterr().err
    assert outbox.corrupt_path.exists()


def test_list_of_an_outbox_that_does_not_exist_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "var" / "alerts" / "outbox.jsonl"
    assert cli.main(["alerts", "list", "--outbox", str(missing)]) == 0
    assert "0 pending" in capsys.readouterr().out
    assert os.listdir(tmp_path) == []  # not even the folder
    assert Outbox(missing).states() == {} and os.listdir(tmp_path) == []


def _char_device(path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("making a character device needs CAP_MKNOD")


@pytest.mark.parametrize("kind", ["character device", "FIFO"])
@pytest.mark.parametrize("command", ["flush", "list"])
def test_an_outbox_on_a_device_or_fifo_is_one_line_and_creates_nothing(tmp_path, capsys, kind, command):
    folder = tmp_path / "dev"
    folder.mkdir()
    path = folder / "zero"
    _char_device(path) if kind == "character device" else os.mkfifo(path)
    before = _listing(folder)
    assert _in_thread(lambda: cli.main(["alerts", command, "--outbox", str(path)])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"not a regular file (a {kind})" in err
    assert _listing(folder) == before  # no .outbox.lock, .flush.lock, state or corrupt file


def test_the_outbox_files_sit_beside_the_file_a_link_resolves_to(tmp_path):
    mine, elsewhere = tmp_path / "mine", tmp_path / "elsewhere"
    mine.mkdir()
    elsewhere.mkdir()
    (elsewhere / "outbox.jsonl").touch()
    (mine / "outbox.jsonl").symlink_to(elsewhere / "outbox.jsonl")
    outbox = Outbox(mine / "outbox.jsonl")
    assert outbox.observe(release_alert(decision(), STREAM)) is not None
    assert sorted(os.listdir(mine)) == ["outbox.jsonl"]
    assert {".outbox.lock", "alert_state.json", "outbox.jsonl"} <= set(os.listdir(elsewhere))
    assert (mine / "outbox.jsonl").is_symlink()


@pytest.mark.system
def test_list_of_a_postgresql_outbox_counts_unreadable_events_and_moves_none(database, capsys):
    from tests.alerts.test_pg_outbox import admin
    from tests.conftest import pg_location

    location = pg_location(database)
    with open_outbox(location) as shared, admin(database) as db:
        assert shared.observe(release_alert(decision(), STREAM)) is not None
        db.cursor().execute("INSERT INTO ragspine_alert_events (event) VALUES (%s)", ("[1]",))
        assert cli.main(["alerts", "list", "--outbox", location, "--format", "json"]) == 0
        listing = json.loads(capsys.readouterr().out)
        assert listing["unreadable"] == 1 and listing["set_aside"] == 0 and len(listing["alerts"]) == 1
        with db.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ragspine_alert_corrupt")
            assert cursor.fetchone() == (0,)  # nothing moved by a read command
        assert shared.read().set_aside == 1  # a write path still sets it aside

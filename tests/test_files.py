"""The one atomic write (temporary file, fsync, rename, fsync of the folder), the output rule that says
when it is used, and the one JSON Lines writer."""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest

from ragspine_pipeline import files
from ragspine_pipeline.errors import InputError


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@pytest.mark.parametrize("binary", [False, True])
def test_the_atomic_write_syncs_the_file_then_the_folder(tmp_path, fsynced, binary):
    target = tmp_path / "report.json"
    with files.atomic_output(target, "report") if binary else files.atomic_writer(target, "report") as out:
        out.write(b"new\n" if binary else "new\n")
    assert target.read_bytes() == b"new\n"
    file_sync, folder_sync = fsynced
    assert stat.S_ISREG(file_sync.st_mode) and same_file(file_sync, target.stat())
    assert stat.S_ISDIR(folder_sync.st_mode) and same_file(folder_sync, tmp_path.stat())
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_a_failed_block_leaves_the_target_untouched_and_no_temporary_file(tmp_path, fsynced):
    target = tmp_path / "baseline.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), files.atomic_writer(target, "baseline") as out:
        out.write("half of the new")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]
    assert fsynced == []  # nothing was made durable: nothing was replaced


def test_an_os_error_is_one_line_naming_the_file_and_leaves_it_untouched(tmp_path, monkeypatch):
    target = tmp_path / "sample.jsonl"
    target.write_text("old\n")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(InputError) as info:
        files.write_text_atomically(target, "new\n", "trace sample")
    assert str(info.value) == f"{target}: cannot write the trace sample: No space left on device"
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["sample.jsonl"]


def test_a_missing_folder_is_one_line(tmp_path):
    with pytest.raises(InputError, match=r"cannot write the report: directory .* does not exist"):
        files.write_text_atomically(tmp_path / "nowhere" / "r.md", "x", "report")


def test_a_symbolic_link_is_written_through_and_the_file_keeps_its_permissions(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    files.write_text_atomically(link, "new\n", "thresholds")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_write_jsonl_escapes_only_the_records_holding_a_lone_surrogate_with_one_warning(tmp_path, caplog):
    records = [{"answer": "café"}, {"answer": "a\ud800b", "note": "é"}, {"answer": "\udfff"}, {"n": 1}]
    path = tmp_path / "traces.jsonl"
    with caplog.at_level(logging.WARNING, logger="ragspine_pipeline.files"):
        files.write_jsonl(records, path, "golden traces")
    lines = path.read_bytes().decode("utf-8").splitlines()  # strict UTF-8: the file is text
    assert [json.loads(line) for line in lines] == records
    assert lines[0] == '{"answer": "café"}'  # text as it is
    assert lines[1] == '{"answer": "a\\ud800b", "note": "\\u00e9"}'  # that record only, escaped
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    assert str(path) in warning.getMessage() and "2 record(s)" in warning.getMessage()


def test_jsonl_lines_are_the_same_for_the_same_records_and_refuse_nan(caplog):
    records = [{"b": 1, "a": [1.5, None, True]}]
    assert list(files.jsonl_lines(records, "x")) == ['{"b": 1, "a": [1.5, null, true]}\n']
    assert files.jsonl_line(records[0], sort_keys=True) == '{"a": [1.5, null, true], "b": 1}'
    assert caplog.records == []
    with pytest.raises(ValueError):
        files.jsonl_line({"x": float("nan")})


def test_the_output_rule_by_what_is_at_the_path(tmp_path):
    """``files.output_kind``: a regular file or nothing is replaced, a FIFO or character device is
    written as it is, links followed; a directory or a block device is an OSError saying what it is."""
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "absent")
    assert files.output_kind(tmp_path / "file") == files.ATOMIC
    assert files.output_kind(tmp_path / "new") == files.ATOMIC
    assert files.output_kind(tmp_path / "to-file") == files.ATOMIC
    assert files.output_kind(tmp_path / "dangling") == files.ATOMIC
    assert files.output_kind(tmp_path / "fifo") == files.STREAM
    assert files.output_kind(tmp_path / "to-fifo") == files.STREAM
    with pytest.raises(OSError, match="it is a directory"):
        files.output_kind(tmp_path / "dir")
    if os.geteuid() == 0:
        os.mknod(tmp_path / "chr", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.mknod(tmp_path / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
        assert files.output_kind(tmp_path / "chr") == files.STREAM
        with pytest.raises(OSError, match="it is a block device"):
            files.output_kind(tmp_path / "blk")


def test_the_rename_never_replaces_what_is_not_a_regular_file(tmp_path):
    """The last check before the rename: a FIFO (or device) that took the target's place meanwhile
    stays, and the temporary file is removed."""
    target = tmp_path / "report.json"
    with (
        pytest.raises(InputError, match="not replacing a FIFO with a file"),
        files.atomic_writer(target, "report") as out,
    ):
        out.write("new\n")
        os.mkfifo(target)  # appears while the report is being written
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="os.mknod of a device needs root")
def test_write_if_changed_writes_to_a_device_and_leaves_it_one(tmp_path):
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert files.write_if_changed(device, "content\n", "page") is True
    assert stat.S_ISCHR(os.lstat(device).st_mode) and os.lstat(device).st_rdev == os.makedev(1, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]

"""A read error (a disk's EIO, a vanished device's ENODEV) in an input file is one line naming the file
and the OS error, exit 2 — never a traceback — in every command that reads traces or a golden set.

The fault is made at the one place the record reader takes bytes from an open file
(``contracts.jsonl.read_bytes``), for one file only, at its first read or a later one (the first is
``first_char``; a later one is the line or array reader), and at the columnar reader's guard.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from ragspine_pipeline import cli, inputs, line_guards
from ragspine_pipeline.contracts import jsonl

LAYERED = Path(__file__).resolve().parents[1] / "examples" / "layered"
EIO = "cannot read: [Errno 5] Input/output error"


@pytest.fixture
def example(tmp_path) -> Path:
    """The layered example (golden set and its lock, traces, evidence) in a folder of its own."""
    for name in ("gold.jsonl", "gold.jsonl.lock", "traces.jsonl", "evidence.jsonl"):
        shutil.copy(LAYERED / name, tmp_path / name)
    return tmp_path


def fail_reading(monkeypatch, name: str, at_call: int = 1, error: int = errno.EIO) -> list[int]:
    """Make the ``at_call``-th read of the file called ``name`` (and every later one) raise ``error``;
    other files read as they are. Returns the count of reads of that file, for the test to check."""
    real = jsonl.read_bytes
    calls = [0]

    def faulty(path, stream, size, *, line=False):
        if Path(path).name == name:
            calls[0] += 1
            if calls[0] >= at_call:
                raise OSError(error, os.strerror(error))
        return real(path, stream, size, line=line)

    monkeypatch.setattr(jsonl, "read_bytes", faulty)
    return calls


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("ragspine-eval: warning:")]


def score(folder: Path, *extra: str) -> list[str]:
    files = ("--gold", "gold.jsonl", "--trace", "traces.jsonl", "--evidence", "evidence.jsonl")
    args = [str(folder / value) if value.endswith(".jsonl") else value for value in files]
    return ["score", *args, *extra]


def test_without_a_fault_every_command_here_runs(example, capsys):
    """The baseline of the tests below: the same commands on the same files end without an error."""
    assert cli.main(score(example)) in (0, 1)
    assert cli.main(["golden", "verify", "--gold", str(example / "gold.jsonl")]) == 0
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("name", ["traces.jsonl", "gold.jsonl", "evidence.jsonl"])
def test_score_names_the_file_it_cannot_read(example, capsys, monkeypatch, name):
    calls = fail_reading(monkeypatch, name)
    code = cli.main(score(example))
    err = capsys.readouterr().err
    assert calls[0] >= 1  # the fault was reached
    assert code == 2, err
    assert errors(err) == [f"ragspine-eval: error: {example / name}: {EIO}"]


def test_score_a_json_array_unreadable_after_its_first_bytes(example, capsys, monkeypatch):
    """A golden set written as a JSON array is read whole by the array reader: its read fails too."""
    rows = [json.loads(line) for line in (example / "gold.jsonl").read_text().splitlines() if line.strip()]
    (example / "gold.jsonl").write_text(json.dumps(rows, indent=1))
    calls = fail_reading(monkeypatch, "gold.jsonl", at_call=2)  # first_char reads; the array read fails
    code = cli.main(score(example))
    err = capsys.readouterr().err
    assert calls[0] == 2
    assert code == 2 and errors(err) == [f"ragspine-eval: error: {example / 'gold.jsonl'}: {EIO}"], err


def test_score_a_read_error_in_the_columnar_readers_guard(example, capsys, monkeypatch):
    """The columnar reader's guard reads the file beside DuckDB: its read error is the same one line."""

    def broken(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(line_guards, "plain_json_lines", broken)
    code = cli.main(score(example))
    err = capsys.readouterr().err
    assert code == 2 and len(errors(err)) == 1, err
    assert errors(err)[0].endswith(f".jsonl: {EIO}") and str(example) in errors(err)[0]


def test_judge_names_the_traces_it_cannot_read(example, capsys, monkeypatch):
    monkeypatch.setenv(
        "RAGSPINE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1"
    )  # never called: reading fails first
    monkeypatch.setenv("RAGSPINE_JUDGE_MODEL", "judge-a")
    calls = fail_reading(monkeypatch, "traces.jsonl")
    code = cli.main(["judge", "--trace", str(example / "traces.jsonl"), "--metrics", "answer_relevancy"])
    err = capsys.readouterr().err
    assert calls[0] >= 1
    assert code == 2 and errors(err) == [f"ragspine-eval: error: {example / 'traces.jsonl'}: {EIO}"], err


@pytest.mark.parametrize("at_call", [1, 2], ids=["first read", "a line read"])
def test_golden_verify_names_the_set_it_cannot_read(example, capsys, monkeypatch, at_call):
    calls = fail_reading(monkeypatch, "gold.jsonl", at_call=at_call)
    code = cli.main(["golden", "verify", "--gold", str(example / "gold.jsonl")])
    _out, err = capsys.readouterr()
    assert calls[0] == at_call
    assert code == 2 and errors(err) == [f"ragspine-eval: error: {example / 'gold.jsonl'}: {EIO}"], err


def test_another_os_error_is_named_as_it_is(example, capsys, monkeypatch):
    fail_reading(monkeypatch, "gold.jsonl", error=errno.ENODEV)
    code = cli.main(["golden", "verify", "--gold", str(example / "gold.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert errors(err) == [
        f"ragspine-eval: error: {example / 'gold.jsonl'}: cannot read: [Errno 19] No such device"
    ]


def test_a_read_error_in_human_labels_is_one_line_naming_the_file(tmp_path, monkeypatch):
    from ragspine_pipeline.errors import InputError
    from ragspine_pipeline.judge.report import load_labels

    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"qid": "q1", "metric": "faithfulness", "score": 4}) + "\n")

    def failing(stream, *args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
        yield  # a generator, as the real one

    monkeypatch.setattr(inputs, "iter_lines", failing)
    with pytest.raises(InputError) as raised:
        load_labels(labels)
    assert str(labels) in str(raised.value) and EIO in str(raised.value)

"""Hostile input never crashes a command, hangs it or grows it without bound: every reader refuses what
is not a regular file, caps lines and nesting before a parser sees them, and the sampler's quarantine
keeps what it set aside losslessly, up to a byte cap, with exact counts.

The crash cases run ``ragspine-eval`` as a real process: a regression there is a segfault or a hang,
which an in-process call would not survive or notice.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine_pipeline import cli, inputs

DAY = "2024-05-01"
GOLD = [
    {
        "qid": f"q{i}",
        "question": "What?",
        "answerable": True,
        "gold_claim_substr": ["x"],
        "gold_citations": ["d#1"],
    }
    for i in range(5)
]
TRACES = [
    {"qid": f"q{i}", "retrieved_ids": ["d#1"], "answer": {"claim": "x", "citations": ["d#1"]}}
    for i in range(5)
]
DEEP = '{"qid": "q9", "x": ' + "[" * 10_000 + "]" * 10_000 + "}"  # pyarrow's parser died on this (SIGSEGV)
HUGE_INT = '{"qid": "q9", "x": ' + "9" * 5_000 + "}"  # beyond Python's 4,300-digit conversion limit
PAIRED = '{"qid": "q9", "answer": "smile \\ud83d\\ude00"}'  # one character, written as a surrogate pair
BIN = Path(sys.executable).with_name("ragspine-eval")


def ragspine(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN), *argv], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def in_process(capsys, *argv: str) -> tuple[int, str]:
    """The command run in this process (for inputs that cannot crash or hang it any more)."""
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def gold(tmp_path) -> Path:
    return jsonl(tmp_path / "gold.jsonl", [json.dumps(case) for case in GOLD])


def traces_with(tmp_path: Path, bad: str, name: str = "traces.jsonl") -> Path:
    lines = [json.dumps(trace) for trace in TRACES]
    return jsonl(tmp_path / name, [*lines[:2], bad, *lines[2:]])


# -- one line that names the problem, exit 2 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (DEEP, "traces.jsonl:3: JSON nested 10001 levels deep; at most 64 are accepted"),
        ('{"qid": "q9", "x": ' + "{" * 70 + "}" * 70 + "}", "traces.jsonl:3: JSON nested 71 levels deep"),
        (HUGE_INT, "traces.jsonl:3: a number has too many digits (at most 4,300)"),
        # A \ud800 escape without its pair decodes to no character at all (it crashed the table build).
        ('{"qid": "\\ud800", "answer": "x"}', "traces.jsonl:3: field 'qid': a lone surrogate (\\ud800)"),
        ('{"qid": "q9", "tags": {"k": ["a", "\\uDC00b"]}}', "field 'tags.k[1]': a lone surrogate (\\udc00)"),
    ],
)
def test_a_hostile_trace_line_is_one_error_line_naming_file_and_line(tmp_path, gold, bad, message):
    done = ragspine("score", "--gold", str(gold), "--trace", str(traces_with(tmp_path, bad)))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr


@pytest.mark.parametrize(
    "bad", [b'{"qid": "q9", "x\xeb": 1}', b'{"qid": "q9", "answer": {"claim": "x", "c\xff": 1}}']
)
def test_a_key_that_is_not_utf8_is_one_error_line(tmp_path, gold, bad):
    """pyarrow keeps such a key's bytes as the field's name, and reading that name raised (exit 3)."""
    traces = traces_with(tmp_path, "BAD")
    traces.write_bytes(traces.read_bytes().replace(b"BAD", bad))
    done = ragspine("score", "--gold", str(gold), "--trace", str(traces))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "traces.jsonl:3: not UTF-8 text" in done.stderr


def test_a_refusal_whose_message_cuts_a_character_is_still_one_error_line(tmp_path, capsys):
    """DuckDB quotes the line it refuses, cut at a byte limit; a cut inside a character made building
    its exception fail (UnicodeDecodeError, exit 3). Found by the fuzz test."""
    inner = {"0\u0080": "000000000\u001f\u001f\u001f\u0007\\\u0080\u0080"}
    gold = jsonl(
        tmp_path / "gold.jsonl",
        [
            '{"qid": "q0", "question": "", "answerable": false}',
            json.dumps({"qid": "q1", "question": "", "answerable": False, "gold_claim_substr": {"": inner}}),
        ],
    )
    traces = jsonl(tmp_path / "traces.jsonl", [json.dumps(TRACES[0])])
    code, err = in_process(capsys, "score", "--gold", str(gold), "--trace", str(traces))
    assert code == 2 and err.count("\n") == 1
    assert "gold.jsonl:2: id=q1: field 'gold_claim_substr'" in err


def test_the_same_lines_in_the_golden_set_are_refused_the_same_way(tmp_path, gold):
    lines = gold.read_text().splitlines()
    jsonl(gold, [*lines, DEEP.replace('"q9"', '"q7"')])
    traces = jsonl(tmp_path / "traces.jsonl", [json.dumps(trace) for trace in TRACES])
    done = ragspine("score", "--gold", str(gold), "--trace", str(traces))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "gold.jsonl:6: JSON nested 10001 levels deep" in done.stderr


def test_a_surrogate_pair_is_one_character_and_reads(tmp_path, gold):
    done = ragspine("score", "--gold", str(gold), "--trace", str(traces_with(tmp_path, PAIRED)))
    assert done.returncode in (0, 1), done.stderr


def test_a_lone_surrogate_in_a_json_array_file_names_its_line(tmp_path, gold):
    traces = tmp_path / "traces.json"
    traces.write_text('[\n{"qid": "q1", "answer": "x"},\n{"qid": "q\\udfff", "answer": "x"}\n]\n')
    done = ragspine("score", "--gold", str(gold), "--trace", str(traces))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "traces.json:3: field 'qid': a lone surrogate (\\udfff) is not text" in done.stderr


def test_an_over_long_line_is_refused_without_reading_it_whole(tmp_path, gold):
    line = json.dumps({"qid": "q9", "question": "x" * 5_000})
    traces = traces_with(tmp_path, line)
    done = ragspine(
        "score", "--gold", str(gold), "--trace", str(traces), env={"RAGSPINE_MAX_LINE_BYTES": "4096"}
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"traces.jsonl:3: line of {len(line):,} bytes is longer than the 4,096-byte limit" in done.stderr


@pytest.fixture
def specials(tmp_path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    (tmp_path / "folder").mkdir()
    return {
        "a FIFO": fifo,
        "a character device": Path("/dev/zero"),
        "a directory": tmp_path / "folder",
        "too many levels of symbolic links": tmp_path / "loop-a",
    }


@pytest.mark.parametrize("option", ["--trace", "--config", "--baseline"])
def test_a_fifo_a_device_a_directory_or_a_link_loop_is_refused_at_once(
    tmp_path, gold, specials, option, capsys
):
    """Each was a hang (FIFO), a 20 GB read (/dev/zero) or a traceback; now one line each, quickly.
    The FIFO runs in a process of its own: were it read, the test would hang rather than fail."""
    traces = jsonl(tmp_path / "traces.jsonl", [json.dumps(trace) for trace in TRACES])
    for kind, path in specials.items():
        argv = {"--trace": str(path), "--config": str(traces), "--baseline": str(traces)}
        args = [
            "score",
            "--gold",
            str(gold),
            "--trace",
            argv["--trace"] if option == "--trace" else str(traces),
        ]
        if option != "--trace":
            args += [option, str(path)]
        if kind == "a FIFO":
            done = ragspine(*args, timeout=30)
            code, err = done.returncode, done.stderr
        else:
            code, err = in_process(capsys, *args)
        assert code == 2, (kind, err)
        assert err.count("\n") == 1 and kind in err, (kind, err)


# Root reads any file (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so as root the command runs without those
# two capabilities (setpriv). It stays uid 0: it reaches the interpreter and the virtualenv wherever the
# checkout is (under a 0700 home or `mktemp -d` too, where another user such as nobody cannot), while a
# file's permission bits now apply to it as to anyone.
NO_READ_OVERRIDE = [
    "setpriv",
    "--inh-caps=-all",
    "--bounding-set=-dac_override,-dac_read_search",
]


def as_a_reader_bound_by_permissions() -> list[str]:
    """The prefix that runs a command as a process that file permissions apply to; skips the test, with
    the reason, when this machine cannot give one."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run a command as root without its read override")
    probe = subprocess.run([*NO_READ_OVERRIDE, "true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:  # no CAP_SETPCAP here (some containers): the bounding set stays as it is
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE here: {' '.join(probe.stderr.split())}")
    return NO_READ_OVERRIDE


def test_an_unreadable_file_is_one_error_line(tmp_path):
    prefix = as_a_reader_bound_by_permissions()
    gold = jsonl(tmp_path / "gold.jsonl", [json.dumps(case) for case in GOLD])
    traces = jsonl(tmp_path / "traces.jsonl", [json.dumps(trace) for trace in TRACES])
    traces.chmod(0o000)
    done = subprocess.run(
        [*prefix, str(BIN), "score", "--gold", str(gold), "--trace", str(traces)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "traces.jsonl: cannot read the file: Permission denied" in done.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gates:\n" + "".join("  " * i + "- \n" for i in range(1, 200)), "nested more than 64 levels deep"),
        ("gates: &g {precision: {min: 0.5}}\nslices: *g\n", "aliases (*name) are not accepted"),
        ("k: " + "9" * 5_000 + "\n", "malformed YAML"),
    ],
)
def test_a_hostile_config_is_one_error_line(tmp_path, gold, text, message, capsys):
    traces = jsonl(tmp_path / "traces.jsonl", [json.dumps(trace) for trace in TRACES])
    config = tmp_path / "gates.yaml"
    config.write_text(text)
    code, err = in_process(
        capsys, "score", "--gold", str(gold), "--trace", str(traces), "--config", str(config)
    )
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_a_hostile_golden_lock_and_baseline_are_one_error_line(tmp_path, gold, capsys):
    traces = jsonl(tmp_path / "traces.jsonl", [json.dumps(trace) for trace in TRACES])
    (tmp_path / "gold.jsonl.lock").write_text('{"v": ' + "[" * 5_000 + "]" * 5_000 + "}")
    code, err = in_process(capsys, "golden", "verify", "--gold", str(gold))
    assert code == 2 and err.count("\n") == 1 and "nested 5001 levels deep" in err
    (tmp_path / "gold.jsonl.lock").unlink()
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"golden": ' + "9" * 5_000 + "}")
    code, err = in_process(
        capsys, "score", "--gold", str(gold), "--trace", str(traces), "--baseline", str(baseline)
    )
    assert code == 2 and err.count("\n") == 1 and "too many digits" in err


# -- the sampler quarantines, within bounds ----------------------------------------------------------------


def day_folder(root: Path) -> Path:
    folder = root / f"dt={DAY}"
    folder.mkdir(parents=True)
    return folder


def good_lines(n: int) -> list[str]:
    return [json.dumps({"request_id": f"r{i:04d}", "answer": "fine"}) for i in range(n)]


def test_the_sampler_quarantines_deep_huge_and_over_long_lines_and_survives(tmp_path):
    folder = day_folder(tmp_path / "store")
    over_long = json.dumps({"request_id": "r-long", "answer": "x" * 100_000})
    lines = [
        *good_lines(50),
        DEEP,
        HUGE_INT,
        over_long,
        '{"request_id": "r-70", "x": ' + "[" * 70 + "]" * 70 + "}",
    ]
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join([DEEP, *good_lines(3)]) + "\n").encode()))
    quarantine = tmp_path / "q.jsonl"
    done = ragspine(
        "sample", "--source", str(tmp_path / "store"), "--date", DAY, "--n", "10", "--seed", "1",
        "--quarantine", str(quarantine), "--out", str(tmp_path / "s.jsonl"),
        env={"RAGSPINE_MAX_LINE_BYTES": "32768"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stderr.splitlines()[-1])
    assert summary["quarantined"] == {"invalid_json": 5, "invalid_trace": 0, "missing_request_id": 0}
    assert summary["valid"] == 53 and summary["sampled"] == 10
    entries = {
        (Path(e["source"]).name, e["line"]): e for e in map(json.loads, quarantine.read_text().splitlines())
    }
    assert entries[("a.jsonl", 51)]["error"] == "JSON nested 10001 levels deep; at most 64 are accepted"
    assert entries[("b.jsonl.gz", 1)]["error"] == entries[("a.jsonl", 51)]["error"]
    assert "too many digits" in entries[("a.jsonl", 52)]["error"]
    long_entry = entries[("a.jsonl", 53)]
    assert long_entry["error"] == f"line of {len(over_long):,} bytes is longer than the 32,768-byte limit"
    assert (
        long_entry["raw_bytes"] == len(over_long)
        and len(base64.b64decode(long_entry["raw_base64"])) == inputs.KEEP_BYTES
    )
    assert "nested 71 levels" in entries[("a.jsonl", 54)]["error"]
    assert base64.b64decode(entries[("a.jsonl", 51)]["raw_base64"]) == DEEP.encode()


def test_the_sampler_quarantines_a_key_that_is_not_utf8_and_samples_the_rest(tmp_path):
    folder = day_folder(tmp_path / "store")
    lines = [line.encode() for line in good_lines(20)]
    lines[7] = b'{"request_id": "r-bad", "answer": "x", "k\xeb": 1}'
    (folder / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    quarantine = tmp_path / "q.jsonl"
    done = ragspine(
        "sample", "--source", str(tmp_path / "store"), "--date", DAY, "--n", "100", "--seed", "1",
        "--quarantine", str(quarantine), "--out", str(tmp_path / "s.jsonl"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stderr.splitlines()[-1])
    assert summary["quarantined"] == {"invalid_json": 1, "invalid_trace": 0, "missing_request_id": 0}
    assert summary["valid"] == 19 and summary["sampled"] == 19
    (entry,) = map(json.loads, quarantine.read_text().splitlines())
    assert entry["line"] == 8 and base64.b64decode(entry["raw_base64"]) == lines[7]


def test_the_sampler_quarantines_a_number_past_a_double_it_could_not_write_back(tmp_path):
    """``1e999`` reads as infinity; in a field the contract does not check it was kept and the sample
    said ``Infinity``, which is not JSON. Now it is quarantined like NaN, and the sample is JSON."""
    folder = day_folder(tmp_path / "store")
    lines = [*good_lines(5), '{"request_id": "r-big", "x": [1, -1e999]}', '{"request_id": "r-nan", "x": NaN}']
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n")
    quarantine, sample = tmp_path / "q.jsonl", tmp_path / "s.jsonl"
    done = ragspine(
        "sample", "--source", str(tmp_path / "store"), "--date", DAY, "--n", "100", "--seed", "1",
        "--quarantine", str(quarantine), "--out", str(sample),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stderr.splitlines()[-1])
    assert summary["quarantined"] == {"invalid_json": 2, "invalid_trace": 0, "missing_request_id": 0}
    big, nan = map(json.loads, quarantine.read_text().splitlines())
    assert big["error"] == "a number out of range of a double (-1e999): JSON has no infinity"
    assert nan["error"] == "malformed JSON: NaN is not valid JSON"
    assert (
        len([json.loads(line, parse_constant=pytest.fail) for line in sample.read_text().splitlines()]) == 5
    )


def test_a_gzip_of_garbage_writes_a_bounded_quarantine_and_counts_every_line(tmp_path):
    """The adversarial pass's 712 KB gzip of non-UTF-8 lines wrote a 1.68 GB quarantine."""
    folder = day_folder(tmp_path / "store")
    garbage = bytes(range(128, 256)) * 8 + b"\n"  # 1 KiB of bytes that are not UTF-8, per line
    lines = 5_000
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(garbage * lines, compresslevel=9))
    quarantine = tmp_path / "q.jsonl"
    cap = 512 << 10
    done = ragspine(
        "sample", "--source", str(tmp_path / "store"), "--date", DAY, "--n", "10", "--seed", "1",
        "--quarantine", str(quarantine), "--quarantine-max-bytes", str(cap),
        "--out", str(tmp_path / "s.jsonl"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stderr.splitlines()[-1])
    assert summary["quarantined"]["invalid_json"] == lines and summary["read"] == lines
    assert quarantine.stat().st_size <= cap
    kept = quarantine.read_text().splitlines()
    assert summary["quarantine_kept"] == len(kept) > 0 and summary["quarantine_omitted"] == lines - len(kept)
    first = json.loads(kept[0])
    assert base64.b64decode(first["raw_base64"]) == garbage[:-1] and first["raw"] is None  # lossless


def test_a_failed_sample_leaves_the_previous_quarantine_alone(tmp_path):
    """`sample --quarantine F` used to delete F first, even when the run then failed."""
    folder = day_folder(tmp_path / "store")
    (folder / "a.jsonl").write_text("\n".join([*good_lines(3), "{broken"]) + "\n")
    (folder / "b.jsonl.gz").write_bytes(b"this is not gzip")  # read after a.jsonl: the pass fails
    quarantine = tmp_path / "q.jsonl"
    quarantine.write_text("yesterday's findings\n")
    done = ragspine(
        "sample", "--source", str(tmp_path / "store"), "--date", DAY, "--n", "2", "--seed", "1",
        "--quarantine", str(quarantine),
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "b.jsonl.gz" in done.stderr
    assert quarantine.read_text() == "yesterday's findings\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl", "store"]  # no temporary left behind


def test_a_directory_as_quarantine_is_refused_before_the_pass(tmp_path):
    folder = day_folder(tmp_path / "store")
    (folder / "a.jsonl").write_text("\n".join(good_lines(3)) + "\n")
    (tmp_path / "q").mkdir()
    done = ragspine(
        "sample",
        "--source",
        str(tmp_path / "store"),
        "--date",
        DAY,
        "--n",
        "2",
        "--seed",
        "1",
        "--quarantine",
        str(tmp_path / "q"),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a regular file" in done.stderr

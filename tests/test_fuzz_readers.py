"""Fuzzing the JSON Lines readers through the commands users run: whatever the lines hold, `score` ends
with exit 0 (ship), 1 (block) or 2 (unusable input, one stderr line naming the file and line) — never a
traceback, another exit status or a hang — and `sample` accounts for every line: read = valid +
quarantined, exit 0. Every path argument is also given through symbolic links and as a FIFO, a
character device or a directory: a link reads and writes as its target, a FIFO or device as an input
is one error line (exit 2), and `--out` to a device writes to it and leaves it a device."""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragspine_pipeline import cli

DAY = "2024-05-01"
FUZZ = settings(
    max_examples=int(os.environ.get("RAGSPINE_FUZZ_EXAMPLES", "60")),  # raise it for a longer local hunt
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

FUZZ_PATHS = settings(FUZZ, max_examples=int(os.environ.get("RAGSPINE_FUZZ_PATH_EXAMPLES", "30")))

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
ids = st.sampled_from(["q0", "q1", "q2", "q3", "", " ", "q0\u0000", "<script>"])
gold_cases = st.fixed_dictionaries(
    {"qid": ids, "question": st.text(max_size=30), "answerable": st.booleans()},
    optional={
        "gold_claim_substr": st.lists(st.text(max_size=10), max_size=2) | json_values,
        "gold_citations": st.lists(st.sampled_from(["d#1", "d#2"]), max_size=2) | json_values,
        "extra": json_values,
    },
)
traces = st.fixed_dictionaries(
    {"qid": ids},
    optional={
        "retrieved_ids": st.lists(st.sampled_from(["d#1", "d#2", "d#3"]), max_size=4) | json_values,
        "answer": st.fixed_dictionaries({"claim": st.text(max_size=20)}) | json_values,
        "request_id": ids,
        "tags": st.dictionaries(st.sampled_from(["channel", "topic"]), st.text(max_size=5)) | json_values,
    },
)


def nested(depth: int, kind: str) -> str:
    return '{"qid": "q1", "x": ' + (kind[0] * depth) + "1" + (kind[1] * depth) + "}"


hostile = st.one_of(
    st.integers(1, 3_000).map(lambda d: nested(d, "[]")),
    st.integers(1, 3_000).map(lambda d: '{"qid": "q1", "x": ' + '{"a": ' * d + "1" + "}" * d + "}"),
    st.integers(1, 3_000).map(lambda d: "[" * d),  # unterminated
    st.integers(4_000, 6_000).map(lambda n: '{"qid": "q1", "n": ' + "7" * n + "}"),
    st.sampled_from(
        ['{"qid": "q1", "x": NaN}', '{"qid": "q1", "x": 1e999}', "\ufeff{}", '{"qid": "\\ud800"}']
    ),
    st.sampled_from(["{", "}", "[]", "null", '"text"', "1", '{"qid": "q1"}{"qid": "q2"}', "{\r}"]),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)


def line_of(model) -> st.SearchStrategy[str]:
    return model.map(json.dumps) | json_values.map(json.dumps) | hostile


def write(path, lines: list[str], raw_tail: bytes = b"") -> None:
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass") + raw_tail)


def assert_one_error_line(code: int, err: str) -> None:
    assert code in (0, 1, 2), err
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ragspine-eval: error: "), err


@FUZZ
@given(
    gold=st.lists(line_of(gold_cases), min_size=1, max_size=8),
    trace_lines=st.lists(line_of(traces), min_size=0, max_size=8),
    raw_tail=st.binary(max_size=20),
)
def test_score_ends_with_a_verdict_or_one_error_line(tmp_path_factory, capsys, gold, trace_lines, raw_tail):
    folder = tmp_path_factory.mktemp("fuzz")
    write(folder / "gold.jsonl", gold)
    write(folder / "traces.jsonl", trace_lines, raw_tail)
    code = cli.main(["score", "--gold", str(folder / "gold.jsonl"), "--trace", str(folder / "traces.jsonl")])
    assert_one_error_line(code, capsys.readouterr().err)


@FUZZ
@given(lines=st.lists(line_of(traces), min_size=0, max_size=12), gzipped=st.booleans())
def test_sample_accounts_for_every_line(tmp_path_factory, capsys, lines, gzipped):
    root = tmp_path_factory.mktemp("store")
    folder = root / f"dt={DAY}"
    folder.mkdir()
    data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
    name = "part.jsonl.gz" if gzipped else "part.jsonl"
    (folder / name).write_bytes(gzip.compress(data) if gzipped else data)
    quarantine = root / "q.jsonl"
    argv = ["sample", "--source", str(root), "--date", DAY, "--n", "3", "--seed", "1"]
    code = cli.main([*argv, "--quarantine", str(quarantine), "--out", str(root / "s.jsonl")])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads(err.splitlines()[-1])
    assert summary["read"] == summary["valid"] + sum(summary["quarantined"].values())
    kept = quarantine.read_text().splitlines() if quarantine.exists() else []
    assert len(kept) == sum(summary["quarantined"].values()) == summary["quarantine_kept"]


@pytest.mark.parametrize("depth", [63, 64, 65, 1_000, 20_000])
def test_the_cap_is_exact_at_the_edge(tmp_path, capsys, depth):
    """64 levels of arrays inside a trace object is 65 in all: refused; one fewer is read."""
    folder = tmp_path
    write(folder / "gold.jsonl", [json.dumps({"qid": "q1", "question": "q", "answerable": False})])
    write(folder / "traces.jsonl", ['{"qid": "q1", "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"])
    code = cli.main(["score", "--gold", str(folder / "gold.jsonl"), "--trace", str(folder / "traces.jsonl")])
    err = capsys.readouterr().err
    if depth <= 64:
        assert code in (0, 1), err
    else:
        assert code == 2 and f"JSON nested {depth} levels deep" in err


# -- every path argument through links, devices and FIFOs ---------------------------------------------

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NULL = os.makedev(1, 3)  # /dev/null's numbers, on a private node: what is written there is gone
LINKS = ["link", "link to a link", "relative link"]
SPECIALS = [
    "fifo",
    "link to a fifo",
    *(["character device", "link to a character device"] if IS_ROOT else []),
]
input_forms = st.sampled_from(["file", *LINKS, *SPECIALS, "directory"])
output_forms = st.sampled_from(
    ["none", "file", *LINKS, *(["character device", "link to a character device"] if IS_ROOT else [])]
)


def placed(file: Path, form: str) -> Path:
    """A path to pass for ``file`` in ``form``: the file itself, a link to it (through another link,
    or relative), or in its place a FIFO, a character device or a directory (directly or linked)."""
    if form == "file":
        return file
    if form in LINKS:
        link = file.with_name(file.name + ".link")
        if form == "link to a link":
            file.with_name(file.name + ".hop").symlink_to(file)
            link.symlink_to(file.with_name(file.name + ".hop"))
        else:
            link.symlink_to(file.name if form == "relative link" else file)
        return link
    node = file.with_name(file.name + ".node")
    if "fifo" in form:
        os.mkfifo(node)
    elif "device" in form:
        os.mknod(node, stat.S_IFCHR | 0o666, NULL)
    else:
        node.mkdir()
    if form.startswith("link"):
        file.with_name(file.name + ".link").symlink_to(node)
        return file.with_name(file.name + ".link")
    return node


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("ragspine-eval: warning:")]


@FUZZ_PATHS
@given(
    gold=st.lists(line_of(gold_cases), min_size=1, max_size=4),
    trace_lines=st.lists(line_of(traces), min_size=0, max_size=4),
    gold_form=input_forms,
    trace_form=input_forms,
)
def test_score_reads_every_input_path_by_the_one_rule(
    tmp_path_factory, capsys, gold, trace_lines, gold_form, trace_form
):
    """A link to a file reads as the file (same exit, same error, the link's name in it); a FIFO, a
    device or a directory as an input is one error line, exit 2, and is left as it is."""
    folder = tmp_path_factory.mktemp("paths")
    write(folder / "gold.jsonl", gold)
    write(folder / "traces.jsonl", trace_lines)
    plain = ["score", "--gold", str(folder / "gold.jsonl"), "--trace", str(folder / "traces.jsonl")]
    expected = cli.main(plain)
    expected_errors = error_lines(capsys.readouterr().err)
    gold_path, trace_path = (
        placed(folder / "gold.jsonl", gold_form),
        placed(folder / "traces.jsonl", trace_form),
    )
    code = cli.main(["score", "--gold", str(gold_path), "--trace", str(trace_path)])
    err = capsys.readouterr().err
    assert_one_error_line(code, err)
    special = {gold_form, trace_form} & {*SPECIALS, "directory"}
    if not special:
        renamed = [
            line.replace(str(gold_path), str(folder / "gold.jsonl")).replace(
                str(trace_path), str(folder / "traces.jsonl")
            )
            for line in error_lines(err)
        ]
        assert (code, renamed) == (expected, expected_errors)
    else:
        assert code == 2, err
        if gold_form in special:  # the golden set's error is reported first
            kind = "a directory" if gold_form == "directory" else "a FIFO" if "fifo" in gold_form else ""
            kind = kind or "a character device"
            message = f"{gold_path}: cannot read the file: not a regular file ({kind})"
            assert error_lines(err) == [f"ragspine-eval: error: {message}"]
    check_left_as_they_were(folder, ((gold_form, "gold.jsonl"), (trace_form, "traces.jsonl")))


def check_left_as_they_were(folder: Path, forms) -> None:
    """Every link is still a link, every FIFO a FIFO, every device a device; no temporary file left."""
    for form, name in forms:
        if form in LINKS or form.startswith("link"):
            assert (folder / f"{name}.link").is_symlink()
        if "fifo" in form or "device" in form:
            node = os.lstat(folder / f"{name}.node")
            assert stat.S_ISFIFO(node.st_mode) if "fifo" in form else stat.S_ISCHR(node.st_mode)
    assert not list(folder.glob(".*.tmp"))


VALID_GOLD = [json.dumps({"qid": q, "question": "q", "answerable": False}) for q in ("q0", "q1")]


@FUZZ_PATHS
@given(
    trace_lines=st.lists(traces.map(json.dumps), min_size=0, max_size=4),
    gold_form=st.sampled_from(["file", *LINKS]),
    out_form=output_forms.filter(lambda form: form != "none"),
    markdown=st.booleans(),
)
def test_score_writes_every_out_path_by_the_one_rule(
    tmp_path_factory, capsys, trace_lines, gold_form, out_form, markdown
):
    """``--out`` to a file, through a link (the target replaced, the link kept) or to a character
    device (written, left a device): the same exit and, where it can be read back, the same report."""
    folder = tmp_path_factory.mktemp("out")
    write(folder / "gold.jsonl", VALID_GOLD)
    write(folder / "traces.jsonl", trace_lines)
    gold_path = placed(folder / "gold.jsonl", gold_form)
    args = ["score", "--gold", str(gold_path), "--trace", str(folder / "traces.jsonl"), "--run-id", "r"]
    args += ["--format", "markdown"] if markdown else []
    expected = cli.main([*args, "--out", str(folder / "expected.out")])
    capsys.readouterr()
    out = placed(folder / "report.json", out_form)
    if out_form in LINKS:
        (folder / "report.json").write_text("old\n")  # a link's target exists, to be replaced
    code = cli.main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert_one_error_line(code, err)
    assert code == expected, err
    if code in (0, 1) and "device" not in out_form:
        assert (folder / "report.json").read_bytes() == (folder / "expected.out").read_bytes()
    check_left_as_they_were(folder, ((gold_form, "gold.jsonl"), (out_form, "report.json")))


@FUZZ_PATHS
@given(
    lines=st.lists(line_of(traces), min_size=0, max_size=6),
    source_form=st.sampled_from(["directory", "link"]),
    out_form=output_forms.filter(lambda form: form != "none"),
    quarantine_form=st.sampled_from(["file", *LINKS, *SPECIALS]),
)
def test_sample_takes_every_path_argument_by_the_one_rule(
    tmp_path_factory, capsys, lines, source_form, out_form, quarantine_form
):
    """``sample`` through a linked store, to a linked or device ``--out``: the same sample and summary
    as through the paths themselves; a FIFO or device as the quarantine is one error line, exit 2."""
    root = tmp_path_factory.mktemp("store")
    day = root / "store" / f"dt={DAY}"
    day.mkdir(parents=True)
    write(day / "part.jsonl", lines)
    common = ["sample", "--date", DAY, "--n", "3", "--seed", "1"]
    plain = ["--out", str(root / "plain.jsonl"), "--quarantine", str(root / "plain-q.jsonl")]
    assert cli.main([*common, "--source", str(root / "store"), *plain]) == 0
    expected = json.loads(capsys.readouterr().err.splitlines()[-1])
    source = root / "store"
    if source_form == "link":
        (root / "store.link").symlink_to(source)
        source = root / "store.link"
    out = placed(root / "sample.jsonl", out_form)
    if out_form in LINKS:
        (root / "sample.jsonl").write_text("old\n")
    quarantine = placed(root / "q.jsonl", quarantine_form)
    if quarantine_form in LINKS:
        (root / "q.jsonl").write_text("old\n")  # a link's target exists, to be replaced
    code = cli.main([*common, "--source", str(source), "--out", str(out), "--quarantine", str(quarantine)])
    err = capsys.readouterr().err
    if quarantine_form in SPECIALS:
        assert code == 2 and error_lines(err) == [
            f"ragspine-eval: error: {quarantine}: cannot write the quarantine: not a regular file"
        ], err
        return
    assert code == 0, err
    summary = json.loads(err.splitlines()[-1])
    paths = ("source", "quarantine")  # named as given
    assert {k: v for k, v in summary.items() if k not in paths} == {
        k: v for k, v in expected.items() if k not in paths
    }
    if "device" not in out_form:
        assert (root / "sample.jsonl").read_bytes() == (root / "plain.jsonl").read_bytes()
    else:
        assert stat.S_ISCHR(os.lstat(root / "sample.jsonl.node").st_mode)
    kept = root / "plain-q.jsonl"
    if kept.exists():  # bad lines: the quarantine (the link's target) holds the same entries
        assert quarantine.is_symlink() == (quarantine_form in LINKS)
        entries = [json.loads(line) for line in (root / "q.jsonl").read_text().splitlines()]
        expected_entries = [json.loads(line) for line in kept.read_text().splitlines()]
        assert [{**e, "source": None} for e in entries] == [{**e, "source": None} for e in expected_entries]
    assert out_form not in LINKS or out.is_symlink()

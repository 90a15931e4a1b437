"""Fuzzing the JSON Lines readers through the commands users run: whatever the lines hold, `score` ends
with exit 0 (ship), 1 (block) or 2 (unusable input, one stderr line naming the file and line) — never a
traceback, another exit status or a hang — and `sample` accounts for every line: read = valid +
quarantined, exit 0."""

from __future__ import annotations

import gzip
import json
import os

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

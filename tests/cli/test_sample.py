"""``ragspine-eval sample`` end to end on local and S3 stores: outputs, summary, exit codes 0 and 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.files import write_jsonl
from ragspine_pipeline.sources.sampling import sample_day
from ragspine_pipeline.sources.trace_store import LocalTraceStore

DAY = "2024-05-01"
TOPICS = {"billing": 90, "search": 25, "legal": 4}
TRACES = [
    {"request_id": f"{topic}-{i:03d}", "answer": f"mail me at user{i}@example.com", "tags": {"topic": topic}}
    for topic, size in TOPICS.items()
    for i in range(size)
]
BAD = ['{"request_id": "broken", ', json.dumps({"answer": "no id"})]


@pytest.fixture
def store(tmp_path) -> Path:
    """A day split over a plain and a gzipped file, with a duplicate and two malformed lines."""
    folder = tmp_path / "store" / f"dt={DAY}"
    folder.mkdir(parents=True)
    lines = [json.dumps(trace) for trace in TRACES]
    (folder / "a.jsonl").write_text("\n".join([*lines[::2], BAD[0], lines[1]]) + "\n")
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join([*lines[1::2], BAD[1]]) + "\n").encode()))
    return tmp_path / "store"


def run(capsys, *argv: str) -> tuple[int, str, list[str]]:
    code = main(["sample", *argv])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_stratified_sample_to_a_file_with_its_summary(store, tmp_path, capsys):
    out = tmp_path / "sample.jsonl"
    quarantine = tmp_path / "q.jsonl"
    argv = ["--source", str(store), "--date", DAY, "--n", "40", "--seed", "7", "--stratify", "topic"]
    argv += ["--floor", "10", "--out", str(out), "--quarantine", str(quarantine), "--no-redact"]
    code, stdout, stderr = run(capsys, *argv)
    assert code == 0 and stdout == ""
    summary = json.loads(stderr[-1])
    assert {key: summary[key] for key in ("read", "valid", "duplicates", "sampled", "date", "seed")} == {
        "read": len(TRACES) + 1 + len(BAD),
        "valid": len(TRACES) + 1,
        "duplicates": 1,
        "sampled": 40,
        "date": DAY,
        "seed": 7,
    }
    assert summary["quarantined"] == {"invalid_json": 1, "invalid_trace": 0, "missing_request_id": 1}
    assert summary["quarantine"] == str(quarantine) and "redacted" not in summary
    strata = summary["allocation"]["strata"]
    assert summary["allocation"]["dimension"] == "topic" and summary["allocation"]["floor"] == 10
    assert strata["legal"] == {"population": 4, "allocated": 4, "sampled": 4}
    assert strata["search"]["allocated"] == 10 and strata["billing"]["allocated"] == 26

    expected = tmp_path / "expected.jsonl"
    direct = sample_day(
        LocalTraceStore(store), DAY, n=40, seed=7, quarantine=None, stratify="topic", floor=10
    )
    write_jsonl(direct.records, expected)
    assert out.read_bytes() == expected.read_bytes()

    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert sorted((Path(e["source"]).name, e["line"], e["reason"]) for e in entries) == [
        ("a.jsonl", 61, "invalid_json"),
        ("b.jsonl.gz", 60, "missing_request_id"),
    ]
    assert run(capsys, *argv)[0] == 0  # a re-run replaces the quarantine instead of appending to it
    assert len(quarantine.read_text().splitlines()) == 2


def test_standard_output_has_the_same_bytes_as_the_file(store, tmp_path, capsys):
    argv = ["--source", str(store), "--date", DAY, "--n", "15", "--seed", "3", "--no-redact"]
    code, stdout, stderr = run(capsys, *argv)
    assert code == 0 and "allocation" not in json.loads(stderr[-1])
    assert run(capsys, *argv, "--out", str(tmp_path / "s.jsonl"))[0] == 0
    assert stdout.encode() == (tmp_path / "s.jsonl").read_bytes()
    assert len(stdout.splitlines()) == 15


def test_redaction_is_on_by_default(store, capsys):
    code, stdout, stderr = run(capsys, "--source", str(store), "--date", DAY, "--n", "12", "--seed", "1")
    assert code == 0
    records = [json.loads(line) for line in stdout.splitlines()]
    assert len(records) == 12 and all("@" not in r["answer"] and "[EMAIL]" in r["answer"] for r in records)
    assert json.loads(stderr[-1])["redacted"] == {"EMAIL": 12}


def test_an_empty_day_samples_nothing_and_says_so(store, capsys):
    code, stdout, stderr = run(
        capsys, "--source", str(store), "--date", "2024-05-02", "--n", "5", "--seed", "1"
    )
    assert code == 0 and stdout == ""
    assert stderr[0].startswith("ragspine-eval: warning: no trace lines for 2024-05-02")
    assert json.loads(stderr[-1])["sampled"] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "{missing}", "--date", DAY], "trace store root does not exist"),
        (["--source", "{store}", "--date", "2024-02-30"], "--date: a day must be an ISO date"),
        (["--source", "ftp://host/x", "--date", DAY], "unsupported trace store"),
        (["--source", "{store}", "--date", DAY, "--stratify", " "], "--stratify: names no tag dimension"),
        (["--source", "{store}", "--date", DAY, "--out", "{missing}/s.jsonl"], "directory"),
    ],
)
def test_unusable_input_exits_2_with_one_line(store, tmp_path, capsys, argv, message):
    paths = {"store": str(store), "missing": str(tmp_path / "missing")}
    argv = [arg.format(**paths) for arg in argv]
    code, stdout, stderr = run(capsys, *argv, "--n", "5", "--seed", "1", "--no-redact")
    assert code == 2 and stdout == ""
    assert len(stderr) == 1 and stderr[0].startswith("ragspine-eval: error: ") and message in stderr[0]


def test_a_negative_n_is_a_usage_error(store, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sample", "--source", str(store), "--date", DAY, "--n", "-1", "--seed", "1"])
    assert exc.value.code == 2 and "must be at least 0" in capsys.readouterr().err


def test_an_s3_store_gives_the_same_sample_as_the_local_one(store, bucket, s3_endpoint, tmp_path, capsys):
    name, client = bucket
    for path in store.rglob("*.jsonl*"):
        client.put_object(Bucket=name, Key=f"traces/{path.relative_to(store)}", Body=path.read_bytes())
    common = ["--date", DAY, "--n", "30", "--seed", "9", "--stratify", "topic", "--floor", "5"]
    code, from_s3, stderr = run(
        capsys, "--source", f"s3://{name}/traces", "--endpoint-url", s3_endpoint, *common
    )
    assert code == 0 and json.loads(stderr[-1])["source"] == f"s3://{name}/traces"
    assert from_s3 == run(capsys, "--source", str(store), *common)[1]
    assert len(from_s3.splitlines()) == 30
    code, _, stderr = run(capsys, "--source", f"s3://{name}-absent/t", "--endpoint-url", s3_endpoint, *common)
    assert code == 2 and stderr[0].startswith(f"ragspine-eval: error: s3://{name}-absent/t")


def test_a_sample_larger_than_n_says_so_and_why(store, capsys):
    argv = ["--source", str(store), "--date", DAY, "--n", "5", "--seed", "7", "--stratify", "topic"]
    code, _stdout, stderr = run(capsys, *argv, "--floor", "10", "--no-redact")
    summary = json.loads(stderr[-1])
    assert code == 0 and summary["sampled"] == 24 and summary["allocation"]["exceeded_n"]
    assert stderr[-2] == (
        "ragspine-eval: warning: sampled 24 traces, more than --n 5: each of the 3 strata keeps at least "
        "--floor 10 traces (or all it has), so that its rates mean something; lower --floor or raise --n"
    )

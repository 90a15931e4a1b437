"""``ragspine-eval score`` end to end, as the service's CI calls it: exit codes, JSON, Markdown, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "wfgy"
GOLD, TRACES = str(EXAMPLES / "gold.jsonl"), str(EXAMPLES / "traces.jsonl")
REQUIRED_KEYS = {  # what a CI consuming the JSON report may rely on
    "answered", "refused", "answerable", "unanswerable", "missing", "unmatched", "precision", "chr",
    "under_refusal", "over_refusal", "recall@k", "k", "compliance", "gates", "pass", "cases",
}  # fmt: skip


def run(capsys, *args):
    code = main(["score", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report_of_the_shipped_example(capsys):
    code, out, _ = run(capsys, "--gold", GOLD, "--trace", TRACES)
    report = json.loads(out)
    assert code == 0 and report["pass"] is True
    assert report.keys() >= REQUIRED_KEYS
    assert report["precision"] == round(14 / 15, 4) and report["over_refusal"] == 0.0625
    assert report["denominators"]["precision"] == 15
    assert [g["metric"] for g in report["gates"]] == [
        "precision",
        "chr",
        "under_refusal",
        "over_refusal",
        "compliance",
    ]
    assert len(report["cases"]) == 20
    by_qid = {case["qid"]: case for case in report["cases"]}
    assert by_qid["SEC-005"]["label"] == "OVER_REFUSAL" and by_qid["SEC-005"]["citation_hit"] is None
    assert by_qid["FIN-003"]["label"] == "ANS_NO_HIT"


def test_a_failing_gate_exits_1(capsys):
    code, out, _ = run(capsys, "--gold", GOLD, "--trace", TRACES, "--gates", "precision=0.95")
    report = json.loads(out)
    assert code == 1 and report["pass"] is False
    assert report["gates"] == [
        {
            "metric": "precision",
            "op": ">=",
            "threshold": 0.95,
            "value": 0.9333,
            "pass": False,
            "severity": "hard",
            "applicable": True,
            "denominator": 15,
            "numerator": 14,  # the value, numerator and denominator of the metric the verdict judged
        }
    ]


def test_markdown_report(capsys):
    code, out, _ = run(
        capsys, "--gold", GOLD, "--trace", TRACES, "--format", "markdown", "--gates", "over=0.05"
    )
    assert code == 1
    assert out.startswith("# Evaluation report\n\n**BLOCK**")
    assert "- gate **over_refusal** = 0.0625, needs <= 0.0500 (Δ +0.0125)" in out
    assert "| over_refusal | ≤ 0.0500 | 0.0625 | ❌ **FAIL** |" in out
    assert "| precision | 0.9333 | 14 / 15 answered |" in out
    assert "| SEC-005 | yes | no | — | — | no | OVER_REFUSAL |" in out
    assert "| OVER_REFUSAL | 1 |" in out


def test_out_file(tmp_path, capsys):
    target = tmp_path / "report.json"
    code, out, _ = run(capsys, "--gold", GOLD, "--trace", TRACES, "--out", str(target))
    assert code == 0 and out == "decision: ship\n"  # the report in the file, the verdict on the terminal
    assert json.loads(target.read_text())["pass"] is True


def test_out_file_of_a_block_prints_its_first_reason(tmp_path, capsys):
    target = tmp_path / "report.md"
    argv = ["--gates", "chr=0.99,precision=0.99", "--format", "markdown", "--out", str(target)]
    code, out, _ = run(capsys, "--gold", GOLD, "--trace", TRACES, *argv)
    assert code == 1 and out.startswith("decision: block: failed gate ") and out.endswith("(and 1 more)\n")
    assert out.count("\n") == 1 and "## " in target.read_text()


def test_missing_and_unmatched_and_duplicates_warn(tmp_path, capsys):
    traces = tmp_path / "t.jsonl"
    lines = Path(TRACES).read_text().splitlines()
    extra = json.dumps({"qid": "NOPE", "answer_json": {"claim": "x", "citations": []}})
    traces.write_text("\n".join([*lines[1:], lines[2], extra]) + "\n")
    code, out, err = run(capsys, "--gold", GOLD, "--trace", str(traces))
    report = json.loads(out)
    assert (report["missing"], report["unmatched"], report["duplicates"]) == (1, 1, 1)
    assert "1 gold case(s) have no trace" in err and "not in the golden set" in err and "duplicate" in err
    assert report["warnings"] and code in (0, 1)


@pytest.mark.parametrize(
    ("make_input", "expected"),
    [
        (lambda d: d / "missing.jsonl", "missing.jsonl: file not found"),
        (
            lambda d: _write(d / "g.jsonl", '{"qid": "a", "question": "q", "answerable": "yes"}'),
            "g.jsonl:1: id=a",
        ),
        (
            lambda d: _write(d / "g.jsonl", '{"qid": "a", "question": "q", "answerable": true}\n{"qid": '),
            ":2:",
        ),
    ],
)
def test_unusable_gold_exits_2_with_one_line(tmp_path, capsys, make_input, expected):
    code, out, err = run(capsys, "--gold", str(make_input(tmp_path)), "--trace", TRACES)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err


def test_unusable_trace_exits_2(tmp_path, capsys):
    path = _write(tmp_path / "t.jsonl", '{"qid": "HR-001", "answer_json": {"claim": "x", "citations": "p1"}}')
    code, _, err = run(capsys, "--gold", GOLD, "--trace", str(path))
    assert code == 2
    assert err.strip() == (
        f"ragspine-eval: error: {path}:1: id=HR-001: field 'answer_json.citations': "
        "Input should be a valid list (got 'p1')"
    )


def test_bad_gates_exit_2(capsys):
    code, _, err = run(capsys, "--gold", GOLD, "--trace", TRACES, "--gates", "precison=0.8")
    assert code == 2 and "--gates: unknown metric 'precison'" in err


@pytest.mark.parametrize("gate", ["precision>=0.8", "precision<=0.8", "precision>0.8", "precision<0.8",
                                  "precision:0.8"])  # fmt: skip
def test_a_gate_written_as_a_comparison_exits_2_saying_how_to_write_it(capsys, gate):
    code, out, err = run(capsys, "--gold", GOLD, "--trace", TRACES, "--gates", f"chr=0.7,{gate}")
    assert code == 2 and out == ""
    assert err == (
        f"ragspine-eval: error: --gates: '{gate}': write name=value, e.g. precision=0.8; the direction is "
        "fixed per metric (at most for fabrication, over_refusal and under_refusal; at least for any other)\n"
    )


@pytest.mark.parametrize("text", ["", "\n", "\n  \n\t\n"])
def test_an_empty_trace_file_exits_2_naming_it(tmp_path, capsys, text):
    empty = tmp_path / "traces.jsonl"
    empty.write_text(text)
    code, out, err = run(capsys, "--gold", GOLD, "--trace", str(empty))
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == f"ragspine-eval: error: {empty}: no traces"
    assert "error" not in "".join(err.splitlines()[:-1])  # the lines before are warnings (no lock)


def test_an_empty_replay_among_full_ones_exits_2_naming_it(tmp_path, capsys):
    empty = tmp_path / "replay-2.jsonl"
    empty.write_text("")
    code, out, err = run(capsys, "--gold", GOLD, "--trace", TRACES, "--trace", str(empty), "--trace", TRACES)
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == f"ragspine-eval: error: {empty}: no traces"


def test_bad_k_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["score", "--gold", GOLD, "--trace", TRACES, "--k", "0"])
    assert info.value.code == 2


def test_installed_console_script():
    """The entry point as CI uses it: a separate process, exit code is the verdict."""
    done = subprocess.run(
        [sys.executable, "-m", "ragspine_pipeline.cli", "score", "--gold", GOLD, "--trace", TRACES, "--gates",
         "chr=0.99"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and json.loads(done.stdout)["pass"] is False


def _write(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    return path


def test_ids_that_need_escaping_survive_json_and_markdown(tmp_path, capsys):
    qid = 'odd "id" \\ with | pipe\tand tab'
    gold = _write(tmp_path / "g.jsonl", json.dumps({"qid": qid, "question": "q", "answerable": False}))
    traces = _write(
        tmp_path / "t.jsonl", json.dumps({"qid": qid, "answer_json": {"claim": "not in context"}})
    )
    code, out, _ = run(capsys, "--gold", str(gold), "--trace", str(traces))
    assert code == 0 and json.loads(out)["cases"][0]["qid"] == qid
    code, out, _ = run(capsys, "--gold", str(gold), "--trace", str(traces), "--format", "markdown")
    assert "| odd &quot;id&quot; \\\\ with \\| pipe\tand tab | no | no |" in out  # as text, one cell

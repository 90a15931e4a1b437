"""``ragspine-eval baseline set``: a value lowered (or raised) on purpose, under the ratchet's lock, with
who, when, why and the value before in the entry's history; every later decision warns about it while it
stands, and neither shell's ratchet drops the history."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.cli.parser import build_parser
from ragspine_pipeline.decision import baseline as baselines
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, BaselineFigures
from ragspine_pipeline.decision.promotion import ratchet_entry
from ragspine_pipeline.decision.run_gates import default_gates_for
from tests.cli.ragspine_cases import golden_set, traces

STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


@pytest.fixture(autouse=True)
def actor(monkeypatch):
    monkeypatch.setenv("RAGSPINE_ACTOR", "alice")


def write_baseline(path: Path, entries: dict) -> Path:
    path.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    return path


OURS = {
    "golden": {
        "metrics": {"numeric_accuracy": 1.0, "refusal_appropriateness": 1.0, "precision": 0.9},
        "fabrication_count": 0,
        "n_cases": 4,
        "updated_at": "2026-01-02T03:04:05Z",
        "run": "run-1",
    }
}


def set_value(capsys, baseline: Path | str, metric: str, to: str, reason: str = "restated", *more: str):
    args = [
        "baseline",
        "set",
        "--baseline",
        str(baseline),
        "--metric",
        metric,
        "--to",
        to,
        "--reason",
        reason,
    ]
    code = main([*args, *more])
    out, err = capsys.readouterr()
    return code, out, err


def test_lowering_a_value_records_who_when_why_and_the_value_before(tmp_path, capsys):
    path = write_baseline(tmp_path / "baseline.json", OURS)
    code, out, err = set_value(capsys, path, "numeric_accuracy", "0.6667", "HK figures restated in Q3")
    assert code == 0 and err == ""
    entry = json.loads(path.read_text())["golden"]
    assert entry["metrics"] == {"numeric_accuracy": 0.6667, "refusal_appropriateness": 1.0, "precision": 0.9}
    [change] = entry["history"]
    assert STAMP.fullmatch(change.pop("at"))
    assert change == {
        "metric": "numeric_accuracy",
        "from": 1.0,
        "to": 0.6667,
        "by": "alice",
        "reason": "HK figures restated in Q3",
    }
    assert (entry["updated_at"], entry["run"], entry["n_cases"]) == ("2026-01-02T03:04:05Z", "run-1", 4)
    assert out.startswith(
        f"{path}: mode 'golden': baseline numeric_accuracy lowered from 1.0 to 0.6667 by alice"
    )
    assert "a looser bar" in out and out.count("\n") == 1


def test_raising_is_allowed_and_says_it_tightens_and_the_count_loosens_upwards(tmp_path, capsys):
    path = write_baseline(tmp_path / "baseline.json", OURS)
    code, out, _ = set_value(capsys, path, "precision", "0.95", "new retriever")
    assert code == 0 and "precision raised from 0.9 to 0.95" in out and "a stricter bar" in out
    code, out, _ = set_value(capsys, path, "fabrication", "1", "one known case under review")
    assert code == 0 and "fabrication_count raised from 0 to 1" in out and "a looser bar" in out
    entry = json.loads(path.read_text())["golden"]
    assert entry["fabrication_count"] == 1 and isinstance(entry["fabrication_count"], int)
    assert [(c["metric"], c["from"], c["to"]) for c in entry["history"]] == [
        ("precision", 0.9, 0.95),
        ("fabrication_count", 0, 1),
    ]


def test_the_same_value_again_is_no_change_and_writes_nothing(tmp_path, capsys):
    path = write_baseline(tmp_path / "baseline.json", OURS)
    before = path.read_bytes()
    code, out, _ = set_value(capsys, path, "precision", "0.9")
    assert code == 0 and "already 0.9: unchanged" in out
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("metric", "to", "reason", "mode", "message"),
    [
        ("precision", "0.5", "", "golden", "--reason must say why"),
        ("precision", "0.5", "   ", "golden", "--reason must say why"),
        ("precision", "0.5", "two\nlines", "golden", "on one line"),
        ("precision", "1.5", "r", "golden", "'1.5' is not a value of precision: give a number from 0 to 1"),
        ("precision", "-0.1", "r", "golden", "give a number from 0 to 1"),
        ("precision", "nan", "r", "golden", "give a number from 0 to 1"),
        ("precision", "true", "r", "golden", "give a number from 0 to 1"),
        ("fabrication_count", "0.5", "r", "golden", "give a whole number of at least 0"),
        ("fabrication_count", "-1", "r", "golden", "give a whole number of at least 0"),
        ("nope", "0.5", "r", "golden", "--metric: unknown metric 'nope'"),
        ("faithfulness", "0.5", "r", "golden", "'faithfulness' is ambiguous"),
        ("chr", "0.5", "r", "golden", "mode 'golden' lists no chr (listed: numeric_accuracy"),
        ("precision", "0.5", "r", "tool", "no entry for mode 'tool' (modes: golden)"),
    ],
)
def test_unusable_input_is_one_line_exit_2_and_the_file_is_untouched(
    tmp_path, capsys, metric, to, reason, mode, message
):
    path = write_baseline(tmp_path / "baseline.json", OURS)
    before = path.read_bytes()
    code, out, err = set_value(capsys, path, metric, to, reason, "--mode", mode)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
    assert path.read_bytes() == before


def test_a_missing_file_and_a_missing_person_are_unusable_input(tmp_path, capsys, monkeypatch):
    code, _, err = set_value(capsys, tmp_path / "absent.json", "precision", "0.5")
    assert code == 2 and "absent.json: no baseline here" in err and not (tmp_path / "absent.json").exists()
    path = write_baseline(tmp_path / "baseline.json", OURS)
    for variable in ("RAGSPINE_ACTOR", "USER", "LOGNAME"):
        monkeypatch.delenv(variable, raising=False)
    code, _, err = set_value(capsys, path, "precision", "0.5")
    assert code == 2 and "set RAGSPINE_ACTOR (or USER)" in err and "history" not in path.read_text()


def test_the_person_is_ragspine_actor_else_user_else_logname(tmp_path, capsys, monkeypatch):
    path = write_baseline(tmp_path / "baseline.json", OURS)
    monkeypatch.delenv("RAGSPINE_ACTOR")
    monkeypatch.setenv("USER", "bob")
    monkeypatch.setenv("LOGNAME", "carol")
    set_value(capsys, path, "precision", "0.8")
    monkeypatch.delenv("USER")
    set_value(capsys, path, "precision", "0.7")
    monkeypatch.setenv("RAGSPINE_ACTOR", "ci-release-bot")
    set_value(capsys, path, "precision", "0.6")
    history = json.loads(path.read_text())["golden"]["history"]
    assert [change["by"] for change in history] == ["bob", "carol", "ci-release-bot"]


def score(capsys, gold: str, trace: str, *args: str) -> tuple[int, dict, str]:
    """A run gated on refusals only: what decides it here is the baseline."""
    code = main(["score", "--gold", gold, "--trace", trace, "--gates", "refusal_appropriateness=1", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_the_next_decision_warns_while_the_value_stands_and_a_promotion_keeps_the_history(tmp_path, capsys):
    gold = golden_set(tmp_path)
    path = write_baseline(
        tmp_path / "baseline.json",
        {"golden": {"metrics": {"numeric_accuracy": 1.0}, "fabrication_count": 0, "run": "seed"}},
    )
    two_of_three = traces(tmp_path, right=2)
    code, report, _ = score(capsys, gold, two_of_three, "--baseline", str(path))
    assert code == 1 and [r["metric"] for r in report["release"]["regressions"]] == ["numeric_accuracy"]

    assert set_value(capsys, path, "numeric_accuracy", "0.6", "HK restated FY2025 revenue")[0] == 0
    [change] = json.loads(path.read_text())["golden"]["history"]
    sentence = (
        f"baseline numeric_accuracy lowered from 1.0 to 0.6 by alice at {change['at']}: "
        "HK restated FY2025 revenue"
    )
    markdown = [
        "score",
        "--gold",
        gold,
        "--trace",
        two_of_three,
        "--baseline",
        str(path),
        "--format",
        "markdown",
    ]
    assert main(markdown) == 1  # the default QA gates block at 2/3
    assert f"> ⚠ {sentence}\n" in capsys.readouterr().out
    code, report, err = score(capsys, gold, two_of_three, "--baseline", str(path), "--promote")
    assert code == 0 and sentence in report["warnings"] and f"warning: {sentence}\n" in err
    entry = json.loads(path.read_text())["golden"]
    assert entry["metrics"]["numeric_accuracy"] == 2 / 3  # the ratchet moved past the value set by hand
    assert entry["history"] == [change]  # and kept the record

    code, report, _ = score(capsys, gold, two_of_three, "--baseline", str(path))
    assert code == 0 and not [w for w in report["warnings"] if w.startswith("baseline ")]
    main(markdown)
    assert "lowered from" not in capsys.readouterr().out


def test_the_code_locations_decision_and_baseline_step_read_and_keep_the_history(tmp_path, capsys):
    """The Dagster shell without Dagster's runtime: `golden_evaluation` reads the entries, evaluates with
    `compare_baseline`, stores `decision_value` of the report; `baseline` ratchets with `ratchet_entry`
    inside a `locked_update`."""
    from ragspine_pipeline.contracts.columns import load_gold, load_traces
    from ragspine_pipeline.decision.evaluation import evaluate
    from ragspine_pipeline.defs.release import decision_value
    from ragspine_pipeline.reports.evaluation import ReportInputs, summary

    gold_path = golden_set(tmp_path)
    path = write_baseline(
        tmp_path / "baseline.json", {"golden": {"metrics": {"numeric_accuracy": 1.0}, "run": "a"}}
    )
    assert set_value(capsys, path, "numeric_accuracy", "0.5", "known gap")[0] == 0
    entries = baselines.load_baseline(path, KNOWN_METRICS)
    gold, trace = load_gold(gold_path).table, load_traces(traces(tmp_path, right=2)).table
    config = EvalConfig()
    evaluation = evaluate(
        gold,
        trace,
        gates=default_gates_for(gold, trace),
        config=config,
        run_id="dagster-run",
        baseline=entries["golden"],
        compare_baseline=True,
    )
    decision = decision_value(evaluation, summary(evaluation, ReportInputs(gold_path, "traces")), config)
    [warning] = [w for w in decision.warnings if w.startswith("baseline ")]
    assert warning.startswith("baseline numeric_accuracy lowered from 1.0 to 0.5 by alice at ")

    figures = BaselineFigures.from_dict(decision.baseline_figures)
    baselines.locked_update(
        path, "golden", KNOWN_METRICS, lambda old: ratchet_entry(figures, None, old, config, "dagster-run")
    )
    entry = json.loads(path.read_text())["golden"]
    assert entry["run"] == "dagster-run" and entry["metrics"]["numeric_accuracy"] == 2 / 3
    assert [c["reason"] for c in entry["history"]] == ["known gap"]


def test_an_s3_baseline_is_set_through_conditional_writes(bucket, s3_endpoint, monkeypatch, capsys):
    name, client = bucket
    client.put_object(Bucket=name, Key="release/baseline.json", Body=json.dumps(OURS).encode())
    monkeypatch.setenv("RAGSPINE_S3_ENDPOINT_URL", s3_endpoint)
    code, out, _ = set_value(capsys, f"s3://{name}/release/baseline.json", "precision", "0.85", "s3 too")
    assert code == 0 and "precision lowered from 0.9 to 0.85" in out
    entry = json.loads(client.get_object(Bucket=name, Key="release/baseline.json")["Body"].read())["golden"]
    assert entry["metrics"]["precision"] == 0.85 and entry["history"][0]["reason"] == "s3 too"


def test_a_ragspine_baseline_keeps_its_shape_and_names(tmp_path, capsys):
    entry = {"metrics": {"numeric_accuracy": 1.0, "faithfulness": 1.0}, "fabrication_count": 0, "n_cases": 41}
    path = tmp_path / "qa_baseline.json"
    path.write_text(
        json.dumps({"tool": entry, "agent": entry}, ensure_ascii=False, indent=2), encoding="utf-8"
    )
    # RAGSpine's runs have no evidence registry: its ``faithfulness`` is the narrative gate.
    code, out, _ = set_value(
        capsys, path, "faithfulness", "0.75", "narrative docs rewritten", "--mode", "tool"
    )
    assert code == 0 and "baseline narrative_faithfulness lowered from 1.0 to 0.75" in out
    written = json.loads(path.read_text())
    assert list(written) == ["tool", "agent"] and written["agent"] == entry
    tool = written["tool"]
    assert tool["metrics"] == {"numeric_accuracy": 1.0, "faithfulness": 0.75}
    assert (tool["fabrication_count"], tool["n_cases"]) == (0, 41)
    [change] = tool["ragspine_pipeline"]["history"]
    assert (change["metric"], change["from"], change["to"]) == ("faithfulness", 1.0, 0.75)
    assert not path.read_text().endswith("\n")  # as RAGSpine's writer leaves it


def test_the_help_names_the_default_mode_and_the_handler_exists(capsys):
    with pytest.raises(SystemExit):
        main(["baseline", "set", "--help"])
    assert f"(default: {baselines.DEFAULT_MODE})" in " ".join(capsys.readouterr().out.split())
    args = ["baseline", "set", "--baseline", "b", "--metric", "m", "--to", "1", "--reason", "r"]
    module, function = build_parser().parse_args(args).run.split(":")
    assert callable(getattr(__import__(module, fromlist=[function]), function))


CHANGE = {
    "metric": "precision",
    "from": 0.9,
    "to": 0.8,
    "by": "alice",
    "at": "2026-01-02T03:04:05Z",
    "reason": "r",
}


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ({"metric": "precision"}, "'history' must be a list of changes, got object"),
        ([{**CHANGE, "who": "x"}], "history change 1: unknown key 'who'"),
        ([{k: v for k, v in CHANGE.items() if k != "reason"}], "history change 1: missing key 'reason'"),
        ([{**CHANGE, "to": "0.8"}], "history change 1: 'to' must be a finite number"),
        (
            [{**CHANGE, "metric": "fabrication_count", "from": 0, "to": 1.5}],
            "history change 1: 'to' must be a non-negative whole number",
        ),
        ([{**CHANGE, "by": ""}], "history change 1: 'by' must be a non-empty string"),
        ([{**CHANGE, "at": "yesterday"}], "history change 1: 'at' must be a UTC time"),
        ([CHANGE, {**CHANGE, "metric": "nope"}], "history change 2: unknown metric 'nope'"),
    ],
)
def test_a_broken_history_is_one_line_naming_the_file_mode_and_change(tmp_path, capsys, history, message):
    path = write_baseline(tmp_path / "baseline.json", {"golden": {**OURS["golden"], "history": history}})
    code, _, err = set_value(capsys, path, "precision", "0.5")
    assert code == 2 and err.count("\n") == 1 and f"{path}: mode 'golden': {message}" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "'ragspine_pipeline' must be an object, got array"),
        ({"note": 1}, "'ragspine_pipeline': unknown key 'note'"),
        ({"run": "x"}, "'run' is given both in the entry and in 'ragspine_pipeline'"),
        (
            {"metrics": {"numeric_accuracy": 0.5}},
            "metric 'numeric_accuracy' is given both in 'metrics' and in",
        ),
    ],
)
def test_the_extra_key_holds_only_this_pipelines_fields_once(tmp_path, capsys, extra, message):
    entry = {"metrics": {"numeric_accuracy": 1.0}, "run": "r1", "ragspine_pipeline": extra}
    path = write_baseline(tmp_path / "baseline.json", {"tool": entry})
    code, _, err = set_value(capsys, path, "numeric_accuracy", "0.5", "r", "--mode", "tool")
    assert code == 2 and err.count("\n") == 1 and message in err


def test_control_characters_in_who_or_why_are_refused_and_escaped_where_a_file_holds_them(
    tmp_path, capsys, monkeypatch
):
    """A terminal escape in --reason or in the person's name is refused in one line, the file untouched;
    a history written by hand with one is echoed escaped by every later decision (terminal and Markdown),
    never raw."""
    gold = golden_set(tmp_path)
    path = write_baseline(
        tmp_path / "baseline.json",
        {"golden": {"metrics": {"numeric_accuracy": 1.0}, "fabrication_count": 0, "run": "seed"}},
    )
    before = path.read_text()
    code, _, err = set_value(capsys, path, "numeric_accuracy", "0.6", "restated\x1b[2J\x07")
    assert code == 2 and "one line of printable text" in err and path.read_text() == before
    monkeypatch.setenv("RAGSPINE_ACTOR", "mallory\x1b]0;owned\x07")
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    code, _, err = set_value(capsys, path, "numeric_accuracy", "0.6")
    assert code == 2 and "set RAGSPINE_ACTOR" in err and path.read_text() == before

    monkeypatch.setenv("RAGSPINE_ACTOR", "alice")
    assert set_value(capsys, path, "numeric_accuracy", "0.6")[0] == 0
    document = json.loads(path.read_text())
    document["golden"]["history"][0]["by"] = "mallory\x1b[31m"  # edited by hand
    document["golden"]["history"][0]["reason"] = "fine\x1b[2J"
    path.write_text(json.dumps(document))
    code, report, err = score(capsys, gold, traces(tmp_path, right=2), "--baseline", str(path))
    said = [w for w in report["warnings"] if w.startswith("baseline ")]
    assert said and "\x1b" not in err + json.dumps(said, ensure_ascii=False)
    assert "by mallory\\x1b[31m at " in said[0] and said[0].endswith(": fine\\x1b[2J")
    main(["score", "--gold", gold, "--trace", traces(tmp_path, right=2), "--baseline", str(path),
          "--format", "markdown"])  # fmt: skip
    assert "\x1b" not in capsys.readouterr().out

"""A team's own refusal phrases and patterns, and gold snippets too short to ever match: through
`ragspine-eval score` with a gates config, as a user runs it."""

from __future__ import annotations

import json

from ragspine_pipeline.cli import main
from ragspine_pipeline.scoring.refusal import normalise

GOLD = [
    {
        "qid": "q1",
        "question": "Parental leave?",
        "answerable": True,
        "gold_claim_substr": ["16 weeks"],
        "gold_citations": ["c1"],
    },
    {"qid": "q2", "question": "Mars colony policy?", "answerable": False},
    {
        "qid": "q3",
        "question": "Quota?",
        "answerable": True,
        "gold_claim_substr": ["2 GB", "5%"],
        "gold_citations": ["c3"],
    },
    {"qid": "q4", "question": "Moon base?", "answerable": False},
]
TRACES = [
    {
        "qid": "q1",
        "answer_json": {"claim": "Employees get 16 weeks.", "citations": ["c1"]},
        "retrieved_ids": ["c1"],
    },
    {
        "qid": "q2",
        "answer_json": {"claim": "I'm   SORRY, I don't know.", "citations": []},
        "retrieved_ids": [],
    },
    {
        "qid": "q3",
        "answer_json": {"claim": "The quota is 2 GB.", "citations": ["c3"]},
        "retrieved_ids": ["c3"],
    },
    {
        "qid": "q4",
        "answer_json": {"claim": "Unfortunately I cannot find that.", "citations": []},
        "retrieved_ids": [],
    },
]


def score(tmp_path, config: str | None) -> dict:
    gold, traces = tmp_path / "gold.jsonl", tmp_path / "traces.jsonl"
    gold.write_text("".join(json.dumps(row) + "\n" for row in GOLD))
    traces.write_text("".join(json.dumps(row) + "\n" for row in TRACES))
    argv = ["score", "--gold", str(gold), "--trace", str(traces), "--out", str(tmp_path / "report.json")]
    if config is not None:
        (tmp_path / "gates.yaml").write_text(config)
        argv += ["--config", str(tmp_path / "gates.yaml")]
    main(argv)
    return json.loads((tmp_path / "report.json").read_text())


def labels(report: dict) -> dict[str, str]:
    return {case["qid"]: case["label"] for case in report["cases"]}


def test_by_default_only_not_in_context_is_a_refusal(tmp_path):
    assert labels(score(tmp_path, None))["q2"] == "HALLUCINATION"


def test_a_configured_phrase_and_pattern_are_refusals(tmp_path):
    config = 'refusals:\n  phrases: ["I\'m sorry, I don\'t know."]\n  patterns: ["\\\\bcannot find\\\\b"]\n'
    report = score(tmp_path, config)
    assert labels(report)["q2"] == "REFUSAL_OK" and labels(report)["q4"] == "REFUSAL_OK"
    assert report["refused"] == 2 and report["under_refusal"] == 0.0


def test_an_unusable_pattern_is_one_line(tmp_path, capsys):
    (tmp_path / "gates.yaml").write_text("refusals:\n  patterns: ['(unclosed']\n")
    (tmp_path / "gold.jsonl").write_text(json.dumps(GOLD[0]) + "\n")
    argv = ["score", "--gold", str(tmp_path / "gold.jsonl"), "--trace", str(tmp_path / "gold.jsonl")]
    assert main([*argv, "--config", str(tmp_path / "gates.yaml")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "gates.yaml" in line and "'(unclosed' is not a regular expression" in line


def test_a_case_whose_snippets_are_all_too_short_is_named(tmp_path):
    report = score(tmp_path, None)
    [warning] = [w for w in report["warnings"] if "snippets shorter" in w]
    assert warning.startswith("1 gold case(s) have only snippets shorter than 5 characters")
    assert ": q3 (" in warning
    assert report["precision"] == 0.25  # 1 of 4 shipped: q3's "2 GB" is in its answer, but too short to count
    relaxed = score(tmp_path, "min_snippet_chars: 3\n")
    assert not [w for w in relaxed["warnings"] if "snippets shorter" in w]
    assert relaxed["precision"] == 0.5


def test_normalising_case_folds_and_collapses_whitespace():
    assert normalise("  STRASSE\t und\n  Straße ") == "strasse und strasse"

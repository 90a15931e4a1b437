"""A golden set whose cases carry tags, scored without an evidence registry: the reports show the cases
by tag (the right-outcome rate per tag value, worst first, with its interval and the grounded flags),
said to be ungated, instead of "No slices"; the verdict does not change."""

from __future__ import annotations

import json
from pathlib import Path

from ragspine_pipeline.cli import main
from ragspine_pipeline.reports.html import render_html
from ragspine_pipeline.reports.slice_report import slice_markdown
from tests.test_your_service_doc import TEMPLATE_GOLD, answers

REFUSALS = "refusals: {phrases: [\"I'm sorry, I don't know.\"]}\n"


def _files(tmp_path: Path, worse: bool) -> tuple[Path, Path]:
    gold = tmp_path / "gold.jsonl"
    gold.write_text(TEMPLATE_GOLD.read_text().replace("{{SERVICE_PREFIX}}", "SUPPORT-BOT"))
    traces = tmp_path / "traces.jsonl"
    rows = [{"qid": qid, **trace} for qid, trace in answers(worse=worse).items()]
    traces.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "gates.yaml").write_text(REFUSALS)  # the stand-in's refusal, as the template says it
    return gold, traces


def score(tmp_path: Path, gold: Path, traces: Path, *more: str) -> int:
    """`ragspine-eval score` of the files with the stand-in's refusal phrase (its exit code)."""
    config = str(tmp_path / "gates.yaml")
    return main(["score", "--gold", str(gold), "--trace", str(traces), "--config", config, *more])


def test_tags_without_an_evidence_registry_are_slices_that_no_gate_judges(tmp_path, capsys):
    gold, traces = _files(tmp_path, worse=True)  # SUPPORT-BOT-001 (topic hr) lost its citation
    topics = {
        json.loads(line)["qid"]: json.loads(line)["tags"]["topic"] for line in gold.read_text().splitlines()
    }
    out = tmp_path / "report.json"
    assert score(tmp_path, gold, traces, "--out", str(out)) == 1
    report = json.loads(out.read_text())
    assert "slices" not in report and report["release"]["failed_slices"] == []
    hr = report["tag_slices"]["topic"]["hr"]
    n_hr = sum(topic == "hr" for topic in topics.values())
    assert topics["SUPPORT-BOT-001"] == "hr" and hr["n"] == n_hr and hr["right"] == n_hr - 1
    assert hr["right_rate"] == round((n_hr - 1) / n_hr, 4)
    low, high = hr["right_ci95"]
    assert 0 <= low < hr["right_rate"] < high <= 1
    assert hr["citation_hit_n"] == hr["n"] and hr["citation_hit"] == hr["right_rate"]
    for value, entry in report["tag_slices"]["topic"].items():
        if value != "hr":
            assert entry["right"] == entry["n"]  # the other topics lost nothing

    markdown = slice_markdown(report, [], None, None)
    assert "## Slices by tag (not gated, worst first)" in markdown and "No slices" not in markdown
    first_row = next(line for line in markdown.splitlines() if line.startswith("| topic="))
    assert first_row.startswith("| topic=hr |")  # worst first
    page = render_html(report)
    assert "Slices by tag (not gated)" in page and "Right outcome per topic" in page
    assert "No slices" not in page

    assert score(tmp_path, gold, traces, "--format", "markdown") == 1
    assert "## Slices by tag (not gated, worst first)" in capsys.readouterr().out


def test_a_golden_set_without_tags_says_so(tmp_path):
    gold, traces = _files(tmp_path, worse=False)
    gold.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "tags"}) + "\n"
            for line in gold.read_text().splitlines()
        )
    )
    out = tmp_path / "report.json"
    assert score(tmp_path, gold, traces, "--out", str(out)) == 0
    report = json.loads(out.read_text())
    assert "tag_slices" not in report
    assert "No slices: the golden cases carry no tags." in slice_markdown(report, [], None, None)

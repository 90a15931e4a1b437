"""`ragspine-eval check-traces`: per field how many traces carry it, which metrics the file measures and
which it leaves n/a with what they need; exit 2 for a file no metric can use."""

from __future__ import annotations

import json
from pathlib import Path

from ragspine_pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]
WFGY = ROOT / "examples/wfgy"
LAYERED = ROOT / "examples/layered"


def test_against_a_golden_set_it_counts_fields_and_names_the_na_metrics(capsys):
    assert main(["check-traces", str(WFGY / "traces.jsonl"), "--gold", str(WFGY / "gold.jsonl")]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("  ")}
    assert lines["citations"] == ["15", "75%"] and lines["retrieved_ids"] == ["20", "100%"]
    assert lines["selected_context_ids"] == ["0", "0%"]
    assert "  precision = 0.9333 over 15" in out
    assert "  claim_containment: some answerable case has a gold claim" in out
    assert "  context_recall: an evidence registry (--evidence)" in out


def test_with_an_evidence_registry_the_layered_metrics_are_measured(capsys):
    argv = ["check-traces", str(LAYERED / "traces.jsonl"), "--gold", str(LAYERED / "gold.jsonl")]
    assert main([*argv, "--evidence", str(LAYERED / "evidence.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "  context_recall = " in out and "an evidence registry (--evidence)" not in out


def test_without_a_golden_set_the_nightly_metrics_are_listed(capsys):
    assert main(["check-traces", str(WFGY / "traces.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "  refusal_rate = 0.25 over 20" in out and "  latency_p95_ms: some trace has a latency" in out


def test_a_file_no_metric_can_use_exits_2_with_one_line(tmp_path, capsys):
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"qid": "HR-001", "latency_ms": 12}) + "\n")
    assert main(["check-traces", str(bare)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ragspine-eval: {bare}: no metric can use this file: no trace carries an answer, citations, "
        "retrieved or selected ids, or a refusal flag"
    )
    assert main(["check-traces", str(LAYERED / "traces.jsonl"), "--gold", str(WFGY / "gold.jsonl")]) == 2
    assert "no trace answers a case of the golden set" in capsys.readouterr().err


def test_a_zero_that_a_missing_field_makes_says_so_in_check_traces_and_in_score(tmp_path, capsys):
    """Traces with no retrieved ids: precision, chr and recall@k are 0 because a citation hit needs the
    cited ids among the retrieved ones; both commands say which field no trace carries."""
    rows = [json.loads(line) for line in (WFGY / "traces.jsonl").read_text().splitlines()]
    traces = tmp_path / "no-retrieval.jsonl"
    traces.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "retrieved_ids"}) + "\n" for r in rows)
    )
    gold = str(WFGY / "gold.jsonl")
    assert main(["check-traces", str(traces), "--gold", gold]) == 0
    out = capsys.readouterr().out
    why = f"(needs retrieved_ids: 0 of {len(rows)} traces carry them)"
    assert f"  chr = 0 over 15 {why}" in out and f"  recall@k = 0 over 16 {why}" in out
    assert "  compliance = 1 over 20\n" in out  # a value its fields are there for says nothing more
    assert main(["score", "--gold", gold, "--trace", str(traces), "--out", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert f"warning: chr = 0 needs retrieved_ids: 0 of {len(rows)} traces carry them" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert any(w.startswith("chr = 0 needs retrieved_ids") for w in report["warnings"])


def test_a_service_whose_citations_are_its_retrieved_sources_says_so_and_recall_is_not_measured(
    tmp_path, capsys
):
    """The same traces, the gates config saying `citations_are_retrieved: true` (the service returns only
    the sources it used): chr and precision are measured on the citations alone, as if the retrieved
    ids were given, with no "needs retrieved_ids"; recall@k is not measured, saying why, and a gate on
    it fails as unmeasured (not a 0, not a 1.0)."""
    rows = [json.loads(line) for line in (WFGY / "traces.jsonl").read_text().splitlines()]
    bare = tmp_path / "no-retrieval.jsonl"
    bare.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "retrieved_ids"}) + "\n" for r in rows)
    )
    gold = str(WFGY / "gold.jsonl")
    config = tmp_path / "gates.yaml"
    config.write_text("citations_are_retrieved: true\ngates:\n  chr: {min: 0.5}\n  recall@k: {min: 0.5}\n")
    # What retrieval must have returned for these citations: the citations themselves.
    assumed = tmp_path / "retrieved-are-cited.jsonl"
    assumed.write_text(
        "".join(
            json.dumps({**r, "retrieved_ids": (r.get("answer_json") or {}).get("citations") or []}) + "\n"
            for r in rows
        )
    )
    expected = tmp_path / "expected.json"
    assert main(["score", "--gold", gold, "--trace", str(assumed), "--out", str(expected)]) in (0, 1)
    figures = json.loads(expected.read_text())
    capsys.readouterr()

    assert main(["check-traces", str(bare), "--gold", gold, "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"  chr = {figures['chr']:.4g} over 15\n" in out and "needs retrieved_ids" not in out
    assert "  recall@k: citations_are_retrieved: the traces list only the sources the answer used" in out
    report = tmp_path / "r.json"
    code = main(
        ["score", "--gold", gold, "--trace", str(bare), "--config", str(config), "--out", str(report)]
    )
    decision = json.loads(report.read_text())
    assert (
        code == 1 and decision["chr"] == figures["chr"] > 0 and decision["precision"] == figures["precision"]
    )
    assert decision["recall@k"] is None and decision["unmeasured"]["recall@k"].startswith(
        "citations_are_retrieved: the traces list only the sources the answer used"
    )
    assert "recall@k" not in decision["not_applicable"]
    [recall] = decision["release"]["unmeasured_gates"]
    assert recall["metric"] == "recall@k" and recall["reason"] == decision["unmeasured"]["recall@k"]
    assert not [w for w in decision["warnings"] if "needs retrieved_ids" in w]


def test_the_nightly_rates_leave_out_the_retrieved_citation_rate_when_citations_are_all_it_says(
    tmp_path, capsys
):
    """Without a golden set check-traces lists the nightly rates: with `citations_are_retrieved: true`
    the retrieved-citation rate is not one of them (n/a, saying why), and the night's summary, the one
    the nightly job and `production backfill` write, has no such rate to test."""
    from ragspine_pipeline.contracts.columns import load_traces
    from ragspine_pipeline.sources.production_nights import night_summary

    rows = [json.loads(line) for line in (WFGY / "traces.jsonl").read_text().splitlines()]
    bare = tmp_path / "no-retrieval.jsonl"
    bare.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "retrieved_ids"}) + "\n" for r in rows)
    )
    config = tmp_path / "gates.yaml"
    config.write_text("citations_are_retrieved: true\n")
    assert main(["check-traces", str(bare)]) == 0
    assert "  retrieved_citation_rate = 0 over " in capsys.readouterr().out  # the 0 it would report
    assert main(["check-traces", str(bare), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "retrieved_citation_rate =" not in out
    assert "  retrieved_citation_rate: citations_are_retrieved: the traces list only the sources" in out
    traces = load_traces(bare).table
    assert "retrieved_citation_rate" in night_summary("2026-11-28", traces, None, ())["metrics"]
    summary = night_summary("2026-11-28", traces, None, (), citations_are_retrieved=True)
    assert "retrieved_citation_rate" not in summary["metrics"] and "refusal_rate" in summary["metrics"]
    for values in (summary.get("slices") or {}).values():
        for entry in values.values():
            assert "retrieved_citation_rate" not in entry["metrics"]


def test_a_metric_is_said_once_measured_or_not_applicable_never_both(tmp_path, capsys):
    """Traces with contexts measure lexical_faithfulness without a registry: it is listed as measured,
    and not also as needing an evidence registry (it was both); the admissible rate still needs one."""
    rows = [json.loads(line) for line in (WFGY / "traces.jsonl").read_text().splitlines()]
    path = tmp_path / "with-contexts.jsonl"
    path.write_text(
        "".join(
            json.dumps({**r, "contexts": [{"id": "c1", "text": "parental leave is 16 weeks"}]}) + "\n"
            for r in rows
        )
    )
    assert main(["check-traces", str(path)]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines() if "lexical_faithfulness" in line] == [
        "lexical_faithfulness"
    ]
    assert "  lexical_faithfulness = " in out and "lexical_faithfulness: an evidence registry" not in out
    assert "  production_admissible_rate: an evidence registry (--evidence)" in out

"""The HTML report of a shipping and of a blocked demo run, built through the functions the assets call.

No Dagster: ``ragspine-eval demo init`` writes the demo, the reference engine answers the golden set as
``golden_traces`` does, ``evaluate`` and ``summary`` score it as ``golden_evaluation`` does, the daily
production summaries are ``scoring.production`` over each demo day, the extraction result is what
``ragspine-eval extraction`` computes, and the page and the Markdown are ``render_html`` and
``slice_markdown``, as ``slice_report`` calls them. ``demo rebuild-index --degraded`` (what
``make demo-regression`` publishes) turns the next run into a blocked one; ``--degraded-parser`` (what
``make demo-extraction-regression`` publishes) gives a shipping run with two failed extraction channels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.contracts.extraction import load_facts, load_truth
from ragspine_pipeline.decision import extraction_baseline, golden
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, evaluate
from ragspine_pipeline.decision.run_gates import default_gates_for
from ragspine_pipeline.demo.reference_engine import ReferenceEngine
from ragspine_pipeline.reports.evaluation import ReportInputs, summary
from ragspine_pipeline.reports.extraction import ExtractionResult
from ragspine_pipeline.reports.html import history_entry, render_html
from ragspine_pipeline.reports.slice_report import slice_markdown
from ragspine_pipeline.scoring.production import production_metrics
from ragspine_pipeline.sources.replay import replay

TODAY = "2026-11-25"
TRACES_PER_DAY = 200  # the demo's size: the tables are as wide as a real night makes them
DAY_SECONDS = 86_400.0
FIRST_RUN = 1_795_000_000.0  # a fixed clock: the pages are the same on every run
MODE = "golden"  # the baseline mode of the demo's runs


@dataclass(frozen=True)
class DemoPages:
    shipping_html: str
    blocked_html: str
    shipping_markdown: str
    blocked_markdown: str
    shipping: dict
    blocked: dict
    production: list[dict]
    extraction: dict
    # the parser regression: the release ships, two extraction channels fall below their thresholds
    parser_html: str
    parser_markdown: str
    parser: dict
    parser_extraction: dict


def build_demo_pages(root: Path) -> DemoPages:
    demo = root / "demo"
    argv = ["demo", "init", "--root", str(demo), "--today", TODAY, "--traces-per-day", str(TRACES_PER_DAY)]
    assert main(argv) == 0
    evidence = load_evidence(str(demo / "evidence.jsonl")).table
    days = sorted(path.name.removeprefix("dt=") for path in (demo / "traces").glob("dt=*"))
    production = [_production_day(demo, root / "sample", day, evidence) for day in days]
    extraction = _extraction(demo)
    shipping = _golden_run(demo, root / "ship", "run-ship", evidence)
    assert main(["demo", "rebuild-index", "--root", str(demo), "--degraded"]) == 0
    blocked = _golden_run(demo, root / "block", "run-block", evidence)
    assert main(["demo", "rebuild-index", "--root", str(demo), "--degraded-parser"]) == 0
    parser, parser_extraction = _golden_run(demo, root / "parser", "run-parser", evidence), _extraction(demo)
    history = [
        history_entry(report, timestamp=FIRST_RUN + i * DAY_SECONDS, mode=MODE)
        for i, report in enumerate((shipping, blocked, parser))
    ]

    def page(report: dict, runs: list[dict], channels: dict = extraction) -> str:
        return render_html(
            report,
            history=runs,
            production=production,
            extraction=channels,
            title="ragspine release evaluation",
            mode=MODE,
        )

    def markdown(report: dict, runs: list[dict], channels: dict = extraction) -> str:
        return slice_markdown(report, production, channels, history=runs, mode=MODE)

    return DemoPages(
        shipping_html=page(shipping, history[:1]),
        blocked_html=page(blocked, history[:2]),
        shipping_markdown=markdown(shipping, history[:1]),
        blocked_markdown=markdown(blocked, history[:2]),
        shipping=shipping,
        blocked=blocked,
        production=production,
        extraction=extraction,
        parser_html=page(parser, history, parser_extraction),
        parser_markdown=markdown(parser, history, parser_extraction),
        parser=parser,
        parser_extraction=parser_extraction,
    )


def _golden_run(demo: Path, work: Path, run_id: str, evidence) -> dict:
    """``golden_traces`` and ``golden_evaluation`` of one run, as the JSON summary the report reads."""
    work.mkdir(parents=True)
    gold_path = demo / "golden" / "gold.jsonl"
    gold = load_gold(str(gold_path)).table
    engine = ReferenceEngine.from_manifest(demo / "index" / "manifest.json")
    questions = zip(*(gold.column(c).to_pylist() for c in ("qid", "question", "reference_date")), strict=True)

    def answer(qid: str, question: str, reference_date: str | None) -> dict:
        return engine.answer(qid, question, reference_date=reference_date)

    replayed = replay(questions, answer, out=work / "traces.jsonl", quarantine=work / "quarantine.jsonl")
    traces = load_traces(str(replayed.traces_path)).table
    config = load_config(demo / "gates.yaml", KNOWN_METRICS)
    evaluation = evaluate(
        gold,
        traces,
        gates=config.gate_list(KNOWN_METRICS) or default_gates_for(gold, traces),
        config=config,
        run_id=run_id,
        evidence=evidence,
        lock=golden.verify(gold_path).lock,
    )
    inputs = ReportInputs(str(gold_path), str(replayed.traces_path), str(demo / "evidence.jsonl"))
    report = json.loads(json.dumps(summary(evaluation, inputs)))  # what the JSON report holds
    report.pop("cases", None)  # as slice_report reads it
    return report


def _production_day(demo: Path, work: Path, day: str, evidence) -> dict:
    """The day's seeded sample (``ragspine-eval sample``: malformed lines quarantined, as
    ``production_traces`` does) scored as ``production_metrics`` scores it."""
    sample = work / f"{day}.jsonl"
    argv = ["sample", "--source", str(demo / "traces"), "--date", day, "--n", str(TRACES_PER_DAY)]
    argv += ["--seed", "7", "--out", str(sample), "--quarantine", str(work / f"{day}.quarantine.jsonl")]
    work.mkdir(exist_ok=True)
    assert main(argv) == 0
    traces = load_traces(str(sample)).table
    required = load_config(demo / "gates.yaml", KNOWN_METRICS).required_versions
    return {"day": day, **production_metrics(traces, evidence, required_versions=required).to_dict()}


def _extraction(demo: Path) -> dict:
    folder = demo / "extraction"
    thresholds = extraction_baseline.parse_thresholds((folder / "baseline.json").read_text(), "baseline")
    facts, truth = load_facts(str(folder / "facts.jsonl")), load_truth(str(folder / "truth.json"))
    return ExtractionResult.evaluate(facts, truth, thresholds, str(folder / "baseline.json")).to_dict()

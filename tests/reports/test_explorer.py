"""The case explorer of a demo run: one entry per case, flips exactly where a case's verdict changed since
the baseline run, the page embedding the very bytes of ``cases.json``, and no answer able to break out of
the page's data. The demo is ``ragspine-eval demo init`` answered by its reference engine, as
``golden_traces`` answers it; a second run blanks a few answers."""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision.baseline import BaselineEntry
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, Evaluation, evaluate
from ragspine_pipeline.decision.run_gates import default_gates_for
from ragspine_pipeline.demo.reference_engine import ReferenceEngine
from ragspine_pipeline.reports.evaluation import ReportInputs, write_json
from ragspine_pipeline.reports.explorer import (
    CHANGED,
    BaselineCases,
    baseline_cases,
    case_verdicts,
    explorer_document,
    explorer_json,
    render_explorer,
)
from ragspine_pipeline.reports.metric_table import metric_table
from ragspine_pipeline.sources.objects import ObjectFolder
from ragspine_pipeline.sources.replay import replay
from tests.conftest import load_factor

TODAY = "2026-11-25"
BLANKED = ("ACC-01", "ACC-02", "INC-01")  # answered and releasable in the demo, until their answer is blanked


@dataclass(frozen=True)
class Run:
    evaluation: Evaluation
    traces: pa.Table
    trace_path: Path

    def report_cases(self) -> list[dict]:
        """The ``cases`` of the run's ``evaluation.json``, as the next run reads them back."""
        out = io.StringIO()
        write_json(self.evaluation, ReportInputs("gold.jsonl", str(self.trace_path)), out)
        return json.loads(out.getvalue())["cases"]


@dataclass(frozen=True)
class Demo:
    root: Path
    gold: pa.Table
    evidence: pa.Table
    before: Run  # the demo as its reference engine answers it
    after: Run  # the same answers, BLANKED ones emptied

    def document(self, run: Run, baseline: BaselineCases) -> dict:
        return explorer_document(
            run.evaluation, self.gold, run.traces, metric_table(run.evaluation), baseline
        )


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    root = tmp_path_factory.mktemp("explorer-demo")
    assert main(["demo", "init", "--root", str(root), "--today", TODAY, "--traces-per-day", "5"]) == 0
    gold = load_gold(str(root / "golden" / "gold.jsonl")).table
    engine = ReferenceEngine.from_manifest(root / "index" / "manifest.json")
    questions = zip(*(gold.column(c).to_pylist() for c in ("qid", "question", "reference_date")), strict=True)
    replay(
        questions,
        lambda qid, question, day: engine.answer(qid, question, reference_date=day),
        out=root / "before.jsonl",
        quarantine=root / "quarantine.jsonl",
    )
    records = [json.loads(line) for line in (root / "before.jsonl").read_text().splitlines()]
    for record in records:
        if record["qid"] in BLANKED:
            record["answer"] = {"claim": "", "citations": [], "claims": []}
    (root / "after.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    evidence = load_evidence(str(root / "evidence.jsonl")).table
    before, after = (_run(root, gold, evidence, name) for name in ("before", "after"))
    return Demo(root, gold, evidence, before, after)


def _run(root: Path, gold: pa.Table, evidence: pa.Table | None, name: str) -> Run:
    path = root / f"{name}.jsonl"
    traces = load_traces(str(path)).table
    config = load_config(root / "gates.yaml", KNOWN_METRICS)
    evaluation = evaluate(
        gold,
        traces,
        gates=config.gate_list(KNOWN_METRICS) or default_gates_for(gold, traces),
        config=config,
        run_id=f"run-{name}",
        evidence=evidence,
    )
    return Run(evaluation, traces, path)


def _flips(document: dict) -> dict[str, str]:
    return {case["qid"]: case["flip"] for case in document["cases"]}


# -- the document ----------------------------------------------------------------------------------


def test_one_entry_per_case_in_qid_order_with_what_the_service_answered(demo):
    document = demo.document(demo.before, BaselineCases())
    qids = [case["qid"] for case in document["cases"]]
    assert qids == sorted(demo.gold.column("qid").to_pylist())
    assert document["counts"]["cases"] == len(qids) == 84
    case = next(c for c in document["cases"] if c["qid"] == "ACC-02")
    trace = next(json.loads(line) for line in demo.before.trace_path.open() if '"ACC-02"' in line)
    assert case["answer"] == trace["answer"]["claim"]
    assert case["cited_ids"] == trace["answer"]["citations"]
    gold = next(row for row in demo.gold.to_pylist() if row["qid"] == "ACC-02")
    assert case["expected_ids"] == gold["gold_citations"] and gold["gold_citations"]  # beside the answer
    assert case["expected_phrases"] == gold["gold_claim_substr"]
    assert case["verdict"] == "pass" and case["tags"]["workflow"] == "access-requests"
    assert case["metrics"]["releasable"] == 1.0
    assert set(case["metrics"]) == set(document["metrics"])  # every metric, null where it does not apply
    assert None in case["metrics"].values()


def test_flips_are_exactly_the_cases_whose_verdict_changed(demo):
    before, after = case_verdicts(demo.before.report_cases()), case_verdicts(demo.after.report_cases())
    changed = {qid for qid in before if before[qid] != after[qid]}
    assert changed == set(BLANKED)

    worse = demo.document(demo.after, BaselineCases("run-before", before, "run report"))
    assert {qid for qid, flip in _flips(worse).items() if flip in CHANGED} == changed
    assert {qid for qid, flip in _flips(worse).items() if flip == "pass→fail"} == changed
    assert worse["counts"]["changed"] == worse["counts"]["pass→fail"] == len(changed)
    assert worse["counts"]["same"] == 84 - len(changed)

    better = demo.document(demo.before, BaselineCases("run-after", after, "run report"))
    assert {qid for qid, flip in _flips(better).items() if flip == "fail→pass"} == changed
    assert better["baseline"] == {"run_id": "run-after", "source": "run report", "cases": 84}


def test_a_case_the_baseline_run_did_not_have_is_new(demo):
    before = case_verdicts(demo.before.report_cases())
    del before["INC-02"]
    before["RETIRED-01"] = True
    document = demo.document(demo.after, BaselineCases("run-before", before, "run report"))
    assert [qid for qid, flip in _flips(document).items() if flip == "new"] == ["INC-02"]
    assert document["counts"]["new"] == 1
    assert document["counts"]["removed"] == 1


def test_without_a_baseline_run_every_flip_says_so(demo):
    document = demo.document(demo.after, BaselineCases())
    assert set(_flips(document).values()) == {"no baseline"}
    assert document["counts"]["changed"] == 0
    assert document["baseline"] == {"run_id": None, "source": None, "cases": None}
    assert "No baseline run" in render_explorer(document)


def test_the_verdict_rule_is_the_paired_tests_with_and_without_an_evidence_registry(demo):
    for run in (demo.before, demo.after):
        assert case_verdicts(run.report_cases()) == run.evaluation.case_outcomes
    grounded_only = _run(demo.root, demo.gold, None, "after")
    assert "releasable" not in grounded_only.report_cases()[0]
    assert case_verdicts(grounded_only.report_cases()) == grounded_only.evaluation.case_outcomes


def test_contexts_come_from_the_trace_when_it_carries_them(demo):
    traces = demo.before.traces
    at = traces.schema.get_field_index("context_ids")
    ids = pa.array([["doc#1", "doc#2"]] * traces.num_rows, traces.schema.field(at).type)
    texts = pa.array([["first passage", "second passage"]] * traces.num_rows, ids.type)
    traces = traces.set_column(at, "context_ids", ids)
    traces = traces.set_column(traces.schema.get_field_index("context_texts"), "context_texts", texts)
    evaluation = demo.before.evaluation
    document = explorer_document(evaluation, demo.gold, traces, metric_table(evaluation), BaselineCases())
    assert document["cases"][0]["contexts"] == [
        {"id": "doc#1", "text": "first passage"},
        {"id": "doc#2", "text": "second passage"},
    ]
    assert demo.document(demo.before, BaselineCases())["cases"][0]["contexts"] is None  # the demo has none


def test_personal_data_in_an_answer_is_redacted_like_the_reports_quotes(demo):
    traces = demo.before.traces
    claim = pc.if_else(
        pc.equal(traces.column("qid"), "ACC-02"), "Write to jane.doe@example.com", traces.column("claim")
    )
    traces = traces.set_column(traces.schema.get_field_index("claim"), "claim", claim)
    evaluation = demo.before.evaluation
    document = explorer_document(evaluation, demo.gold, traces, metric_table(evaluation), BaselineCases())
    answer = next(c["answer"] for c in document["cases"] if c["qid"] == "ACC-02")
    assert answer == "Write to [EMAIL]"


def test_the_document_is_the_same_on_every_build(demo):
    baseline = BaselineCases("run-before", case_verdicts(demo.before.report_cases()), "run report")
    first, second = (explorer_json(demo.document(demo.after, baseline)) for _ in range(2))
    assert first == second


# -- the baseline run ------------------------------------------------------------------------------


def test_the_baseline_runs_verdicts_come_from_its_report_else_from_its_entry(demo, tmp_path):
    reports = ObjectFolder(tmp_path / "reports")
    out = io.StringIO()
    write_json(demo.before.evaluation, ReportInputs("gold.jsonl", "traces.jsonl"), out)
    reports.child("runs", "run-before").write_text("evaluation.json", out.getvalue(), "report")
    recorded = {"ACC-01": False}

    from_report = baseline_cases(BaselineEntry(metrics={}, run="run-before", cases=recorded), reports)
    assert from_report == BaselineCases("run-before", case_verdicts(demo.before.report_cases()), "run report")

    gone = BaselineEntry(metrics={}, run="run-gone", cases=recorded)
    assert baseline_cases(gone, reports) == BaselineCases("run-gone", recorded, "baseline entry")
    reports.child("runs", "run-broken").write_text("evaluation.json", "{not json", "report")
    broken = BaselineEntry(metrics={}, run="run-broken", cases=recorded)
    assert baseline_cases(broken, reports).source == "baseline entry"

    assert baseline_cases(BaselineEntry(metrics={}, run="run-gone"), reports) == BaselineCases("run-gone")
    assert baseline_cases(None, reports) == BaselineCases()


# -- the page --------------------------------------------------------------------------------------


class _Scripts(HTMLParser):
    """Every <script> of a page as (attributes, text), split where an HTML parser splits them."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict, str]] = []
        self._open: tuple[dict, list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self._open = (dict(attrs), [])

    def handle_data(self, data):
        if self._open is not None:
            self._open[1].append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._open is not None:
            self.scripts.append((self._open[0], "".join(self._open[1])))
            self._open = None


def _embedded(page: str) -> tuple[str, int]:
    parser = _Scripts()
    parser.feed(page)
    data = [text for attrs, text in parser.scripts if attrs.get("id") == "cases-data"]
    assert len(data) == 1
    return data[0], len(parser.scripts)


def test_the_page_embeds_the_bytes_of_cases_json(demo):
    baseline = BaselineCases("run-before", case_verdicts(demo.before.report_cases()), "run report")
    document = demo.document(demo.after, baseline)
    page = render_explorer(document)
    embedded, scripts = _embedded(page)
    assert embedded == explorer_json(document)
    assert json.loads(embedded) == document
    assert scripts == 2  # the data and the page's own script
    for fact in ("run-after", "BLOCK" if document["run"]["decision"] == "block" else "SHIP", "run-before"):
        assert fact in page
    for stable in ('id="filter-flip"', 'value="changed"', 'id="filter-verdict"', 'id="filter-slice"',
                   'id="filter-stage"', 'id="search"', 'id="match-count"'):  # fmt: skip
        assert stable in page
    assert 'name="viewport"' in page and "http://" not in page and "https://" not in page


def test_an_answer_cannot_end_the_data_script(demo):
    hostile = "</script><script>alert(1)</script><!--<script> </SCRIPT> & <b>bold</b>"
    traces = demo.before.traces
    claim = pc.if_else(pc.equal(traces.column("qid"), "ACC-02"), hostile, traces.column("claim"))
    traces = traces.set_column(traces.schema.get_field_index("claim"), "claim", claim)
    evaluation = demo.before.evaluation
    document = explorer_document(evaluation, demo.gold, traces, metric_table(evaluation), BaselineCases())
    embedded, scripts = _embedded(render_explorer(document))
    assert scripts == 2
    assert "</" not in embedded and "<!--" not in embedded
    answer = next(c["answer"] for c in json.loads(embedded)["cases"] if c["qid"] == "ACC-02")
    assert answer == hostile


def test_ten_thousand_cases_render_quickly_and_the_page_does_not_grow_per_case(demo):
    copies = 120  # 84 demo cases each: 10,080 cases

    def tiled(table: pa.Table) -> pa.Table:
        at = table.schema.get_field_index("qid")
        parts = [
            table.set_column(at, "qid", pc.binary_join_element_wise(table.column("qid"), f"-{n:03d}", ""))
            for n in range(copies)
        ]
        return pa.concat_tables(parts).cast(table.schema)

    gold, traces = tiled(demo.gold), tiled(demo.before.traces)
    config = load_config(demo.root / "gates.yaml", KNOWN_METRICS)
    gates = default_gates_for(gold, traces)
    evaluation = evaluate(gold, traces, gates=gates, config=config, run_id="big", evidence=demo.evidence)
    passed = dict.fromkeys(gold.column("qid").to_pylist(), True)
    baseline = BaselineCases("run-before", passed, "run report")
    started = time.perf_counter()
    document = explorer_document(evaluation, gold, traces, metric_table(evaluation), baseline)
    page = render_explorer(document)
    elapsed = time.perf_counter() - started
    assert document["counts"]["cases"] == 10_080
    assert elapsed < 10 * load_factor(), f"{elapsed:.2f} s"
    data = explorer_json(document)
    assert len(page) - len(data) < 64_000  # the markup is the same for 84 cases or 10,080: rows are drawn
    assert len(page.encode()) < 2_000 * 10_080  # about 1 kB a case


# -- the command -----------------------------------------------------------------------------------


def test_score_writes_the_page_with_flips_against_the_baseline_entrys_cases(demo, tmp_path):
    before = case_verdicts(demo.before.report_cases())
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"golden": {"metrics": {}, "run": "run-before", "cases": before}}))
    page = tmp_path / "cases.html"
    argv = ["score", "--gold", str(demo.root / "golden" / "gold.jsonl")]
    argv += ["--trace", str(demo.after.trace_path)]
    argv += ["--evidence", str(demo.root / "evidence.jsonl"), "--config", str(demo.root / "gates.yaml")]
    argv += ["--baseline", str(baseline), "--out", str(tmp_path / "report.json"), "--explorer", str(page)]
    assert main(argv) in (0, 1)
    document = json.loads(_embedded(page.read_text("utf-8"))[0])
    assert document["baseline"] == {"run_id": "run-before", "source": "baseline entry", "cases": 84}
    assert {qid for qid, flip in _flips(document).items() if flip in CHANGED} == set(BLANKED)

    assert main([*argv[:-6], "--out", str(tmp_path / "report.json"), "--explorer", str(page)]) in (0, 1)
    assert set(_flips(json.loads(_embedded(page.read_text("utf-8"))[0])).values()) == {"no baseline"}

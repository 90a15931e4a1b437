"""The standalone HTML report: charts in named figures, highlighted failures, escaping, no NaN, purity."""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision import golden
from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, evaluate
from ragspine_pipeline.decision.gates import default_gates
from ragspine_pipeline.reports.charts import FAIL_BACKGROUND, coord, domain, finite, ticks
from ragspine_pipeline.reports.evaluation import ReportInputs, summary
from ragspine_pipeline.reports.html import history_entry, render_html

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "layered"
RUN_ID = "20261122T041903Z-0a1b2c3d"
XSS = "<script>alert(1)</script>"


# -- building real reports -------------------------------------------------------------------------


def _report(gold: Path, traces: Path, evidence: Path | None, config: Path | None) -> dict:
    """What ``ragspine-eval score --format json`` prints, without the per-case rows."""
    cfg = load_config(str(config), KNOWN_METRICS) if config else EvalConfig()
    lock = golden.verify(gold).lock if golden.read_lock(gold) is not None else None
    evaluation = evaluate(
        load_gold(str(gold)).table,
        load_traces(str(traces)).table,
        gates=(cfg.gate_list(KNOWN_METRICS) if config else None) or default_gates(),
        config=cfg,
        run_id=RUN_ID,
        evidence=load_evidence(str(evidence)).table if evidence else None,
        lock=lock,
    )
    inputs = ReportInputs(str(gold), str(traces), str(evidence) if evidence else None)
    return json.loads(json.dumps(summary(evaluation, inputs)))  # exactly what a reader of the JSON sees


@pytest.fixture(scope="module")
def shipped() -> dict:
    return _report(
        EXAMPLE / "gold.jsonl", EXAMPLE / "traces.jsonl", EXAMPLE / "evidence.jsonl", EXAMPLE / "gates.yaml"
    )


@pytest.fixture(scope="module")
def blocked(tmp_path_factory) -> dict:
    """The example with a restricted chunk leaked into ACC-01 and a second tag dimension (``audience``)."""
    tmp = tmp_path_factory.mktemp("blocked")
    gold = [json.loads(line) for line in (EXAMPLE / "gold.jsonl").read_text().splitlines() if line.strip()]
    for i, case in enumerate(gold):
        case["tags"] = {**case["tags"], "audience": "staff" if i % 2 else "contractor"}
    traces = [
        json.loads(line) for line in (EXAMPLE / "traces.jsonl").read_text().splitlines() if line.strip()
    ]
    for trace in traces:
        if trace["case_id"] == "ACC-01":
            trace["first_stage_ids"].append("hr-salary#1")
    (tmp / "gold.jsonl").write_text("".join(json.dumps(c) + "\n" for c in gold))
    (tmp / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    return _report(
        tmp / "gold.jsonl", tmp / "traces.jsonl", EXAMPLE / "evidence.jsonl", EXAMPLE / "gates.yaml"
    )


def _history(n: int, report: dict | None = None, golden_version: str | None = None) -> list[dict]:
    """``n`` past runs (and ``report``'s run after them) on ``report``'s golden set, else on
    ``golden_version``."""
    if report is not None:
        golden_version = report["release"].get("golden_version")
    runs = [
        {
            "run_id": f"2026111{i}T041903Z-{i:08x}",
            "timestamp": 1_763_000_000.0 + 86_400 * i,
            "index_version": f"ix-2026-11-{10 + i:02d}",
            "golden_version": golden_version,
            "decision": "block" if i % 3 == 0 else "ship",
            "metrics": {
                "releasable_rate": 0.8 + 0.02 * i,
                "precision": 0.9,
                "claim_faithfulness": 0.95 - 0.01 * i,
            },
        }
        for i in range(n)
    ]
    if report is not None:
        runs.append(history_entry(report, timestamp=1_763_000_000.0 + 86_400 * n))
    return runs


def _golden(report: dict) -> str:
    return report["release"]["golden_version"]


def _rate(value: float, n: int) -> dict:
    return {"value": value, "n": n, "low": max(0.0, value - 0.03), "high": min(1.0, value + 0.03)}


def _production(days: int) -> list[dict]:
    return [
        {
            "day": f"2026-11-{14 + d:02d}",
            "n": 400 + d,
            "metrics": {
                "refusal_rate": _rate(0.06, 400),
                "production_compliance": _rate(0.98, 400),
                "production_fabrication": {
                    "value": d % 2,
                    "n": 30,
                    "rate": (d % 2) / 30,
                    "low": 0.0,
                    "high": 0.1,
                },
                "latency_p50_ms": {"value": 400.0 + d, "n": 400},
                "latency_p95_ms": {"value": 1200.0, "n": 400},
            },
            "slices": {"workflow": {"access": {"n": 100, "metrics": {"refusal_rate": _rate(0.05, 100)}}}},
        }
        for d in range(days)
    ]


# -- a tiny DOM over html.parser -------------------------------------------------------------------

_VOID = {"meta", "br", "wbr", "link", "img", "input", "hr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    parts: list[Node | str] = field(default_factory=list)  # children and text, in document order

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """Every descendant (depth first) with this tag and these attribute values."""
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and all(child.attrs.get(k) == v for k, v in attrs.items()):
                found.append(child)
            found += child.all(tag, **attrs)
        return found

    def content(self) -> str:
        return "".join(part if isinstance(part, str) else part.content() for part in self.parts)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        if tag in _VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].parts.append(data)


def parse(page: str) -> Node:
    builder = _Builder()
    builder.feed(page)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


def figures(root: Node) -> dict[str, Node]:
    return {f.attrs["data-chart"]: f for f in root.all("figure") if "data-chart" in f.attrs}


def notes(root: Node) -> set[str]:
    return {p.attrs["data-note"] for p in root.all("p") if "data-note" in p.attrs}


def table_rows(root: Node) -> list[Node]:
    return [row for row in root.all("tr") if row.all("td")]


# -- structure -------------------------------------------------------------------------------------


def test_every_chart_is_an_svg_with_a_title_inside_its_named_figure(shipped):
    root = parse(render_html(shipped, history=_history(5, shipped), production=_production(7)))
    found = figures(root)
    assert set(found) == {
        "gates",
        "slices-workflow",
        "stages",
        "trend",
        "production-trend",
        "production-latency",
    }
    for name, figure in found.items():
        wide, narrow = figure.all("svg")  # one drawing for a wide window, one for a phone
        assert (wide.attrs["class"], narrow.attrs["class"]) == ("chart wide", "chart narrow"), name
        for svg in (wide, narrow):
            assert svg.children[0].tag == "title" and svg.children[0].content().strip(), name
        assert figure.all("figcaption")


def test_header_shows_decision_versions_run_and_a_generated_time_from_the_data(shipped):
    history = _history(2, shipped)
    root = parse(render_html(shipped, history=history))
    (badge,) = [s for s in root.all("span") if "badge" in s.attrs.get("class", "")]
    assert badge.content() == "SHIP" and badge.attrs["data-decision"] == "ship"
    facts = {dt.content(): dd.content() for dt, dd in zip(root.all("dt"), root.all("dd"), strict=True)}
    assert facts["index version"] == "ix-2026-11-20"
    release = shipped["release"]
    assert facts["golden set"] == f"{release['golden_version']} (sha256 {release['golden_sha256'][:12]}…)"
    assert facts["run id"] == RUN_ID
    assert facts["generated"] == "2025-11-15 02:13:20 UTC"  # this run's history timestamp
    without = parse(render_html(shipped))  # no history: the time the run id starts with
    facts = {dt.content(): dd.content() for dt, dd in zip(without.all("dt"), without.all("dd"), strict=True)}
    assert facts["generated"].startswith("2026-11-22 04:19:03 UTC")


def test_one_slice_chart_per_tag_dimension(blocked):
    root = parse(render_html(blocked))
    assert set(blocked["slices"]) == {"audience", "workflow"}
    slice_charts = {name for name in figures(root) if name.startswith("slices-")}
    assert slice_charts == {f"slices-{dimension}" for dimension in blocked["slices"]}
    for name in slice_charts:
        svg = figures(root)[name].all("svg")[0]
        assert any("n = " in text.content() for text in svg.all("text"))  # every row shows its n
        assert svg.all("line", **{"stroke-dasharray": "5 3"})  # the slice gate line


def test_a_failing_slice_is_highlighted_in_chart_and_table(blocked):
    failed = {(s["dimension"], s["value"]) for s in blocked["release"]["failed_slices"]}
    assert ("workflow", "access") in failed and blocked["release"]["decision"] == "block"
    root = parse(render_html(blocked))
    svg = figures(root)["slices-workflow"].all("svg")[0]
    rows = {g.all("text")[0].content(): g for g in svg.all("g")}
    assert rows["access"].all("rect", fill=FAIL_BACKGROUND)
    assert "fail" in rows["access"].all("text")[0].attrs["class"]
    assert not rows["expenses"].all("rect", fill=FAIL_BACKGROUND)
    assert next(iter(rows)) == "access"  # worst first
    by_slice = {str(row.all("td")[0].parts[0]): row for row in table_rows(root)}
    assert by_slice["access"].attrs["class"] == "fail" and by_slice["expenses"].attrs["class"] == "pass"
    assert by_slice["access"].all("td")[0].content() == "accessblocks the release"  # said, not only red
    assert by_slice["expenses"].all("td")[0].content() == "expenses"
    reasons = root.all("ul", **{"class": "reasons"})[0].content()
    assert "slice workflow=access: releasable 75.0% of 4" in reasons


def test_a_blocked_release_says_why_first_and_names_its_worst_cases(blocked, shipped):
    page = render_html(blocked)
    root = parse(page)
    why = root.all("p", **{"class": "why"})[0].content()
    assert why == "Why: 1 of 14 cases fails first at admissibility (1 restricted)."
    (worst,) = root.all("ol", **{"class": "worst"})[0].all("li")
    assert worst.content() == "ACC-01 (admissibility: restricted) — What does production access require?"
    assert page.index('class="why"') < page.index('class="reasons"')  # the cause before the symptoms
    assert not parse(render_html(shipped)).all("p", **{"class": "why"})


def test_the_slice_gate_line_comes_from_the_report_or_is_said_to_be_assumed(shipped, blocked):
    def rule(report: dict, **kwargs) -> str:
        root = parse(render_html(report, **kwargs))
        return next(p for p in root.all("p") if p.attrs.get("data-note") == "slice-gate").content()

    assert "at least 1 case(s) below 95% blocks the release" in rule(blocked)  # the decision's slice gate
    assert "at least 1 case(s) below 95% blocks the release" in rule(shipped)
    older = {**shipped, "release": {k: v for k, v in shipped["release"].items() if k != "slice_gate"}}
    assert "does not state its slice gate; the line is drawn at 90%" in rule(older, slice_gate=0.9)
    with_gate = {**older, "slice_gate": {"min_rate": 0.8, "min_n": 3}}
    assert "at least 3 case(s) below 80% blocks" in rule(with_gate)


def test_failed_gates_come_first_in_chart_and_table():
    report = {
        "gates": [
            {"metric": "precision", "op": ">=", "threshold": 0.8, "value": 0.9, "pass": True},
            {"metric": "under_refusal", "op": "<=", "threshold": 0.05, "value": 0.2, "pass": False},
            {"metric": "point_coverage", "op": ">=", "threshold": 0.8, "value": 0.7, "pass": False,
             "severity": "soft"},
        ],
        "release": {"decision": "block", "failed_gates": [], "failed_slices": [], "run_id": "r1",
                    "regressions": [{"metric": "chr", "baseline": 0.9, "current": 0.85, "delta": -0.05}]},
    }  # fmt: skip
    root = parse(render_html(report))
    gates = figures(root)["gates"]
    labels = [g.all("text")[0].content() for g in gates.all("svg")[0].all("g")]
    assert labels == ["under_refusal", "point_coverage", "precision"]
    rows = table_rows(root)
    assert [(r.all("td")[0].content(), r.attrs["class"]) for r in rows[:3]] == [
        ("under_refusal", "fail"),
        ("point_coverage", "warn"),
        ("precision", "pass"),
    ]
    assert ("chr", "fail") in [(r.all("td")[0].content(), r.attrs["class"]) for r in rows]  # the regression


def test_stage_histogram_chart_has_one_bar_row_per_stage(blocked):
    root = parse(render_html(blocked))
    svg = figures(root)["stages"].all("svg")[0]
    labels = [g.all("text")[0].content() for g in svg.all("g")]
    assert labels == list(blocked["first_failed_stage_histogram"])
    admissibility = svg.all("g")[0]
    assert admissibility.all("rect", fill=FAIL_BACKGROUND) and "1 (" in admissibility.content()


def test_trend_needs_two_runs_otherwise_a_note(shipped):
    for n in (0, 1):
        root = parse(render_html(shipped, history=_history(n, golden_version=_golden(shipped))))
        assert "trend" not in figures(root) and "trend" in notes(root)
    root = parse(render_html(shipped, history=_history(1, shipped)))
    trend = figures(root)["trend"].all("svg")[0]
    assert "trend" not in notes(root)
    polylines = trend.all("polyline")
    assert len(polylines) == 3  # releasable_rate, precision, claim_faithfulness: only the metrics present
    assert len(polylines[0].attrs["points"].split()) == 2
    assert {c.attrs["fill"] for c in trend.all("circle")} >= {"#1a7f37", "#cf222e"}  # decision colours


def test_a_missing_history_value_breaks_the_line_and_reads_n_a(shipped):
    history = _history(4, golden_version=_golden(shipped))
    history[1]["metrics"]["precision"] = None
    history[2]["metrics"]["precision"] = float("nan")
    root = parse(render_html(shipped, history=history))
    trend = figures(root)["trend"].all("svg")[0]
    circles = [c for c in trend.all("circle") if c.content().startswith("precision")]
    assert len(circles) == 2  # the two real values only
    cells = [
        row.all("td")[5].content()
        for row in table_rows(root)
        if row.all("td")[0].content().startswith("2026")
    ]
    assert cells == ["0.9000", "n/a", "n/a", "0.9000"]


def test_production_section_only_when_given(shipped):
    without = parse(render_html(shipped, history=_history(3)))
    assert not without.all("section", id="production")
    assert not {"production-trend", "production-latency"} & set(figures(without))
    root = parse(render_html(shipped, production=_production(7)))
    (section,) = root.all("section", id="production")
    trend = figures(root)["production-trend"].all("svg")[0]
    assert trend.all("polygon")  # interval bands
    assert len(figures(root)["production-latency"].all("svg")[0].all("polyline")) == 2  # p50 and p95
    rows = {row.all("td")[0].content(): row for row in table_rows(section)}
    assert "workflow=access" in rows and "all traffic" in rows
    assert "2026-11-20" in section.all("h3")[0].content()  # the latest day's slices


def test_production_with_one_day_and_missing_metrics_skips_what_is_absent(shipped):
    day = {
        "day": "2026-11-20",
        "n": 10,
        "metrics": {"refusal_rate": _rate(0.1, 10), "production_compliance": None},
    }
    root = parse(render_html(shipped, production=[day]))
    trend = figures(root)["production-trend"].all("svg")[0]
    assert [c.content().split(" at ")[0] for c in trend.all("circle")] == ["refusal_rate"]
    assert trend.all("line", stroke="#0072B2")  # a lone day gets a whisker instead of a band
    assert "production-latency" not in figures(root) and "production-latency" in notes(root)


def test_a_report_without_layered_evaluation_still_renders(tmp_path):
    report = _report(EXAMPLE / "gold.jsonl", EXAMPLE / "traces.jsonl", None, None)
    root = parse(render_html(report))
    # Without an evidence registry the tags still slice the cases, ungated (a chart per tag dimension).
    dimensions = {
        dim for line in (EXAMPLE / "gold.jsonl").read_text().splitlines() for dim in json.loads(line)["tags"]
    }
    assert dimensions and set(figures(root)) == {"gates", *(f"slices-{d}" for d in dimensions)}
    assert {"slice-gate", "stages", "trend"} <= notes(root)


# -- safety ----------------------------------------------------------------------------------------


def test_every_text_from_the_data_is_escaped(blocked):
    report = copy.deepcopy(blocked)
    report["release"]["run_id"] = XSS
    report["release"]["index_version"] = XSS
    report["gates"][0]["metric"] = XSS
    report["slices"][XSS] = report["slices"].pop("workflow")
    report["slices"][XSS][XSS] = report["slices"][XSS].pop("access")
    report["warnings"] = [XSS]
    report["release"]["causes"]["worst_cases"][0].update(qid=XSS, question=XSS)
    history = _history(3)
    history[0]["run_id"] = history[1]["index_version"] = XSS
    production = _production(2)
    production[-1]["slices"] = {XSS: {XSS: {"n": 1, "metrics": {}}}}
    page = render_html(report, history=history, production=production, title=XSS)
    assert "<script" not in page.lower()
    root = parse(page)
    assert not root.all("script")
    assert f"slices-{XSS}" in figures(root)
    assert XSS in root.all("title")[0].content() and XSS in root.content()
    assert root.all("ol", **{"class": "worst"})[0].content() == f"{XSS} (admissibility: restricted) — {XSS}"


def test_no_nan_or_infinity_anywhere(shipped):
    history = _history(4)
    history[0]["metrics"] = {"releasable_rate": float("nan"), "precision": float("inf")}
    history[1]["timestamp"] = float("nan")
    production = _production(3)
    production[0]["metrics"]["refusal_rate"] = {"value": float("nan"), "low": float("-inf"), "high": 0.5}
    production[1]["metrics"]["latency_p95_ms"] = {"value": float("inf"), "n": 3}
    report = copy.deepcopy(shipped)
    report["gates"][0]["value"] = float("nan")
    page = render_html(report, history=history, production=production)
    assert not re.search(r"nan|inf(?!o)", page, re.IGNORECASE), "NaN or inf leaked into the page"
    numeric = re.compile(r"-?\d+(?:\.\d+)?")
    for svg in parse(page).all("svg"):
        for node in [svg, *svg.all()]:
            for name in ("x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height", "points"):
                if name in node.attrs:
                    values = node.attrs[name].replace(",", " ").split()
                    assert values and all(numeric.fullmatch(v) for v in values), (node.tag, name)
    assert "n/a" in page


def test_standalone_deterministic_and_pure(shipped):
    kwargs = {"history": _history(5, shipped), "production": _production(7)}
    before = copy.deepcopy(shipped)
    page = render_html(shipped, **kwargs)
    assert page == render_html(copy.deepcopy(shipped), **copy.deepcopy(kwargs))
    assert shipped == before  # the report is not modified
    assert page.startswith("<!DOCTYPE html>")
    for fetch in ("<link", "<script", "<img", "<iframe", "src=", "@import", "url("):
        assert fetch not in page
    assert set(re.findall(r"https?://[^\s\"']+", page)) == {"http://www.w3.org/2000/svg"}  # a namespace only


# -- chart primitives ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, True, "0.5", float("nan"), float("inf"), -math.inf])
def test_finite_rejects_what_cannot_be_plotted(value):
    assert finite(value) is None


def test_coordinates_refuse_non_finite_values():
    assert coord(12.34) == "12.3"
    with pytest.raises(ValueError):
        coord(float("nan"))


def test_axis_domain_and_ticks_are_round():
    assert ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert ticks(0.0, 12.0, integer=True) == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert domain([380.0, 1380.0], 0.0, None) == (0.0, 1500.0)
    assert domain([None], 0.0, 0.0) == (0.0, 1.0)  # never an empty range


# -- not applicable --------------------------------------------------------------------------------


def test_a_metric_with_no_applicable_case_reads_n_a_never_0(tmp_path):
    """A RAGSpine golden set has no gold claim: claim_containment applies to no case (denominator 0)."""
    gold = [
        {"id": "num-1", "question": "HK revenue FY2025?", "case_type": "numeric",
         "expected": {"clarification": "none", "refuse": False, "value": 1702.0, "unit": "USD_M",
                      "source": {"doc": "deck.pptx", "locator": "slide=5"}}},
        {"id": "ref-1", "question": "Revenue in 2030?", "case_type": "refusal",
         "expected": {"clarification": "none", "refuse": True}},
    ]  # fmt: skip
    traces = [
        {"qid": "num-1", "answer": {"claim": "1702 USD_M [deck.pptx]"},
         "outcome": {"found_value": 1702, "found_unit": "USD_M",
                     "found_source": {"doc": "deck.pptx", "locator": "slide=5"}}},
        {"qid": "ref-1", "answer": {"claim": "not in context"}, "outcome": {"refused": True}},
    ]  # fmt: skip
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps(row) + "\n" for row in gold))
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(row) + "\n" for row in traces))
    config = tmp_path / "gates.yaml"
    config.write_text("gates:\n  claim_containment: {min: 0.5}\n  numeric_accuracy: {min: 1.0}\n")
    report = _report(tmp_path / "gold.jsonl", tmp_path / "traces.jsonl", None, config)
    assert report["release"]["decision"] == "ship" and "claim_containment" in report["not_applicable"]

    root = parse(render_html(report))
    gate, figure_row = (
        [td.content() for td in row.all("td")]
        for row in table_rows(root)
        if row.all("td")[0].content() == "claim_containment"
    )
    assert gate == ["claim_containment", "≥ 0.5000", "n/a (0 cases)", "n/a", "hard", "n/a: does not block"]
    assert figure_row == ["claim_containment", "n/a", "0"]
    assert "gates-not-applicable" in notes(root)
    titles = [t.content() for t in figures(root)["gates"].all("title")]
    assert "claim_containment: n/a · applies to no case" in titles
    assert history_entry(report, timestamp=0.0)["metrics"]["claim_containment"] is None

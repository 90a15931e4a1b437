"""The QA-gate and extraction-channel sections of the HTML report: present only with their data, charts in
named figures, n/a for what applies to no case, failures flagged and listed, every data text escaped."""

from __future__ import annotations

import copy
import json
import re

import pytest

from ragspine_pipeline.reports.charts import FAIL_BACKGROUND, INK
from ragspine_pipeline.reports.html import render_html
from tests.reports.test_html import XSS, Node, _report, figures, notes, parse, table_rows

SOURCE = {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5,table=1,row=2,col=3"}
GATES = ("numeric_accuracy", "citation_validity", "refusal_appropriateness", "clarification_appropriateness")


def _case(case_id: str, case_type: str, expected: dict, workflow: str) -> dict:
    return {
        "id": case_id,
        "question": f"question {case_id}",
        "case_type": case_type,
        "expected": {"clarification": "none", "refuse": False, **expected},
        "tags": {"workflow": workflow},
    }


@pytest.fixture(scope="module")
def qa_report(tmp_path_factory) -> dict:
    """A RAGSpine golden run: one wrong value, one missed clarification, one refusal stating a number."""
    tmp = tmp_path_factory.mktemp("qa")
    gold = [
        *(
            _case(
                f"fin-0{i}", "numeric", {"value": 1700.0 + i, "unit": "USD_M", "source": SOURCE}, "reporting"
            )
            for i in range(4)
        ),
        _case("clar-01", "clarification", {"clarification": "ask_first"}, "reporting"),
        *(_case(f"ref-0{i}", "refusal", {"refuse": True}, "forecast") for i in range(3)),
    ]
    traces = [
        {
            "qid": f"fin-0{i}",
            "answer": {"claim": f"{value} USD_M [{SOURCE['doc']}]"},
            "outcome": {"found_value": value, "found_unit": "USD_M", "found_source": SOURCE},
        }
        for i, value in enumerate([1700.0, 1701.0, 1613.0, 1703.0])
    ]
    traces.append({"qid": "clar-01", "answer": {"claim": "Revenue was high."}, "outcome": {}})
    traces += [
        {"qid": f"ref-0{i}", "answer": {"claim": claim}, "outcome": {"refused": True}}
        for i, claim in enumerate(["not in context", "about 8.18 bn in FY2030", "FY2030 is not published"])
    ]
    (tmp / "gold.jsonl").write_text("".join(json.dumps(c) + "\n" for c in gold))
    (tmp / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    return _report(tmp / "gold.jsonl", tmp / "traces.jsonl", None, None)


def _extraction(**changes) -> dict:
    result = {
        "channels": {
            "cell_value": {
                "total": 150,
                "correct": 149,
                "accuracy": 0.9933,
                "mismatches": [{"cell": "Summary!B4", "expected": 1702, "actual": 1720}],
            },
            "color_mapping": {
                "total": 150,
                "correct": 120,
                "accuracy": 0.8,
                "mismatches": [
                    {"cell": f"Summary!C{i}", "expected": {"fill": "FFC7CE"}, "actual": {"fill": "FFEB9C"}}
                    for i in range(30)
                ],
            },
            "header_attribution": {"total": 0, "correct": 0, "accuracy": 1.0, "mismatches": []},
        },
        "aligned": 150,
        "facts_only": 2,
        "truth_only": 0,
        "duplicates": 1,
        "invalid_facts": {"count": 1, "errors": ["facts.jsonl:7: field 'cell_ref': not a cell reference"]},
        "baseline": {
            "path": "extraction_thresholds.json",
            "failed": [{"channel": "color_mapping", "accuracy": 0.8, "threshold": 0.97, "delta": -0.17}],
            "unmeasured": ["header_attribution"],
        },
        "pass": False,
    }
    return {**result, **changes}


def _rows(section: Node) -> dict[str, Node]:
    """Table rows of a section by their first cell (the first table that names a row wins)."""
    rows: dict[str, Node] = {}
    for row in table_rows(section):
        rows.setdefault(row.all("td")[0].content(), row)
    return rows


def _chart_rows(root: Node, name: str) -> dict[str, Node]:
    svg = figures(root)[name].all("svg")[0]
    return {g.all("text")[0].content(): g for g in svg.all("g")}


# -- QA gates --------------------------------------------------------------------------------------


def test_qa_section_and_chart_only_when_the_report_has_qa_gates(qa_report):
    root = parse(render_html(qa_report))
    assert len(root.all("section", id="qa-gates")) == 1
    assert figures(root)["qa-gates"].all("svg")  # the chart is embedded in its named figure
    assert set(_chart_rows(root, "qa-gates")) == set(GATES)
    without = {k: v for k, v in qa_report.items() if k not in ("qa_gates", "fabrication")}
    root = parse(render_html(without))
    assert not root.all("section", id="qa-gates") and "qa-gates" not in figures(root)


def test_a_gate_that_applies_to_no_case_reads_n_a_and_is_not_plotted(qa_report):
    report = copy.deepcopy(qa_report)
    report["qa_gates"]["citation_validity"].update(total=0, passed=0, pass_rate=None, failures=[], by_tag={})
    root = parse(render_html(report))
    rows = _chart_rows(root, "qa-gates")
    assert not rows["citation_validity"].all("rect")  # no bar
    assert "n/a · applies to no case" in rows["citation_validity"].content()
    assert rows["numeric_accuracy"].all("rect") and "75.0% (3 / 4)" in rows["numeric_accuracy"].content()
    table = _rows(root.all("section", id="qa-gates")[0])
    assert table["citation_validity"].all("td")[1].content() == "n/a — applies to no case"


def test_fabrication_above_zero_is_flagged_with_its_target(qa_report):
    section = parse(render_html(qa_report)).all("section", id="qa-gates")[0]
    row = _rows(section)["fabrication"]
    assert row.attrs["class"] == "fail" and row.all("td")[1].content() == "1 (target 0)"
    assert row.all("span")[0].content() == "FAIL"
    clean = copy.deepcopy(qa_report)
    clean["fabrication"] = {"count": 0, "checked": 3, "cases": []}
    row = _rows(parse(render_html(clean)).all("section", id="qa-gates")[0])["fabrication"]
    assert row.attrs["class"] == "pass" and row.all("td")[1].content() == "0 (target 0)"


def test_failing_cases_are_listed_compactly_then_cut_at_30(qa_report):
    section = parse(render_html(qa_report)).all("section", id="qa-gates")[0]
    failures = [r for r in table_rows(section) if len(r.all("td")) == 4 and r.all("code")]
    listed = [(r.all("td")[0].content(), r.all("td")[1].content()) for r in failures]
    assert listed == [
        ("numeric_accuracy", "fin-02"),
        ("clarification_appropriateness", "clar-01"),
        ("fabrication", "ref-01"),
    ]
    assert [c.content() for c in failures[0].all("code")[1:]] == [
        "value: 1702, unit: USD_M",
        "value: 1613, unit: USD_M",
    ]
    many = copy.deepcopy(qa_report)
    many["qa_gates"]["numeric_accuracy"]["failures"] = [
        {"id": f"case-{i}", "expected": i, "actual": None} for i in range(40)
    ]
    section = parse(render_html(many)).all("section", id="qa-gates")[0]
    assert len([r for r in table_rows(section) if r.all("code")]) == 30
    more = next(p for p in section.all("p") if p.attrs.get("data-note") == "qa-gates-failures")
    assert more.content() == "… and 12 more in the JSON report."  # 40 + 2 other failures - 30


def test_a_configured_gate_draws_its_threshold_and_colours_its_row(qa_report):
    report = copy.deepcopy(qa_report)
    report["gates"].append(
        {"metric": "numeric_accuracy", "op": ">=", "threshold": 0.9, "value": 0.75, "pass": False}
    )
    root = parse(render_html(report))
    row = _chart_rows(root, "qa-gates")["numeric_accuracy"]
    assert row.all("rect", fill=FAIL_BACKGROUND) and row.all("line", stroke=INK)  # shaded, threshold tick
    assert not _chart_rows(root, "qa-gates")["refusal_appropriateness"].all("line", stroke=INK)
    table = _rows(root.all("section", id="qa-gates")[0])
    assert table["numeric_accuracy"].attrs["class"] == "fail"
    assert table["numeric_accuracy"].all("td")[3].content() == "≥ 0.9000"


def test_pass_rates_per_tag_are_a_tag_by_gate_table(qa_report):
    section = parse(render_html(qa_report)).all("section", id="qa-gates")[0]
    rows = _rows(section)
    assert {"workflow=forecast", "workflow=reporting"} <= set(rows)
    forecast = [td.content() for td in rows["workflow=forecast"].all("td")[1:]]
    assert forecast == ["n/a", "n/a", "100.0% 3 / 3", "100.0% 3 / 3"]  # gate columns in report order


def test_no_failures_and_no_applicable_gate_leave_notes_not_empty_charts():
    gates = {g: {"total": 0, "passed": 0, "pass_rate": 1.0, "failures": [], "by_tag": {}} for g in GATES}
    root = parse(render_html({"qa_gates": gates, "fabrication": {"count": 0, "checked": 0, "cases": []}}))
    assert "qa-gates" not in figures(root)
    assert {"qa-gates", "qa-gates-failures"} <= notes(root)


# -- extraction channels ---------------------------------------------------------------------------


def test_extraction_section_only_when_given(qa_report):
    assert not parse(render_html(qa_report)).all("section", id="extraction")
    root = parse(render_html(qa_report, extraction=_extraction()))
    (section,) = root.all("section", id="extraction")
    assert figures(root)["extraction"].all("svg")
    counts = section.all("p", **{"class": "counts"})[0].content()
    assert counts.startswith("150 cells aligned · 2 facts without ground truth · 0 ground-truth cells")
    assert "1 duplicate facts · 1 invalid fact lines" in counts


def test_a_failing_channel_shows_its_threshold_and_first_20_mismatches():
    root = parse(render_html({}, extraction=_extraction()))
    section = root.all("section", id="extraction")[0]
    chart = _chart_rows(root, "extraction")
    assert chart["color_mapping"].all("rect", fill=FAIL_BACKGROUND) and chart["color_mapping"].all("line")
    assert "nothing to measure" in chart["header_attribution"].content()
    assert not chart["header_attribution"].all("rect")  # total 0: not plotted
    table = _rows(section)
    assert [td.content() for td in table["color_mapping"].all("td")] == [
        "color_mapping",
        "0.8000",
        "120 / 150",
        "0.9700",
        "FAIL",
    ]
    assert table["header_attribution"].all("td")[-1].content() == "unmeasured"
    assert "Mismatches: color_mapping (30)" in [h.content() for h in section.all("h3")]
    cells = [
        r.all("td")[0].content() for r in table_rows(section) if r.all("td")[0].content().startswith("Summ")
    ]
    assert cells == [f"Summary!C{i}" for i in range(20)]  # the passing channel's mismatch is only counted
    assert {"mismatches-color_mapping", "extraction-mismatches"} <= notes(root)
    assert section.all("ul", **{"class": "reasons"})[0].content().startswith("channel color_mapping = 0.8000")


def test_without_a_baseline_no_channel_is_checked():
    root = parse(render_html({}, extraction=_extraction(baseline=None, **{"pass": True})))
    section = root.all("section", id="extraction")[0]
    assert "extraction-baseline" in notes(root)
    assert {r.all("td")[-1].content() for r in table_rows(section)[:3]} == {"not checked"}
    assert not [h for h in section.all("h3") if h.content().startswith("Mismatches")]


# -- safety ----------------------------------------------------------------------------------------


def test_every_qa_and_extraction_text_is_escaped(qa_report):
    report = copy.deepcopy(qa_report)
    gates = report["qa_gates"]
    gates[XSS] = gates.pop("numeric_accuracy")
    gates[XSS]["failures"][0].update(id=XSS, expected={XSS: XSS}, actual=[XSS])
    gates[XSS]["by_tag"] = {XSS: {XSS: {"total": 1, "passed": 0, "pass_rate": 0.0}}}
    report["fabrication"]["cases"][0].update(id=XSS, answer=XSS)
    extraction = _extraction()
    extraction["channels"][XSS] = extraction["channels"].pop("color_mapping")
    extraction["channels"][XSS]["mismatches"][0] = {"cell": XSS, "expected": XSS, "actual": {"x": XSS}}
    extraction["baseline"]["failed"][0]["channel"] = XSS
    extraction["baseline"]["path"] = XSS
    extraction["invalid_facts"]["errors"] = [XSS]
    page = render_html(report, extraction=extraction)
    assert "<script" not in page.lower()
    root = parse(page)
    assert not root.all("script")
    assert XSS in root.all("section", id="qa-gates")[0].content()
    assert root.all("section", id="extraction")[0].content().count(XSS) >= 5


def test_no_nan_in_the_new_sections(qa_report):
    report = copy.deepcopy(qa_report)
    report["qa_gates"]["numeric_accuracy"]["pass_rate"] = float("nan")
    report["qa_gates"]["numeric_accuracy"]["failures"][0]["actual"] = {"value": float("nan")}
    report["fabrication"]["count"] = float("inf")
    extraction = _extraction()
    extraction["channels"]["cell_value"]["accuracy"] = float("nan")
    extraction["baseline"]["failed"][0]["threshold"] = float("inf")
    page = render_html(report, extraction=extraction)
    assert not re.search(r"nan|inf(?!o)", page, re.IGNORECASE), "NaN or inf leaked into the page"
    assert "n/a" in page


def test_pure_and_deterministic_with_the_new_sections(qa_report):
    before, extraction = copy.deepcopy(qa_report), _extraction()
    page = render_html(qa_report, extraction=extraction)
    assert page == render_html(copy.deepcopy(qa_report), extraction=copy.deepcopy(extraction))
    assert qa_report == before and extraction == _extraction()

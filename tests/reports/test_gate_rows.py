"""Every gate row of the blocked demo's reports shows the value, the fraction and the verdict of one
metric.

The blocked demo (``make demo-regression``: the degraded index) has a layered ``claim_faithfulness`` gate
that passes and RAGSpine's narrative faithfulness at 2 of 2 cases, which no gate judges. When both were
called ``faithfulness`` the HTML's QA table showed ``faithfulness 50.0 % 2/4 ≥ 0.95 pass``: the rate of
one metric beside the verdict of another. Here each row of the page's gate table, QA table and Markdown
gate table is read back and held against the gate row of the JSON report for its metric, which
``reports.evaluation.summary`` built from one ``GateResult``.
"""

from __future__ import annotations

import re

import pytest

from tests.reports.demo_pages import DemoPages, build_demo_pages
from tests.reports.test_html import Node, parse, table_rows

# The pages of a whole demo story built through the command (init, a week of production days, three
# golden runs: build_demo_pages): the system layer.
pytestmark = pytest.mark.system

VERDICTS = {True: "pass", False: "FAIL", None: "n/a: does not block"}


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> DemoPages:
    return build_demo_pages(tmp_path_factory.mktemp("demo-pages"))


@pytest.fixture(scope="module")
def gates(pages) -> dict[str, dict]:
    report = pages.blocked
    assert report["release"]["decision"] == "block"
    return {gate["metric"]: gate for gate in report["gates"]}


def _section(page: str, name: str) -> Node:
    (section,) = parse(page).all("section", id=name)
    return section


def _cells(row: Node) -> list[str]:
    return [cell.content().strip() for cell in row.all("td")]


def _number(text: str) -> float:
    return float(re.match(r"-?[\d.]+", text).group())


def test_each_row_of_the_html_gate_table_is_one_gate_row_of_the_report(pages, gates):
    (table, *_) = _section(pages.blocked_html, "gates").all("table")
    rows = [_cells(row) for row in table_rows(table)]
    assert sorted(row[0] for row in rows) == sorted(gates)
    for metric, threshold, value, _delta, severity, verdict in rows:
        gate = gates[metric]
        soft_failure = severity == "soft" and gate["pass"] is False
        assert verdict == ("warns" if soft_failure else VERDICTS[gate["pass"]]), metric
        assert threshold.split()[0] == ("≤" if gate["op"] == "<=" else "≥"), metric
        if gate["value"] is None:
            assert value.startswith("n/a"), metric
            continue
        assert _number(value) == pytest.approx(gate["value"], abs=5e-5), metric
        if gate["numerator"] is not None:  # the fraction shown is the one the value is the ratio of
            assert value.endswith(f"({gate['numerator']} / {gate['denominator']})"), metric
            assert gate["numerator"] / gate["denominator"] == pytest.approx(gate["value"], abs=5e-5)


def test_each_row_of_the_html_qa_table_shows_the_rate_fraction_and_verdict_of_one_metric(pages, gates):
    report = pages.blocked
    table = _section(pages.blocked_html, "qa-gates").all("table")[0]
    rows = {cells[0]: cells for cells in map(_cells, table_rows(table))}
    assert set(rows) == {*report["qa_gates"], "fabrication"}
    for metric, entry in report["qa_gates"].items():
        _, rate, fraction, threshold, verdict = rows[metric]
        passed, total = (int(part) for part in fraction.split(" / "))
        assert (passed, total) == (entry["passed"], entry["total"]), metric  # the QA entry of that metric
        assert _number(rate) / 100 == pytest.approx(passed / total, abs=5e-4), metric
        gate = gates.get(metric)
        if gate is None:  # no gate judges it: no threshold, and no gate's verdict beside it
            assert threshold == "—" and verdict in ("pass", "has failures"), metric
            continue
        assert (passed, total) == (gate["numerator"], gate["denominator"]), metric
        assert _number(rate) / 100 == pytest.approx(gate["value"], abs=5e-4), metric
        assert verdict == VERDICTS[gate["pass"]], metric
        assert _number(threshold.split()[1]) == gate["threshold"], metric


def test_the_narrative_and_the_layered_faithfulness_are_two_metrics_with_two_rows(pages, gates):
    report = pages.blocked
    narrative = report["qa_gates"]["narrative_faithfulness"]
    # RAGSpine's rule: only narrative cases count, not composite ones (this test said 2 / 4 when the
    # composite FIN-14 and FIN-15 were counted); FIN-12's refusal writes no narrative answer: no claims.
    assert (narrative["passed"], narrative["total"]) == (2, 2)
    assert gates["claim_faithfulness"]["pass"] is True and "narrative_faithfulness" not in gates
    table = _section(pages.blocked_html, "qa-gates").all("table")[0]
    row = {cells[0]: cells for cells in map(_cells, table_rows(table))}["narrative_faithfulness"]
    assert row == ["narrative_faithfulness", "100.0%", "2 / 2", "—", "pass"]  # no gate's "≥ 0.9500"
    assert "faithfulness" not in {*gates, *report["qa_gates"]}


def test_each_row_of_the_markdown_gate_table_is_one_gate_row_of_the_report(pages, gates):
    text = pages.blocked_markdown
    table = text[text.index("## Gates") :].split("\n\n")[1]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    assert sorted(cells[0].strip() for cells in rows) == sorted(gates)
    for metric, _gate, value, severity, verdict in ([cell.strip() for cell in cells] for cells in rows):
        gate = gates[metric]
        if gate["pass"] is None:
            assert (value, verdict) == ("n/a (0 cases)", "n/a: does not block"), metric
            continue
        assert _number(value) == pytest.approx(gate["value"], abs=5e-5), metric
        expected = "pass" if gate["pass"] else "**FAIL**" if severity == "hard" else "warn"
        assert verdict == expected, metric

"""What the charts of the HTML report say: counts on a count axis, requirements written as requirements,
slices too small to gate marked so, named axes on every chart, one panel per production rate."""

from __future__ import annotations

import re

from ragspine_pipeline.reports.charts import WIDTH
from ragspine_pipeline.reports.html import render_html
from tests.reports.test_html import _history, _production, figures, notes, parse, table_rows

GATES = [
    {"metric": "under_refusal", "op": "<=", "threshold": 0.1, "value": 0.3846, "pass": False,
     "severity": "hard"},
    {"metric": "precision", "op": ">=", "threshold": 0.8, "value": 0.9, "pass": True, "severity": "hard"},
    {"metric": "fabrication", "op": "<=", "threshold": 0.0, "value": 2.0, "pass": False, "severity": "hard"},
]  # fmt: skip


def _report(decision: str = "block", gates: list[dict] = GATES, failed_slices: list | None = None) -> dict:
    failed = [g for g in gates if g["pass"] is False]
    return {
        "gates": gates,
        "fabrication": {"count": 2, "checked": 5, "cases": []},
        "slices": {
            "workflow": {
                "access": {"n": 12, "releasable_rate": 0.9, "releasable_ci95": [0.6, 0.98]},
                "tiny": {"n": 1, "releasable_rate": 0.0, "releasable_ci95": [0.0, 0.79]},
            }
        },
        "release": {
            "decision": decision,
            "run_id": "r-1",
            "failed_gates": [{**g, "delta": g["value"] - g["threshold"]} for g in failed],
            "failed_slices": failed_slices or [],
            "regressions": [],
            "slice_gate": {"min_rate": 0.75, "min_n": 5},
        },
    }


def _texts(svg) -> list[str]:
    return [t.content() for t in svg.all("text")]


def test_a_count_is_drawn_on_a_count_axis_never_on_the_rate_axis():
    root = parse(render_html(_report()))
    rates, counts = figures(root)["gates"].all("svg")[0], figures(root)["gates-counts"].all("svg")[0]
    assert not any(t.startswith("fabrication") for t in _texts(rates))
    assert "fabrication" in _texts(counts)
    ticks = [t.content() for t in counts.all("text") if t.attrs.get("class") == "tick"]
    assert ticks == ["0", "1", "2", "3", "4", "5"]  # whole answers, up to the 5 checked; no percent
    assert [t.content() for t in counts.all("text", **{"class": "axis x-axis"})] == ["count (answers)"]
    assert "2 (needs ≤ 0) · of 5 checked" in _texts(counts)
    gate_rows = {
        row.all("td")[0].content(): [td.content() for td in row.all("td")] for row in table_rows(root)
    }
    assert gate_rows["fabrication"][1:4] == ["≤ 0", "2", "+2"]
    reasons = root.all("ul", **{"class": "reasons"})[0].content()
    assert "gate fabrication = 2, needs ≤ 0 (Δ +2)" in reasons


def test_a_value_is_written_with_its_requirement_never_as_a_false_inequality():
    page = render_html(_report())
    assert "0.3846 (needs ≤ 0.1000)" in _texts(figures(parse(page))["gates"].all("svg")[0])
    assert "0.9000 (needs ≥ 0.8000)" in _texts(figures(parse(page))["gates"].all("svg")[0])
    assert not re.search(r"\d ≤ \d|\d ≥ \d", page)  # no "0.3846 ≤ 0.1000" anywhere


def test_a_slice_below_min_n_is_not_gated_and_the_verdict_says_only_what_holds():
    passing = [g for g in GATES if g["pass"]]
    root = parse(render_html(_report("ship", passing)))
    verdict = root.all("p", **{"data-verdict": "pass"})[0].content()
    assert verdict == "Nothing failed: 1 gate, 1 slice hold."  # the slice of 1 case is not counted
    assert "slices-not-gated" in notes(root)
    svg = figures(root)["slices-workflow"].all("svg")[0]
    rows = {g.all("text")[0].content(): g for g in svg.all("g")}
    assert "0.0% · n = 1 · not gated (n < 5)" in _texts(rows["tiny"])
    assert "90.0% · n = 12" in _texts(rows["access"])
    assert "not gated (n < 5)" in [t.content() for t in svg.all("text", **{"class": "legend"})]
    by_slice = {str(row.all("td")[0].parts[0]): row for row in table_rows(root)}
    assert by_slice["tiny"].attrs["class"] == "ungated"
    assert by_slice["tiny"].all("td")[0].content() == "tinynot gated (n < 5)"
    rule = next(p for p in root.all("p") if p.attrs.get("data-note") == "slice-gate").content()
    assert "A slice with fewer than 5 cases is not gated: shown, never blocking." in rule

    report = _report("ship", passing)
    del report["slices"]["workflow"]["tiny"]
    root = parse(render_html(report))
    assert "slices-not-gated" not in notes(root)


def test_every_chart_has_a_title_and_names_both_axes():
    page = render_html(_report(), history=_history(4), production=_production(7))
    root = parse(page)
    charts = figures(root)
    assert {"gates", "gates-counts", "slices-workflow", "trend", "production-trend"} <= set(charts)
    for name, figure in charts.items():
        for svg in figure.all("svg"):  # the wide drawing and the phone's
            assert svg.children[0].tag == "title" and svg.children[0].content().strip(), name
            for axis in ("x-axis", "y-axis"):
                (label,) = [t for t in svg.all("text") if axis in t.attrs.get("class", "").split()]
                assert label.content().strip(), (name, axis)
    latency = charts["production-latency"].all("svg")[0]
    assert [t.content() for t in latency.all("text") if "y-axis" in t.attrs["class"]] == ["latency (ms)"]


def test_production_rates_get_one_panel_each_on_a_shared_day_axis():
    production = _production(7)
    svg = figures(parse(render_html(_report(), production=production)))["production-trend"].all("svg")[0]
    panels = [t.content() for t in svg.all("text", **{"class": "panel"})]
    # one per rate the days carry
    assert panels == ["refusal_rate", "production_compliance", "production_fabrication rate"]
    assert len(svg.all("polyline")) == 3  # one line per panel, none drawn over another
    days = [t.content() for t in svg.all("text") if t.content().startswith("2026-11-")]
    assert days == [d["day"] for d in production]  # the x labels once, under the last panel
    # each panel has its own range: compliance (98 % ± 3) is not squashed onto 0–100 %
    ticks = [t.content() for t in svg.all("text", **{"class": "tick"})]
    assert "90%" in ticks and "95%" in ticks


def test_the_latest_production_day_fits_in_two_tables_with_one_latency_column():
    root = parse(render_html(_report(), production=_production(3)))
    (section,) = root.all("section", id="production")
    rates, others = section.all("table")
    assert [th.content() for th in rates.all("th")] == ["slice", "n", "refusal_rate", "production_compliance"]
    head = [th.content() for th in others.all("th")]
    assert head == ["slice", "n", "production_fabrication", "latency p50 / p95"]
    first = [td.content() for td in others.all("tr")[1].all("td")]
    assert first == ["all traffic", "402", "0 (0.0% of 30)", "402 / 1200 ms"]


def test_an_x_label_at_the_edge_stays_inside_the_chart():
    history = _history(2)
    history[-1]["index_version"] = "an-index-version-with-a-very-long-name"
    svg = figures(parse(render_html(_report(), history=history)))["trend"].all("svg")[0]
    (last,) = [t for t in svg.all("text") if t.content().startswith("an-index-version")]
    assert last.attrs["text-anchor"] == "end" and float(last.attrs["x"]) <= WIDTH


def test_the_key_metric_trend_gets_one_panel_per_metric_with_decision_fills():
    history = _history(4)
    history[-1]["metrics"]["claim_faithfulness"] = history[-1]["metrics"]["precision"] = 1.0  # would overlap
    svg = figures(parse(render_html(_report(), history=history)))["trend"].all("svg")[0]
    panels = [t.content() for t in svg.all("text", **{"class": "panel"})]
    assert panels == ["releasable_rate", "precision", "claim_faithfulness"]
    fills = [c.attrs["fill"] for c in svg.all("circle") if c.content().startswith("precision")]
    assert fills == ["#cf222e", "#1a7f37", "#1a7f37", "#cf222e"]  # runs 0 and 3 blocked

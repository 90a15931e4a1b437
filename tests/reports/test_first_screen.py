"""What a reader sees first, in the HTML page and in the Markdown: every failure of the run, whatever the
verdict, before any other section; a verdict that never claims what did not hold; the case explorer.

The three demo runs are built through the functions the assets call (:mod:`tests.reports.demo_pages`): a
shipping run, a blocked one (the degraded index) and a shipping one whose extraction channels fail (the
degraded parser).
"""

from __future__ import annotations

import copy
import re

import pytest

from ragspine_pipeline.reports.html import render_html
from ragspine_pipeline.reports.slice_report import slice_markdown
from tests.reports.demo_pages import DemoPages, build_demo_pages
from tests.reports.test_html import Node, parse

# The pages of a whole demo story built through the command (init, a week of production days, three
# golden runs: build_demo_pages): the system layer.
pytestmark = pytest.mark.system

EVERYTHING_HOLDS = re.compile(r"every (gate|slice|channel)[^.]*holds?|nothing failed", re.IGNORECASE)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> DemoPages:
    return build_demo_pages(tmp_path_factory.mktemp("first-screen"))


def first_section(page: str) -> Node:
    """The first ``<section>`` of the page (the header with the title and badge comes before it)."""
    return parse(page).all("section")[0]


def listed(section: Node, cls: str) -> list[str]:
    """The items of the section's ``ul.<cls>`` as a reader reads them (without the "details" link)."""
    lists = section.all("ul", **{"class": cls})
    return [li.content().removesuffix(" details") for ul in lists for li in ul.all("li")]


def named(section: Node, cls: str) -> set[str]:
    return {b.content() for ul in section.all("ul", **{"class": cls}) for b in ul.all("b")}


def top_of(markdown: str) -> str:
    """The Markdown before its first section after the decision."""
    return markdown[: markdown.index("## Gates")]


def test_a_shipping_report_leads_with_its_failed_extraction_channels(demo):
    assert demo.parser["release"]["decision"] == "ship"
    failed = demo.parser_extraction["baseline"]["failed"]
    channels = demo.parser_extraction["channels"]
    assert {f["channel"] for f in failed} == {"color_mapping", "header_attribution"}
    expected = [
        f"extraction channel {f['channel']}: accuracy {f['accuracy']:.4f} "
        f"({channels[f['channel']]['correct']} / {channels[f['channel']]['total']} cells), "
        f"needs ≥ {f['threshold']:.4f} (Δ {f['delta']:+.4f})"
        for f in failed
    ]

    section = first_section(demo.parser_html)
    assert section.attrs["id"] == "failed"
    assert listed(section, "soft") == expected  # they do not block, and say so by where they stand
    assert listed(section, "reasons") == []
    verdict = section.all("p")[0].content()
    assert verdict == "Ships, but 2 extraction channels failed; they do not block the release."
    assert not EVERYTHING_HOLDS.search(parse(demo.parser_html).content())

    top = top_of(demo.parser_markdown)
    assert "Ships, but 2 extraction channels failed; they do not block the release." in top
    for line in expected:
        name = line.split(":")[0].removeprefix("extraction channel ")
        assert line.replace(f" {name}:", f" **{name}**:") in top
    assert not EVERYTHING_HOLDS.search(demo.parser_markdown)


def test_a_blocked_report_lists_every_failed_gate_and_slice_first(demo):
    release = demo.blocked["release"]
    gates = {g["metric"] for g in release["failed_gates"]}
    slices = {f"{s['dimension']}={s['value']}" for s in release["failed_slices"]}
    soft = {g["metric"] for g in release["warned_gates"]}
    assert release["decision"] == "block" and len(gates) > 1 and len(slices) > 1 and soft

    section = first_section(demo.blocked_html)
    assert section.attrs["id"] == "failed"
    assert named(section, "reasons") == gates | slices
    assert named(section, "soft") == soft
    items = listed(section, "reasons")
    assert "gate fabrication = 1, needs ≤ 0 (Δ +1)" in items  # a count, with what it needed
    assert all(re.search(r"needs [≥≤]", item) for item in items)
    verdict = section.all("p")[0].content()
    assert verdict == (
        f"Blocked: {len(gates)} gates and {len(slices)} slices failed. "
        f"Also failed, without blocking it: {len(soft)} soft gate."
    )

    top = top_of(demo.blocked_markdown)
    for name in gates | slices | soft:
        assert f"**{name}**" in top, name
    assert top.index("**Why:**") < top.index("**Blocks the release:**") < top.index("**Does not block:**")


def test_a_healthy_report_says_nothing_failed_and_counts_what_holds(demo):
    report = demo.shipping
    gates = sum(g["pass"] is True for g in report["gates"])
    gated = report["release"]["slice_gate"]["min_n"]
    slices = sum(s["n"] >= gated for values in report["slices"].values() for s in values.values())
    baseline = demo.extraction["baseline"]
    channels = len(baseline["thresholds"]) - len(baseline["failed"]) - len(baseline["unmeasured"])
    expected = f"Nothing failed: {gates} gates, {slices} slices, {channels} extraction channels hold."

    section = first_section(demo.shipping_html)
    assert section.all("p")[0].content() == expected
    assert not section.all("ul", **{"class": "reasons"}) and not section.all("ul", **{"class": "soft"})
    assert expected in top_of(demo.shipping_markdown)


def test_the_case_explorer_is_linked_near_the_top(demo):
    section = first_section(demo.blocked_html)
    (link,) = [a for a in section.all("a") if a.attrs.get("data-link") == "case-explorer"]
    assert link.attrs["href"] == "case_explorer.html"  # next to the report, in runs/<id>/ and latest/
    assert "[case explorer](case_explorer.html)" in top_of(demo.blocked_markdown)
    page = render_html(demo.shipping, case_explorer=None)
    assert "case_explorer.html" not in page


def test_production_drops_and_a_failed_judge_are_listed_without_blocking(demo):
    day = copy.deepcopy(demo.production[-1])
    day["drop_tests"] = {
        "tested": 15,
        "untested": 3,
        "alerts": [
            {"metric": "refusal_rate", "slice": "workflow=oncall", "nights": 3, "current": 0.31,
             "trailing": 0.12, "trailing_days": 14, "worse_by": 0.19, "q_value": 0.004},
        ],
    }  # fmt: skip
    judge = {"models": ["judge-a"], "prompt_version": "v1", "failed": "timed out", "metrics": {}}
    production = [*demo.production[:-1], day]
    page = render_html(demo.shipping, production=production, judge=judge)
    section = first_section(page)
    assert listed(section, "soft") == [
        "production drop refusal_rate on workflow=oncall (2026-11-24): 31.0% over the last 3 night(s) "
        "vs 12.0% over the 14 before, 19.0 points worse (q = 0.004)",
        "LLM judge step failed: timed out",
    ]
    verdict = section.all("p")[0].content()
    assert (
        verdict == "Ships, but 1 production drop and 1 LLM judge step failed; they do not block the release."
    )
    markdown = slice_markdown(demo.shipping, production, judge=judge)
    assert "- production drop **refusal\\_rate**" not in markdown  # `_` inside a word is never escaped
    assert "- production drop **refusal_rate** on workflow=oncall (2026-11-24)" in top_of(markdown)


def test_the_verdict_never_says_nothing_failed_beside_a_failure():
    report = {
        "gates": [
            {"metric": "precision", "op": ">=", "threshold": 0.8, "value": 0.9, "pass": True},
            {"metric": "point_coverage", "op": ">=", "threshold": 0.8, "value": 0.7, "pass": False,
             "severity": "soft"},
        ],
        "release": {"decision": "ship", "run_id": "r-1", "failed_gates": [], "failed_slices": [],
                    "regressions": [],
                    "warned_gates": [{"metric": "point_coverage", "op": ">=", "threshold": 0.8,
                                      "value": 0.7, "delta": -0.1, "severity": "soft"}]},
    }  # fmt: skip
    section = first_section(render_html(report))
    assert section.all("p")[0].content() == "Ships, but 1 soft gate failed; it does not block the release."
    assert listed(section, "soft") == ["soft gate point_coverage = 0.7000, needs ≥ 0.8000 (Δ -0.1000)"]
    top = top_of(slice_markdown(report))
    assert "- soft gate **point_coverage** = 0.7000, needs ≥ 0.8000 (Δ -0.1000)" in top
    assert not EVERYTHING_HOLDS.search(top)

"""The HTML report in a real browser: a shipping and a blocked demo run at 1280 px, and the three demo runs
(shipping, blocked, the parser regression) on a 390 px phone, in headless Chromium.

The pages are built through the functions the ``slice_report`` asset calls (:mod:`tests.reports.demo_pages`),
loaded from files, measured with the layout Chromium computes, and photographed. What is asserted:

* nothing is wider than the window, and nothing is clipped or needs scrolling: every table, chart and
  ``pre`` fits the box it sits in, no box with ``overflow`` other than ``visible`` has hidden content,
  and no chart text runs outside its chart. The tables sit in ``.scroll`` containers as a safety net for
  narrow windows; at 1280 px none of them may have to scroll, so they are held to the same rule;
* every chart has a title and a named x and y axis;
* the blocked page shows its cause (the decision's ``causes``) before the gates and any chart;
* at 390 px the page does not scroll sideways, "What failed" starts on the first screen, and every chart
  shown is the phone drawing at about the scale it was drawn at (its text as large as drawn, give or
  take a fifth), never the wide one shrunk to a third.

It needs Chromium (Debian: ``apt-get install chromium``) and is skipped, saying so, without it. Set
``RAGSPINE_SCREENSHOT_DIR`` to keep the two full-page screenshots; otherwise they go to a temporary folder.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tests.reports.chromium import Chromium, find_chromium
from tests.reports.demo_pages import build_demo_pages

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.system,  # a browser
    pytest.mark.skipif(
        CHROMIUM is None, reason="no Chromium at /usr/bin/chromium or on PATH (apt-get install chromium)"
    ),
]
WIDTH = 1280

# Runs in the page; returns plain JSON. Sizes are CSS pixels; 1 px of slack absorbs sub-pixel rounding.
MEASURE = """
(() => {
  const name = el => {
    const figure = el.closest('figure[data-chart]'), section = el.closest('section');
    return (figure ? 'chart ' + figure.dataset.chart : el.tagName.toLowerCase())
      + ' in ' + (section ? '#' + section.id : 'the page');
  };
  const overflowing = [];
  for (const el of document.querySelectorAll('table, svg.chart, pre')) {
    const width = el.getBoundingClientRect().width, room = el.parentElement.clientWidth;
    if (width > room + 1) overflowing.push(`${name(el)}: ${width} px in ${room} px`);
  }
  for (const el of document.querySelectorAll('body *')) {
    const style = getComputedStyle(el);
    const hides = [style.overflowX, style.overflowY].some(v => v !== 'visible');
    if (hides && !(el instanceof SVGElement)
        && (el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1)) {
      overflowing.push(`${name(el)} (${el.className}): content ${el.scrollWidth} px in ${el.clientWidth} px`);
    }
  }
  const charts = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const frame = svg.getBoundingClientRect();
    const outside = [...svg.querySelectorAll('text')].filter(t => {
      const r = t.getBoundingClientRect();
      return r.width > 0 && (r.left < frame.left - 1 || r.right > frame.right + 1
        || r.top < frame.top - 1 || r.bottom > frame.bottom + 1);
    }).map(t => t.textContent);
    const axis = cls => [...svg.querySelectorAll('text.' + cls)].map(t => t.textContent.trim());
    const first = svg.firstElementChild;
    charts.push({
      name: svg.closest('figure[data-chart]').dataset.chart,
      title: first && first.tagName === 'title' ? first.textContent.trim() : '',
      x: axis('x-axis'), y: axis('y-axis'), outside,
    });
  }
  const top = sel => {
    const el = document.querySelector(sel);
    return el ? el.getBoundingClientRect().top : null;
  };
  const why = document.querySelector('p.why');
  const before = sel => { const el = document.querySelector(sel);
    return !!(why && el && (why.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING)); };
  return {
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    overflowing, charts,
    decision: document.querySelector('[data-decision]').dataset.decision,
    why: why ? why.textContent : null,
    whyTop: top('p.why'), gatesTop: top('#gates'), firstChartTop: top('svg.chart'),
    whyBeforeGates: before('#gates'), whyBeforeFirstChart: before('svg.chart'),
  };
})()
"""


PHONE = 390
# Runs in the page at phone width: what sticks out, where "What failed" starts, how each chart is drawn.
PHONE_MEASURE = """
(() => {
  const shown = [...document.querySelectorAll('svg.chart')]
    .filter(svg => svg.getBoundingClientRect().width > 0);
  return {
    scrollWidth: document.documentElement.scrollWidth,
    failedTop: document.querySelector('#failed').getBoundingClientRect().top,
    firstSection: document.querySelector('section').id,
    charts: shown.map(svg => ({
      name: svg.closest('figure[data-chart]').dataset.chart,
      variant: svg.classList.contains('narrow') ? 'narrow' : 'wide',
      scale: svg.getBoundingClientRect().width / svg.viewBox.baseVal.width,
    })),
  };
})()
"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """The demo pages as files: shipping, blocked and the parser regression."""
    root = tmp_path_factory.mktemp("browser")
    built = build_demo_pages(root / "build")
    html = {"shipping": built.shipping_html, "blocked": built.blocked_html, "parser": built.parser_html}
    for name, page in html.items():
        (root / f"{name}.html").write_text(page, encoding="utf-8")
    return {name: root / f"{name}.html" for name in html}


@pytest.fixture(scope="module")
def measured(pages, tmp_path_factory) -> dict[str, dict]:
    """Each demo page loaded at 1280 px: its measurements and its full-page screenshot."""
    root = tmp_path_factory.mktemp("screenshots")
    shots = Path(os.environ.get("RAGSPINE_SCREENSHOT_DIR") or root)
    shots.mkdir(parents=True, exist_ok=True)
    found = {}
    with Chromium(CHROMIUM) as browser:
        for name in ("shipping", "blocked"):
            page = browser.open(pages[name], WIDTH)
            found[name] = {**page.evaluate(MEASURE), "screenshot": page.screenshot(shots / f"{name}.png")}
    return found


@pytest.mark.parametrize("name", ["shipping", "blocked"])
def test_the_page_fits_1280_px_with_nothing_clipped(measured, name):
    page = measured[name]
    assert page["clientWidth"] == WIDTH
    assert page["scrollWidth"] <= page["clientWidth"], "the page scrolls sideways"
    assert page["overflowing"] == []
    assert {chart["name"]: chart["outside"] for chart in page["charts"] if chart["outside"]} == {}


@pytest.mark.parametrize("name", ["shipping", "blocked"])
def test_every_chart_has_a_title_and_named_axes(measured, name):
    charts = measured[name]["charts"]
    names = {chart["name"] for chart in charts}
    assert {"gates", "gates-counts", "qa-gates", "stages", "extraction"} <= names
    assert {"production-trend", "production-latency"} <= names
    assert any(n.startswith("slices-") for n in names)
    for chart in charts:
        assert chart["title"], chart["name"]
        assert len(chart["x"]) == 1 and chart["x"][0], chart["name"]
        assert len(chart["y"]) == 1 and chart["y"][0], chart["name"]


def test_the_blocked_page_shows_its_cause_first(measured):
    blocked, shipping = measured["blocked"], measured["shipping"]
    assert blocked["decision"] == "block" and shipping["decision"] == "ship"
    assert blocked["why"].startswith("Why: ") and "fail first at admissibility" in blocked["why"]
    assert blocked["whyBeforeGates"] and blocked["whyBeforeFirstChart"]  # in the document
    assert (
        blocked["whyTop"] < blocked["gatesTop"] and blocked["whyTop"] < blocked["firstChartTop"]
    )  # on screen
    assert shipping["why"] is None


@pytest.mark.parametrize("name", ["shipping", "blocked"])
def test_a_full_page_screenshot_is_taken(measured, name):
    png = measured[name]["screenshot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert width == WIDTH and height > 2000


@pytest.fixture(scope="module")
def phone(pages) -> dict[str, dict]:
    with Chromium(CHROMIUM) as browser:
        return {name: browser.open(path, PHONE).evaluate(PHONE_MEASURE) for name, path in pages.items()}


@pytest.mark.parametrize("name", ["shipping", "blocked", "parser"])
def test_on_a_phone_nothing_scrolls_sideways_and_what_failed_is_on_the_first_screen(phone, name):
    page = phone[name]
    assert page["scrollWidth"] <= PHONE, "the page scrolls sideways"
    assert page["firstSection"] == "failed" and page["failedTop"] < 200  # right under the title


@pytest.mark.parametrize("name", ["shipping", "blocked", "parser"])
def test_on_a_phone_every_chart_is_the_narrow_drawing_at_about_its_drawn_size(phone, name):
    charts = phone[name]["charts"]
    assert {"gates", "extraction", "production-trend"} <= {chart["name"] for chart in charts}
    for chart in charts:
        assert chart["variant"] == "narrow", chart["name"]
        assert 0.8 <= chart["scale"] <= 1.25, chart  # 12 px text shows at 10–15 px

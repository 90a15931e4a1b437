"""The demo's extraction channel: a synthetic "Kestrel FY2025 results" workbook, its curated ground truth,
and what a document parser extracted from it (scored by ``scoring.extraction``).

:func:`write_extraction_demo` writes::

    root/extraction/truth.json       the curated cells: {"workbook", "source", "cells": [...]}
    root/extraction/facts.jsonl      one extracted cell per line, from the healthy or the degraded parser
    root/extraction/baseline.json    the healthy run's accuracies per channel (written only if missing)

The workbook has three sheets (``Summary``, ``Revenue by region``, ``Headcount``): a navy title merged
across the table, grey group headers merged over the quarter columns, grey column headers, figures in
EUR thousands, and a traffic-light fill on the full-year / change columns. Colour tags are always an
object ``{"fill": colour}``; merged ranges are ``merge_span: [first, last]`` on the range's top-left
cell.

The healthy parser (``xlsx-extract 4.2.0``) is nearly right: it writes every number as a float
(``4821.0``, equal to ``4821``), reads one figure as a thousands-separated string (``"1,702"``), calls
the first amber fill on ``Revenue by region`` green, emits that sheet's title twice (the later, complete
line wins), adds a source note the curators left out, misses a footnote, and writes two malformed lines
(an ``A0`` reference, a cell without ``sheet``) so that the quarantine shows. The degraded parser
(``xlsx-extract 5.0.0rc1``) reads the same values but loses every fill on ``Revenue by region`` and
drops the last column of the merged group headers on row 2: ``color_mapping`` and
``header_attribution`` fall well below the baseline while ``cell_value`` is unchanged.

Everything is derived from a fixed seed (no clock), and a file whose content would not change is not
rewritten.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ragspine_pipeline.contracts.extraction import ExtractionCell, parse_facts
from ragspine_pipeline.decision.extraction_baseline import promote
from ragspine_pipeline.files import jsonl_line, jsonl_lines, write_if_changed
from ragspine_pipeline.scoring.extraction import score_extraction

SEED = 2025
WORKBOOK = "Kestrel FY2025 results"
SOURCE = "kestrel-fy2025-results.xlsx"
HEALTHY_PARSER, DEGRADED_PARSER = "xlsx-extract 4.2.0", "xlsx-extract 5.0.0rc1"
QUARTERS = ("Q1", "Q2", "Q3", "Q4")
REGIONS = ("Nordics", "DACH", "Benelux", "France", "UK & Ireland", "Iberia", "North America", "APAC")
DEPARTMENTS = (
    "Engineering",
    "Sales",
    "Marketing",
    "Customer success",
    "Finance",
    "People",
    "Operations",
    "Legal",
)
TITLE, GROUP, HEADER = {"fill": "navy"}, {"fill": "grey"}, {"fill": "grey"}
# The cells the healthy parser gets wrong (see the module docstring).
MISREAD_VALUE = ("Summary", "D10")  # free cash flow, Q3: read as a thousands-separated string
AMBER, MISREAD_AMBER_AS = {"fill": "amber"}, {"fill": "green"}  # on the first amber cell of the sheet below
COLOURLESS_SHEET = "Revenue by region"  # the degraded parser loses its fills


def write_extraction_demo(root: Path, degraded: bool = False) -> dict[str, Path]:
    """Write truth, facts (healthy or degraded) and, if missing, the baseline; return their paths."""
    folder = Path(root) / "extraction"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "truth": folder / "truth.json",
        "facts": folder / "facts.jsonl",
        "baseline": folder / "baseline.json",
    }
    cells = workbook_cells()
    truth = {"workbook": WORKBOOK, "source": SOURCE, "cells": cells}
    write_if_changed(
        paths["truth"], json.dumps(truth, indent=1, ensure_ascii=False) + "\n", "extraction ground truth"
    )
    facts = "".join(jsonl_lines(degraded_facts(cells) if degraded else healthy_facts(cells), paths["facts"]))
    write_if_changed(paths["facts"], facts, "extraction facts")
    if not paths["baseline"].exists():
        promote(paths["baseline"], healthy_accuracies(cells), passed=True)
    return paths


def healthy_accuracies(cells: list[dict[str, Any]] | None = None) -> dict[str, float | None]:
    """The healthy parser's accuracy per channel: the demo baseline."""
    cells = workbook_cells() if cells is None else cells
    truth = {cell.key: cell for cell in map(ExtractionCell.model_validate, cells)}
    facts = parse_facts([jsonl_line(fact) for fact in healthy_facts(cells)], "demo facts").cells
    return score_extraction(facts, truth).accuracies()


# -- the workbook ---------------------------------------------------------------------------------------


def workbook_cells() -> list[dict[str, Any]]:
    """Every curated cell of the workbook, sheet by sheet, row by row."""
    rng = random.Random(SEED)
    regions = {
        region: _quarterly(rng, base) for region, base in zip(REGIONS, _region_bases(rng), strict=True)
    }
    revenue = [sum(q[i] for q in regions.values()) for i in range(4)]
    headcount = {dept: _headcount(rng, base) for dept, base in zip(DEPARTMENTS, _dept_bases(), strict=True)}
    return _summary(rng, revenue, headcount) + _revenue_sheet(rng, regions) + _headcount_sheet(headcount)


def _region_bases(rng: random.Random) -> list[int]:
    return [rng.randint(1200, 2400), 4800, 2100, 2600, 3300, 900, 5200, 1700]


def _dept_bases() -> list[int]:
    return [142, 64, 21, 38, 17, 9, 26, 5]


def _quarterly(rng: random.Random, base: int) -> list[int]:
    growth = rng.uniform(-0.02, 0.06)
    return [round(base * (1 + growth) ** i * rng.uniform(0.96, 1.04)) for i in range(4)]


def _headcount(rng: random.Random, base: int) -> tuple[list[int], int]:
    """Quarter-end headcount and the FY2024 year-end figure."""
    quarters, count = [], base
    for _ in range(4):
        count = max(1, count + rng.randint(-2, 4))
        quarters.append(count)
    return quarters, base + rng.randint(-3, 3)


def _cell(sheet: str, ref: str, value: Any, tags: dict | None = None, span: list[str] | None = None) -> dict:
    cell: dict[str, Any] = {"sheet": sheet, "cell_ref": ref, "value": value}
    if tags is not None:
        cell["tags"] = tags
    if span is not None:
        cell["merge_span"] = span
    return cell


def _traffic_light(change: float, amber_below: float) -> dict[str, str]:
    if change < 0:
        return {"fill": "red"}
    return {"fill": "green"} if change >= amber_below else {"fill": "amber"}


def _header_rows(
    sheet: str, last: str, groups: list[tuple[str, str | None, str]], headers: list[str]
) -> list:
    """Title (row 1, merged A..last), group headers (row 2), column headers (row 3)."""
    title = {
        "Summary": WORKBOOK,
        "Revenue by region": "Revenue by region, FY2025 (EUR thousands)",
        "Headcount": "Headcount by department, FY2025",
    }[sheet]
    cells = [_cell(sheet, "A1", title, TITLE, ["A1", f"{last}1"])]
    cells += [
        _cell(sheet, f"{c}2", text, GROUP, None if end is None else [f"{c}2", f"{end}2"])
        for c, end, text in groups
    ]
    cells += [_cell(sheet, f"{col}3", text, HEADER) for col, text in zip("ABCDEFG", headers, strict=False)]
    return cells


def _summary(rng: random.Random, revenue: list[int], headcount: dict) -> list[dict]:
    sheet = "Summary"
    cost = [round(r * rng.uniform(0.56, 0.60)) for r in revenue]
    gross = [r - c for r, c in zip(revenue, cost, strict=True)]
    opex = [round(r * rng.uniform(0.27, 0.31)) for r in revenue]
    operating = [g - o for g, o in zip(gross, opex, strict=True)]
    net = [round(o * 0.76) for o in operating]
    cash = [round(n * rng.uniform(0.9, 1.25)) for n in net]
    heads = [sum(q[i] for q, _ in headcount.values()) for i in range(4)]
    rows = [
        ("Revenue", revenue, 0.04),
        ("Cost of sales", cost, None),
        ("Gross profit", gross, 0.04),
        ("Operating expenses", opex, None),
        ("Operating income", operating, 0.05),
        ("Net income", net, 0.05),
        ("Free cash flow", cash, 0.05),
        ("Headcount (period end)", heads, 0.02),
    ]
    cells = _header_rows(
        sheet, "F", [("B", "E", "Quarterly"), ("F", None, "Full year")], ["Metric", *QUARTERS, "FY2025"]
    )
    for row, (label, values, amber_below) in enumerate(rows, start=4):
        cells.append(_cell(sheet, f"A{row}", label))
        cells += [_cell(sheet, f"{col}{row}", v) for col, v in zip("BCDE", values, strict=True)]
        full_year = values[-1] if label.startswith("Headcount") else sum(values)
        # The fill compares the second half of the year with the first: a plan-vs-actual style signal.
        change = (values[2] + values[3]) / (values[0] + values[1]) - 1
        tags = _traffic_light(change, amber_below) if amber_below is not None else None
        cells.append(_cell(sheet, f"F{row}", full_year, tags))
    cells.append(_cell(sheet, "A13", "Figures unaudited; EUR thousands unless stated."))
    return cells


def _revenue_sheet(rng: random.Random, regions: dict[str, list[int]]) -> list[dict]:
    sheet = "Revenue by region"
    cells = _header_rows(
        sheet,
        "G",
        [("B", "E", "Quarterly revenue"), ("F", "G", "Full year")],
        ["Region", *QUARTERS, "FY2025", "YoY"],
    )
    rows = [(region, values, rng.uniform(-0.06, 0.16)) for region, values in regions.items()]
    total = [sum(v[i] for v in regions.values()) for i in range(4)]
    prior_total = sum(sum(v) / (1 + yoy) for _, v, yoy in rows)
    rows.append(("Total", total, sum(total) / prior_total - 1))
    for row, (label, values, yoy) in enumerate(rows, start=4):
        fill = GROUP if label == "Total" else None
        cells.append(_cell(sheet, f"A{row}", label, fill))
        cells += [_cell(sheet, f"{col}{row}", v, fill) for col, v in zip("BCDE", values, strict=True)]
        cells.append(_cell(sheet, f"F{row}", sum(values), fill))
        cells.append(_cell(sheet, f"G{row}", round(yoy, 3), _traffic_light(yoy, 0.05)))
    return cells


def _headcount_sheet(headcount: dict[str, tuple[list[int], int]]) -> list[dict]:
    sheet = "Headcount"
    cells = _header_rows(
        sheet, "F", [("B", "E", "Period end"), ("F", None, "Change")], ["Department", *QUARTERS, "vs FY2024"]
    )
    rows = [(dept, quarters, quarters[-1] - prior) for dept, (quarters, prior) in headcount.items()]
    total = [sum(q[i] for _, q, _ in rows) for i in range(4)]
    rows.append(("Total", total, sum(change for _, _, change in rows)))
    for row, (label, quarters, change) in enumerate(rows, start=4):
        fill = GROUP if label == "Total" else None
        cells.append(_cell(sheet, f"A{row}", label, fill))
        cells += [_cell(sheet, f"{col}{row}", v, fill) for col, v in zip("BCDE", quarters, strict=True)]
        cells.append(_cell(sheet, f"F{row}", change, _traffic_light(change, 1)))
    return cells


# -- what the parsers extracted -------------------------------------------------------------------------


def healthy_facts(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The healthy parser's output lines, malformed ones included, in the order it emitted them."""
    out: list[dict[str, Any]] = []
    misread_fill = next(c for c in cells if c["sheet"] == COLOURLESS_SHEET and c.get("tags") == AMBER)
    for cell in cells:
        where = (cell["sheet"], cell["cell_ref"])
        if where == ("Summary", "A13"):
            continue  # a footnote in a text box: the parser never sees it (truth_only)
        fact = _as_parsed(cell, HEALTHY_PARSER)
        if where == MISREAD_VALUE:
            fact["value"] = f"{cell['value']:,}"
        if cell is misread_fill:
            fact["tags"] = MISREAD_AMBER_AS
        if where == ("Revenue by region", "A1"):  # emitted once early without its span, then in full
            out.append({key: value for key, value in fact.items() if key != "merge_span"})
        out.append(fact)
        if where == ("Headcount", "F12"):
            out.append(_as_parsed(_cell("Headcount", "A14", "Source: HR system export"), HEALTHY_PARSER))
            out.append({"sheet": "Headcount", "cell_ref": "A0", "value": "Kestrel", "parser": HEALTHY_PARSER})
            out.append({"cell_ref": "B14", "value": 1702, "parser": HEALTHY_PARSER})
    return out


def degraded_facts(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The degraded parser: the healthy one's values, without one sheet's fills and with short row-2 spans."""
    out = []
    for fact in healthy_facts(cells):
        fact = {**fact, "parser": DEGRADED_PARSER}
        if fact.get("sheet") == COLOURLESS_SHEET:
            fact.pop("tags", None)
        span = fact.get("merge_span")
        if span is not None and span[0].endswith("2") and span[0] != span[1]:
            fact["merge_span"] = [span[0], f"{chr(ord(span[1][0]) - 1)}2"]
        out.append(fact)
    return out


def _as_parsed(cell: dict[str, Any], parser: str) -> dict[str, Any]:
    """How the parser writes a curated cell: every number as a float, and its own name."""
    value = cell["value"]
    return {**cell, "value": float(value) if isinstance(value, int) else value, "parser": parser}

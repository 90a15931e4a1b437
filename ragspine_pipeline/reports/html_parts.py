"""Building blocks of the HTML report: figures and run facts as text, page structure, the stylesheet.

Shared by the sections of :mod:`reports.html`, :mod:`reports.html_production` and :mod:`reports.html_qa`.
Every formatting helper takes raw data and returns escaped HTML, except :func:`compact` (also used by the
Markdown report) and the run facts, which return plain text escaped where it is used; a missing, ``None``
or non-finite number prints ``n/a``. Structure helpers take escaped HTML parts, except names and
headings, escaped here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ragspine_pipeline.decision.baseline import COUNT_METRICS
from ragspine_pipeline.reports.charts import esc, finite

# -- formatting ------------------------------------------------------------------------------------


def mapping(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def pair(value: object) -> tuple[float | None, float | None]:
    """``[low, high]`` from the report as two finite numbers or Nones."""
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        return finite(value[0]), finite(value[1])
    return None, None


def fixed(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:.4f}"


def signed(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:+.4f}"


def pct(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:.1%}"


def interval(low: object, high: object) -> str:
    lo, hi = finite(low), finite(high)
    return "n/a" if lo is None or hi is None else f"{lo:.1%}–{hi:.1%}"


def count(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:g}"


def share(value: float) -> str:
    return f"{value * 100:g}%"


def op(symbol: object) -> str:
    return "≤" if symbol == "<=" else "≥"


def moment(epoch: object, fmt: str) -> str | None:
    """An epoch in seconds as UTC text; None when it is missing or outside the calendar."""
    number = finite(epoch)
    if number is None:
        return None
    try:
        return datetime.fromtimestamp(number, UTC).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return None


def utc(epoch: object) -> str | None:
    return moment(epoch, "%Y-%m-%d %H:%M:%S UTC")


def day(epoch: object) -> str:
    return moment(epoch, "%Y-%m-%d") or ""


def small(text: str) -> str:
    return f' <span class="n">{text}</span>'


def compact(value: object, limit: int = 160) -> str:
    """A JSON value of any shape as one short line of *plain* text (escape it where it is used).

    Strings as they are, numbers without a trailing ``.0`` (non-finite: ``n/a``), null as ``—``, arrays
    as ``[a, b]``, objects as ``key: value`` pairs (braced when nested); cut to ``limit`` characters.
    """
    text = " ".join(_compact(value, nested=False).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: object, nested: bool = True) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        number = finite(value)
        return "n/a" if number is None else f"{number:.12g}"
    if isinstance(value, Mapping):
        pairs = ", ".join(f"{key}: {_compact(item)}" for key, item in value.items())
        return f"{{{pairs}}}" if nested else pairs
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_compact(item) for item in value) + "]"
    return str(value)


def gate_figure(metric: object, value: object) -> str:
    """A gate's value or threshold: a count as a whole number, a rate with four decimals."""
    return count(value) if metric in COUNT_METRICS else fixed(value)


def needs(gate: Mapping) -> str:
    """``needs ≤ 0.1000``: the gate's condition as a requirement, never as a claim about the value."""
    return f"needs {op(gate.get('op'))} {gate_figure(gate.get('metric'), gate.get('threshold'))}"


def metric_cell(value: object, n: object) -> str:
    """A figure with the number of cases it applies to in small print."""
    return fixed(value) + (small(f"({count(n)})") if finite(n) is not None else "")


# -- run facts: a release and a history entry as plain text ----------------------------------------

RUN_ID_TIME = re.compile(r"^(\d{8}T\d{6}Z)")  # the CLI's default run id starts with its UTC start time


def index_versions(release: Mapping) -> str:
    main = release.get("index_version")
    others = [str(v) for v in release.get("index_versions") or [] if v != main]
    # traces answered on several indexes are worth seeing: the run did not test one index
    return (str(main) if main else "n/a") + (f" (traces also on {', '.join(others)})" if others else "")


def golden_version(release: Mapping) -> str:
    version, sha = release.get("golden_version"), release.get("golden_sha256")
    if not version:
        return "not frozen"
    return f"{version} (sha256 {str(sha)[:12]}…)" if sha else str(version)


def generated_at(report: Mapping, run_id: object, history: Sequence[Mapping]) -> str:
    """From the report, else this run's history entry, else the run id's time prefix; never the clock."""
    stamp = report.get("generated_at")
    if isinstance(stamp, str) and stamp:
        return stamp
    if utc(stamp):
        return utc(stamp)
    for entry in map(mapping, reversed(history)):
        if run_id is not None and entry.get("run_id") == run_id and utc(entry.get("timestamp")):
            return utc(entry.get("timestamp"))
    match = RUN_ID_TIME.match(str(run_id or ""))
    try:
        started = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ") if match else None
    except ValueError:  # looks like a timestamp but is not a date
        started = None
    return "n/a" if started is None else started.strftime("%Y-%m-%d %H:%M:%S UTC") + " (from the run id)"


def run_label(entry: Mapping) -> str:
    """The index version; else the run id, without the CLI's timestamp prefix (the x axis has the day)."""
    if entry.get("index_version"):
        return str(entry["index_version"])
    run_id = str(entry.get("run_id") or "?")
    match = RUN_ID_TIME.match(run_id)
    suffix = run_id[match.end() :].lstrip("-") if match else ""
    return suffix or run_id


# -- applicability ---------------------------------------------------------------------------------


def headline_figures(report: Mapping) -> list[tuple[str, float | None, int | None]]:
    """``(metric, value, denominator)`` of every grounded figure of the report, in its order; the value
    is None where the metric does not apply (its value is null, its denominator 0) or is missing."""
    out = []
    for name, n in mapping(report.get("denominators")).items():
        cases = finite(n)
        value = finite(report.get(name)) if cases != 0 else None
        out.append((str(name), value, None if cases is None else int(cases)))
    return out


def figures_table(report: Mapping) -> str:
    """The grounded figures with the number of cases each is over; ``n/a`` where that number is 0."""
    rows = [
        ("" if value is not None else "na", [esc(name), fixed(value), count(n)])
        for name, value, n in headline_figures(report)
    ]
    return "<h3>Grounded figures</h3>" + table(("metric", "value", "over (cases)"), rows) if rows else ""


# -- gate status -----------------------------------------------------------------------------------

STATUS_ORDER = {"fail": 0, "warn": 1, "na": 2, "pass": 3}


def gate_status(gate: Mapping) -> str:
    """``fail`` (blocks), ``warn`` (a failed soft gate: reported, never blocks), ``pass`` or ``na`` (the
    metric does not apply to the run, ``"pass": null``: never blocks)."""
    if gate.get("pass") is False:
        return "warn" if gate.get("severity") == "soft" else "fail"
    return "pass" if gate.get("pass") is True else "na"


def pill(status: str, warn: str = "below", na: str = "n/a", passed: str = "pass") -> str:
    text = {"pass": passed, "fail": "FAIL", "warn": warn}.get(status, na)
    return f'<span class="pill {status}">{text}</span>'


# -- page structure --------------------------------------------------------------------------------


def document(title: str, sections: Sequence[str]) -> str:
    """The whole page: the stylesheet inline, the sections in order, nothing fetched."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(sections)
        + "\n</main>\n</body>\n</html>\n"
    )


def figure(name: str, caption: str, chart: str) -> str:
    return f'<figure data-chart="{esc(name)}"><figcaption>{esc(caption)}</figcaption>{chart}</figure>'


def note(text: str, name: str) -> str:
    return f'<p class="note" data-note="{esc(name)}">{esc(text)}</p>'


def section(name: str, heading: str, *parts: str) -> str:
    body = "\n".join(p for p in parts if p)
    return f'<section id="{name}" data-section="{name}">\n<h2>{esc(heading)}</h2>\n{body}\n</section>'


def table(
    header: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]], cls: str = "", figures_from: int = 1
) -> str:
    """``rows`` are ``(row class, cells)``; cells are escaped HTML, the first a label, the cells from
    ``figures_from`` on figures (right-aligned), those between them text.

    Header names may be long metric identifiers: ``<wbr>`` after each underscore lets them wrap.
    """
    head = "".join(f"<th>{esc(h).replace('_', '_<wbr>')}</th>" for h in header)
    body = "".join(
        f'<tr class="{row_cls}"><td>{cells[0]}</td>'
        + "".join(f"<td>{cell}</td>" for cell in cells[1:figures_from])
        + "".join(f'<td class="num">{cell}</td>' for cell in cells[max(1, figures_from) :])
        + "</tr>"
        for row_cls, cells in rows
    )
    inner = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
    return f'<div class="scroll"><table class="{cls}">{inner}</table></div>'


CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #ffffff; color: #24292f;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 32px 48px; }
header.top { display: flex; align-items: center; gap: 16px; flex-wrap: wrap;
  border-bottom: 1px solid #d0d7de; padding-bottom: 10px; }
h1 { font-size: 22px; margin: 0; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #eaeef2; }
h3 { font-size: 15px; margin: 20px 0 6px; }
.badge { display: inline-block; padding: 3px 14px; border-radius: 6px; color: #ffffff;
  font-weight: 700; font-size: 18px; letter-spacing: 0.08em; }
.badge.ship { background: #1a7f37; }
.badge.block { background: #cf222e; }
.badge.unknown { background: #6e7781; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 18px; margin: 12px 0; }
dl.facts dt { color: #57606a; }
dl.facts dd { margin: 0; font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  overflow-wrap: anywhere; }
ul.warnings { color: #9a6700; }
p.why { margin: 12px 0 4px; }
ol.worst { margin: 0 0 8px; }
ul.reasons li { color: #a40e26; }
ul.soft li { color: #9a6700; }
p.verdict { color: #1a7f37; font-weight: 600; }
p.verdict.fail { color: #a40e26; }
p.verdict.warn { color: #9a6700; }
a.more { font-size: 12px; color: #57606a; }
p, li, dd, figcaption, h1, h2, h3, code { overflow-wrap: anywhere; }
figure { margin: 10px 0 14px; }
figcaption { color: #57606a; font-size: 13px; margin-bottom: 4px; }
svg.chart { display: block; width: 100%; height: auto; }
svg.chart.narrow { display: none; max-width: 560px; }
svg text { fill: #24292f; }
svg .tick, svg .small, svg .legend, svg .axis { fill: #57606a; }
svg .tick, svg .small { font-size: 11px; }
svg .fail { fill: #a40e26; font-weight: 600; }
svg .panel { font-weight: 600; }
svg .strong { fill: #24292f; font-weight: 700; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
table.compact { font-size: 12px; }
th, td { border-bottom: 1px solid #eaeef2; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td:first-child { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.fail td { background: #fdecec; }
tr.warn td { background: #fff4e5; }
tr.all td { background: #f6f8fa; }
tr.ungated td { color: #57606a; }
.n { color: #6e7781; font-size: 11px; }
.pill { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.pill.pass { background: #dafbe1; color: #116329; }
.pill.fail { background: #ffebe9; color: #a40e26; }
.pill.na, .pill.warn { background: #eaeef2; color: #57606a; }
.note { color: #57606a; font-style: italic; }
/* A phone: the narrow drawing of each chart (labels above the bars), less padding, facts stacked. */
@media screen and (max-width: 759px) {
  main { padding: 12px 12px 32px; }
  h1 { font-size: 20px; }
  svg.chart.wide { display: none; }
  svg.chart.narrow { display: block; }
  dl.facts { grid-template-columns: 1fr; gap: 0; }
  dl.facts dd { margin-bottom: 6px; }
}
@media print {
  main { max-width: none; padding: 0; }
  h2, h3 { break-after: avoid; }
  figure, table, dl.facts { break-inside: avoid; }
  .scroll { overflow: visible; }
  .badge, .pill, tr td { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  @page { margin: 14mm; }
}
"""

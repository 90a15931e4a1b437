"""A standalone HTML page for one evaluation run: decision, gates, slices with intervals, stages, trends.

:func:`render_html` reads the JSON report of ``reports.evaluation.summary`` (what ``--format json``
writes; a ``cases`` array, if present, is ignored), optionally past runs and daily production summaries,
and returns one HTML document: inline CSS and SVG, no script, nothing fetched from the network. It is
pure (no file IO, no clock): the same input gives the same string, and the caller writes the file.

Every text taken from the data is HTML-escaped; a missing, ``None`` or non-finite number prints ``n/a``
and is never plotted. Each chart sits in a ``<figure data-chart="…">`` with a stable name: ``gates``,
``slices-<dimension>``, ``stages``, ``trend``, ``production-trend``, ``production-latency``. A section
that has nothing to plot shows a ``<p class="note" data-note="…">`` instead of an empty chart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ragspine_pipeline.reports.charts import (
    INK,
    PALETTE,
    STATUS,
    Key,
    Row,
    Series,
    esc,
    finite,
    line_chart,
    plain,
    row_chart,
)

KEY_METRICS = ("releasable_rate", "precision", "admissible_rate", "context_recall", "faithfulness")
PRODUCTION_RATES = (
    "refusal_rate",
    "compliance",
    "citation_validity",
    "admissible_rate",
    "lexical_faithfulness",
    "fabrication",
)
LATENCIES = ("latency_p50_ms", "latency_p95_ms")
TREND_TABLE_RUNS = 10
DEFAULT_SLICE_GATE = 0.95  # SPEC §3.2; drawn only when the report does not carry its own slice gate
DECISION_COLOURS = {"ship": STATUS["pass"], "block": STATUS["fail"]}
_RUN_ID_TIME = re.compile(r"^(\d{8}T\d{6}Z)")  # the CLI's default run id starts with its UTC start time


def render_html(
    report: Mapping,
    *,
    history: Sequence[Mapping] = (),
    production: Sequence[Mapping] = (),
    title: str = "Release evaluation",
    slice_gate: float = DEFAULT_SLICE_GATE,
) -> str:
    """The whole page as a string.

    ``history``: past runs, oldest first, ``{run_id, timestamp (epoch s), index_version, decision,
    metrics: {name: value}}``; include this run (e.g. via :func:`history_entry`) to plot it.
    ``production``: daily summaries, oldest first; the production section appears only when given.
    ``slice_gate``: the slice threshold (``min_rate``) drawn when the report carries none.
    """
    release = _mapping(report.get("release"))
    sections = [
        _header(report, release, history, title),
        _reasons(release),
        _gates_section(report, release),
        _slices_section(report, release, slice_gate),
        _stages_section(report, release),
        _trend_section(history, release.get("run_id")),
    ]
    if production:
        sections.append(_production_section(production))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(sections)
        + "\n</main>\n</body>\n</html>\n"
    )


def history_entry(report: Mapping, *, timestamp: float) -> dict:
    """This run as one ``history`` point: every grounded and layered figure of the report, flat."""
    release = _mapping(report.get("release"))
    grounded = {name: report.get(name) for name in _mapping(report.get("denominators"))}
    return {
        "run_id": release.get("run_id"),
        "timestamp": timestamp,
        "index_version": release.get("index_version"),
        "decision": release.get("decision"),
        "metrics": {**grounded, **_mapping(report.get("layered"))},
    }


# -- formatting: every helper takes raw data and returns escaped HTML ------------------------------


def _mapping(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _pair(value: object) -> tuple[float | None, float | None]:
    """``[low, high]`` from the report as two finite numbers or Nones."""
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        return finite(value[0]), finite(value[1])
    return None, None


def _fixed(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:.4f}"


def _signed(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:+.4f}"


def _pct(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:.1%}"


def _interval(low: object, high: object) -> str:
    lo, hi = finite(low), finite(high)
    return "n/a" if lo is None or hi is None else f"{lo:.1%}–{hi:.1%}"


def _count(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:g}"


def _share(value: float) -> str:
    return f"{value * 100:g}%"


def _op(op: object) -> str:
    return "≤" if op == "<=" else "≥"


def _moment(epoch: object, fmt: str) -> str | None:
    """An epoch in seconds as UTC text; None when it is missing or outside the calendar."""
    number = finite(epoch)
    if number is None:
        return None
    try:
        return datetime.fromtimestamp(number, UTC).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return None


def _utc(epoch: object) -> str | None:
    return _moment(epoch, "%Y-%m-%d %H:%M:%S UTC")


def _day(epoch: object) -> str:
    return _moment(epoch, "%Y-%m-%d") or ""


def _small(text: str) -> str:
    return f' <span class="n">{text}</span>'


# -- page structure --------------------------------------------------------------------------------


def _figure(name: str, caption: str, chart: str) -> str:
    return f'<figure data-chart="{esc(name)}"><figcaption>{esc(caption)}</figcaption>{chart}</figure>'


def _note(text: str, name: str) -> str:
    return f'<p class="note" data-note="{esc(name)}">{esc(text)}</p>'


def _section(name: str, heading: str, *parts: str) -> str:
    body = "\n".join(p for p in parts if p)
    return f'<section id="{name}" data-section="{name}">\n<h2>{esc(heading)}</h2>\n{body}\n</section>'


def _table(header: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]], cls: str = "") -> str:
    """``rows`` are ``(row class, cells)``; cells are escaped HTML, the first a label, the rest figures.

    Header names may be long metric identifiers: ``<wbr>`` after each underscore lets them wrap.
    """
    head = "".join(f"<th>{esc(h).replace('_', '_<wbr>')}</th>" for h in header)
    body = "".join(
        f'<tr class="{row_cls}"><td>{cells[0]}</td>'
        + "".join(f'<td class="num">{cell}</td>' for cell in cells[1:])
        + "</tr>"
        for row_cls, cells in rows
    )
    table = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
    return f'<div class="scroll"><table class="{cls}">{table}</table></div>'


# -- header and decision ---------------------------------------------------------------------------


def _decision(release: Mapping, report: Mapping) -> str | None:
    if release.get("decision") in DECISION_COLOURS:
        return release["decision"]
    if isinstance(report.get("pass"), bool):
        return "ship" if report["pass"] else "block"
    return None


def _header(report: Mapping, release: Mapping, history: Sequence[Mapping], title: str) -> str:
    decision = _decision(release, report) or "unknown"
    badge = f'<span class="badge {decision}" data-decision="{decision}">{decision.upper()}</span>'
    size = f"{_count(report.get('n_cases'))} cases, {_count(report.get('traces'))} traces"
    facts = [
        ("index version", _index_versions(release)),
        ("golden set", _golden(release)),
        ("run id", str(release.get("run_id") or "n/a")),
        ("generated", _generated(report, release.get("run_id"), history)),
        ("cases", f"{size}, k = {_count(report.get('k'))}"),
    ]
    facts += [(name, str(report[name])) for name in ("gold", "trace", "evidence") if report.get(name)]
    rows = "".join(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>" for name, value in facts)
    warnings = "".join(f"<li>{esc(w)}</li>" for w in report.get("warnings") or [] if w)
    return f'<header class="top"><h1>{esc(title)}</h1>{badge}</header>\n<dl class="facts">{rows}</dl>' + (
        f'\n<ul class="warnings">{warnings}</ul>' if warnings else ""
    )


def _index_versions(release: Mapping) -> str:
    main = release.get("index_version")
    others = [str(v) for v in release.get("index_versions") or [] if v != main]
    # traces answered on several indexes are worth seeing: the run did not test one index
    return (str(main) if main else "n/a") + (f" (traces also on {', '.join(others)})" if others else "")


def _golden(release: Mapping) -> str:
    version, sha = release.get("golden_version"), release.get("golden_sha256")
    if not version:
        return "not frozen"
    return f"{version} (sha256 {str(sha)[:12]}…)" if sha else str(version)


def _generated(report: Mapping, run_id: object, history: Sequence[Mapping]) -> str:
    """From the report, else this run's history entry, else the run id's time prefix; never the clock."""
    stamp = report.get("generated_at")
    if isinstance(stamp, str) and stamp:
        return stamp
    if _utc(stamp):
        return _utc(stamp)
    for entry in map(_mapping, reversed(history)):
        if run_id is not None and entry.get("run_id") == run_id and _utc(entry.get("timestamp")):
            return _utc(entry.get("timestamp"))
    match = _RUN_ID_TIME.match(str(run_id or ""))
    try:
        moment = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ") if match else None
    except ValueError:  # looks like a timestamp but is not a date
        moment = None
    return "n/a" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC") + " (from the run id)"


def _reasons(release: Mapping) -> str:
    """Why the release is blocked, one line per failed gate, slice and regression; then soft warnings."""
    items = [
        f"gate <b>{esc(g.get('metric'))}</b> = {_fixed(g.get('value'))}, needs {_op(g.get('op'))} "
        f"{_fixed(g.get('threshold'))} (Δ {_signed(g.get('delta'))})"
        for g in map(_mapping, release.get("failed_gates") or [])
    ]
    items += [
        f"slice <b>{esc(s.get('dimension'))}={esc(s.get('value'))}</b>: releasable "
        f"{_pct(s.get('releasable_rate'))} of {_count(s.get('n'))} "
        f"(95% CI {_interval(*_pair(s.get('ci95')))}), needs ≥ {_pct(s.get('min_rate'))}"
        for s in map(_mapping, release.get("failed_slices") or [])
    ]
    items += [
        f"regression <b>{esc(r.get('metric'))}</b>: {_fixed(r.get('current'))} vs baseline "
        f"{_fixed(r.get('baseline'))} (Δ {_signed(r.get('delta'))})"
        for r in map(_mapping, release.get("regressions") or [])
    ]
    soft = [
        f"soft gate <b>{esc(g.get('metric'))}</b> = {_fixed(g.get('value'))}, wants {_op(g.get('op'))} "
        f"{_fixed(g.get('threshold'))} (Δ {_signed(g.get('delta'))}): a warning, it does not block"
        for g in map(_mapping, release.get("warned_gates") or [])
    ]
    warned = '<ul class="soft">' + "".join(f"<li>{item}</li>" for item in soft) + "</ul>" if soft else ""
    if items:
        return '<ul class="reasons">' + "".join(f"<li>{item}</li>" for item in items) + "</ul>" + warned
    if not release:
        return _note("This report carries no release decision.", "decision")
    return '<p class="verdict">Every gate, slice and baselined metric holds.</p>' + warned


# -- gates -----------------------------------------------------------------------------------------


def _gate_status(gate: Mapping) -> str:
    """``fail`` (blocks), ``warn`` (a failed soft gate: reported, never blocks), ``pass`` or ``na``."""
    if gate.get("pass") is False:
        return "warn" if gate.get("severity") == "soft" else "fail"
    return "pass" if gate.get("pass") is True else "na"


_STATUS_ORDER = {"fail": 0, "warn": 1, "na": 2, "pass": 3}


def _pill(status: str, warn: str = "below") -> str:
    text = {"pass": "pass", "fail": "FAIL", "warn": warn}.get(status, "n/a")
    return f'<span class="pill {status}">{text}</span>'


def _gates_section(report: Mapping, release: Mapping) -> str:
    gates = [g for g in report.get("gates") or [] if isinstance(g, Mapping)]
    if not gates:
        return _section("gates", "Gates", _note("No gates in this report.", "gates"))
    gates.sort(key=lambda g: _STATUS_ORDER[_gate_status(g)])  # failed first, else in the report's order
    caption = "Gates, failed first (≥: the bar must reach the tick; ≤: it must stay at or below it)"
    return _section(
        "gates",
        "Gates",
        _figure("gates", caption, _gates_chart(gates)),
        _gates_table(gates),
        _regressions(release),
    )


def _gates_chart(gates: list[Mapping]) -> str:
    rows = [
        Row(
            label=str(g.get("metric")),
            value=finite(g.get("value")),
            status=_gate_status(g),
            marker=finite(g.get("threshold")),
            value_text=f"{_fixed(g.get('value'))} {_op(g.get('op'))} {_fixed(g.get('threshold'))}",
        )
        for g in gates
    ]
    keys = [Key("box", STATUS["pass"], "passes"), Key("box", STATUS["fail"], "fails")]
    if any(row.status == "warn" for row in rows):
        keys.append(Key("box", STATUS["warn"], "soft gate fails (warns)"))
    keys.append(Key("tick", INK, "threshold"))
    return row_chart(
        rows,
        title="Gates: each value against its threshold",
        description="One bar per gate, failed gates first; the dark tick is the gate's threshold.",
        axis_label="metric value",
        keys=keys,
    )


def _gates_table(gates: list[Mapping]) -> str:
    def delta(gate: Mapping) -> str:
        value, threshold = finite(gate.get("value")), finite(gate.get("threshold"))
        return "n/a" if value is None or threshold is None else _signed(value - threshold)

    rows = [
        (
            _gate_status(g),
            [
                esc(g.get("metric")),
                f"{_op(g.get('op'))} {_fixed(g.get('threshold'))}",
                _fixed(g.get("value")),
                delta(g),
                esc(g.get("severity") or "hard"),
                _pill(_gate_status(g), warn="warns"),
            ],
        )
        for g in gates
    ]
    return _table(("metric", "gate", "value", "Δ (value − threshold)", "severity", "result"), rows)


def _regressions(release: Mapping) -> str:
    regressions = [r for r in release.get("regressions") or [] if isinstance(r, Mapping)]
    unmeasured = [str(m) for m in release.get("unmeasured_baseline_metrics") or []]
    parts = []
    if regressions:
        rows = [
            (
                "fail",
                [
                    esc(r.get("metric")),
                    *(_fixed(r.get(k)) for k in ("baseline", "current")),
                    _signed(r.get("delta")),
                ],
            )
            for r in regressions
        ]
        parts.append("<h3>Baseline regressions</h3>" + _table(("metric", "baseline", "current", "Δ"), rows))
    if unmeasured:
        parts.append(
            _note(f"Baseline metrics this run did not measure: {', '.join(unmeasured)}.", "unmeasured")
        )
    return "\n".join(parts)


# -- slices ----------------------------------------------------------------------------------------


def _slice_gate(report: Mapping, release: Mapping, fallback: float) -> tuple[float, int, bool]:
    """``(min_rate, min_n, from the report)``: the report's slice gate, else a failed slice's rate, else
    ``fallback`` (then the third element is False and the page says the line is assumed)."""
    gate = _mapping(report.get("slice_gate")) or _mapping(release.get("slice_gate"))
    rates = [finite(_mapping(s).get("min_rate")) for s in release.get("failed_slices") or []]
    rate = next((r for r in [finite(gate.get("min_rate")), *rates] if r is not None), None)
    min_n = finite(gate.get("min_n"))
    return (fallback if rate is None else rate), 1 if min_n is None else int(min_n), rate is not None


def _slice_status(
    dimension: str, value: str, entry: Mapping, gate: tuple[float, int, bool], release: Mapping
) -> str:
    """``fail``: the slice blocks the release; ``warn``: below the drawn line but did not block it.

    A slice can sit below the line without blocking when it has fewer than ``min_n`` cases, or when the
    line is the ``slice_gate`` argument rather than the gate the run was decided with.
    """
    rate, n = finite(entry.get("releasable_rate")), finite(entry.get("n")) or 0
    if isinstance(release.get("failed_slices"), list):  # the decision is the authority on what blocked
        listed = map(_mapping, release["failed_slices"])
        failed = any(s.get("dimension") == dimension and s.get("value") == value for s in listed)
    else:
        failed = rate is not None and rate < gate[0] and n >= gate[1]
    if failed:
        return "fail"
    if rate is None:
        return "na"
    return "warn" if rate < gate[0] else "pass"


def _worst_first(values: Mapping) -> list[tuple[str, Mapping]]:
    """Lowest releasable rate first (missing last); among equals the larger slice, then by name."""

    def key(item: tuple[str, Mapping]) -> tuple:
        rate = finite(item[1].get("releasable_rate"))
        return (2.0 if rate is None else rate, -(finite(item[1].get("n")) or 0), item[0])

    return sorted(((str(v), _mapping(e)) for v, e in values.items()), key=key)


def _slices_section(report: Mapping, release: Mapping, fallback: float) -> str:
    slices = _mapping(report.get("slices"))
    if not slices:
        text = "No slices: the report has no layered evaluation (score with --evidence) or no tags."
        return _section("slices", "Slices", _note(text, "slices"))
    gate = _slice_gate(report, release, fallback)
    rule = (
        f"A slice with at least {gate[1]} case(s) below {_share(gate[0])} blocks the release."
        if gate[2]
        else f"The report does not state its slice gate; the line is drawn at {_share(gate[0])}."
    )
    parts = [
        _note(f"Releasable rate per value of each tag with its 95% Wilson interval. {rule}", "slice-gate")
    ]
    for dimension, values in slices.items():
        ordered = _worst_first(_mapping(values))
        statuses = [_slice_status(str(dimension), v, e, gate, release) for v, e in ordered]
        parts.append(f"<h3>{esc(dimension)}</h3>")
        parts.append(_slice_chart(str(dimension), ordered, statuses, gate))
        parts.append(_slice_table(report, ordered, statuses))
    return _section("slices", "Slices", *parts)


def _slice_chart(dimension: str, ordered: list, statuses: list[str], gate: tuple[float, int, bool]) -> str:
    rows = [
        Row(
            label=value,
            value=finite(entry.get("releasable_rate")),
            status=status,
            low=_pair(entry.get("releasable_ci95"))[0],
            high=_pair(entry.get("releasable_ci95"))[1],
            value_text=_pct(entry.get("releasable_rate")),
            note=f"n = {_count(entry.get('n'))}",
        )
        for (value, entry), status in zip(ordered, statuses, strict=True)
    ]
    keys = [
        Key("dot", STATUS["pass"], "meets the slice gate"),
        Key("dot", STATUS["fail"], "blocks the release"),
    ]
    if "warn" in statuses:
        keys.append(Key("dot", STATUS["warn"], "below the line, did not block"))
    keys += [Key("whisker", INK, "95% Wilson interval"), Key("dash", INK, f"slice gate {_share(gate[0])}")]
    chart = row_chart(
        rows,
        title=f"Releasable rate per {dimension}",
        description=f"Releasable rate of each {dimension} value, worst first, with its 95% interval.",
        axis_label="releasable rate",
        keys=keys,
        bars=False,
        reference=gate[0],
        reference_label=f"min {_share(gate[0])}",
    )
    return _figure(f"slices-{dimension}", f"Releasable rate per {dimension}, worst first", chart)


def _slice_metric_names(ordered: list) -> list[str]:
    """Every metric a slice reports with its count (``name`` and ``name_n``), in the report's order."""
    names: list[str] = []
    for _, entry in ordered:
        names += [k for k in entry if f"{k}_n" in entry and k != "releasable" and k not in names]
    return names


def _slice_table(report: Mapping, ordered: list, statuses: list[str]) -> str:
    """The layered metrics per slice (``(n)`` = cases where the metric applies); all cases first."""
    names = _slice_metric_names(ordered)
    layered, denominators = _mapping(report.get("layered")), _mapping(report.get("layered_denominators"))
    rows = []
    if layered:
        overall = [_metric_cell(layered.get(m), denominators.get(m)) for m in names]
        total = _count(report.get("n_cases"))
        rows.append(("all", ["<i>all cases</i>", total, _pct(layered.get("releasable_rate")), "", *overall]))
    for (value, entry), status in zip(ordered, statuses, strict=True):
        cells = [_metric_cell(entry.get(m), entry.get(f"{m}_n")) for m in names]
        rate, ci = _pct(entry.get("releasable_rate")), _interval(*_pair(entry.get("releasable_ci95")))
        rows.append((status, [esc(value), _count(entry.get("n")), rate, ci, *cells]))
    return _table(("slice", "n", "releasable", "95% CI", *names), rows, cls="compact")


def _metric_cell(value: object, n: object) -> str:
    return _fixed(value) + (_small(f"({_count(n)})") if finite(n) is not None else "")


# -- stages ----------------------------------------------------------------------------------------


def _stages_section(report: Mapping, release: Mapping) -> str:
    histogram = _mapping(report.get("first_failed_stage_histogram")) or _mapping(
        release.get("first_failed_stage_histogram")
    )
    if not histogram:
        return _section(
            "stages", "First failed stage", _note("No layered evaluation in this report.", "stages")
        )
    total = sum(finite(c) or 0 for c in histogram.values())
    rows = []
    for stage, count in histogram.items():
        value = finite(count)
        status = "na" if not value else "pass" if stage == "pass" else "fail"
        share = f" ({value / total:.1%})" if value is not None and total else ""
        rows.append(Row(label=str(stage), value=value, status=status, value_text=f"{_count(count)}{share}"))
    chart = row_chart(
        rows,
        title="First failed stage per case",
        description="Cases by the first pipeline stage they fail, in pipeline order; pass means releasable.",
        axis_label="cases",
        keys=[Key("box", STATUS["pass"], "releasable"), Key("box", STATUS["fail"], "first failed here")],
        ceil=None,
        tick_format=plain,
        integer=True,
    )
    figure = _figure("stages", "Cases by first failed stage, in pipeline order", chart)
    return _section("stages", "First failed stage", figure)


# -- trend over past runs --------------------------------------------------------------------------


def _run_label(entry: Mapping) -> str:
    """The index version; else the run id, without the CLI's timestamp prefix (the x axis has the day)."""
    if entry.get("index_version"):
        return str(entry["index_version"])
    run_id = str(entry.get("run_id") or "?")
    match = _RUN_ID_TIME.match(run_id)
    suffix = run_id[match.end() :].lstrip("-") if match else ""
    return suffix or run_id


def _rate_floor(series: Sequence[Series]) -> float:
    """A y-axis floor just below the lowest rate: key metrics live near 1 and would be squashed on 0–1."""
    lowest = min((v for s in series for v in s.values if v is not None), default=0.0)
    return max(0.0, math.floor((lowest - 0.05) * 10) / 10)


def _trend_section(history: Sequence[Mapping], run_id: object) -> str:
    points = [h for h in history if isinstance(h, Mapping)]
    metrics = [
        m for m in KEY_METRICS if any(finite(_mapping(h.get("metrics")).get(m)) is not None for h in points)
    ]
    if len(points) < 2 or not metrics:
        text = f"A trend needs at least two past runs with key metrics; this page was given {len(points)}."
        return _section("trend", "Trend over past runs", _note(text, "trend"))
    values = {m: [finite(_mapping(h.get("metrics")).get(m)) for h in points] for m in metrics}
    series = [Series(m, values[m], PALETTE[i % len(PALETTE)]) for i, m in enumerate(metrics)]
    current = [i for i, h in enumerate(points) if run_id is not None and h.get("run_id") == run_id]
    chart = line_chart(
        [_run_label(h) for h in points],
        series,
        title="Key metrics over past runs",
        description="One line per key metric, oldest run first; point fill = the run's release decision.",
        axis_label="value",
        sub_labels=[_day(h.get("timestamp")) for h in points],
        point_fills=[DECISION_COLOURS.get(h.get("decision")) for h in points],
        extra_keys=[
            Key("dot", DECISION_COLOURS["ship"], "shipped"),
            Key("dot", DECISION_COLOURS["block"], "blocked"),
        ],
        floor=_rate_floor(series),
        highlight=current[-1] if current else None,
    )
    caption = "Key metrics per run, oldest first (x: index version or short run id; point fill: decision)"
    return _section(
        "trend", "Trend over past runs", _figure("trend", caption, chart), _trend_table(points, values)
    )


def _trend_table(points: list[Mapping], values: dict[str, list[float | None]]) -> str:
    """The latest runs as figures (the chart shows them all), oldest first like the chart."""
    shown = range(max(0, len(points) - TREND_TABLE_RUNS), len(points))
    rows = [_trend_row(points[i], [values[m][i] for m in values]) for i in shown]
    table = _table(("run", "index version", "day", "decision", *values), rows, cls="compact")
    if len(shown) < len(points):
        table = _note(f"The latest {len(shown)} of {len(points)} runs:", "trend-table") + table
    return table


def _trend_row(run: Mapping, figures: list[float | None]) -> tuple[str, list[str]]:
    cells = [esc(run.get(key) or "n/a") for key in ("run_id", "index_version")]
    cells += [_day(run.get("timestamp")) or "n/a", esc(run.get("decision") or "n/a")]
    return ("fail" if run.get("decision") == "block" else "", cells + [_fixed(v) for v in figures])


# -- production ------------------------------------------------------------------------------------


def _metric(day: Mapping, name: str) -> Mapping:
    """One metric of a daily summary or slice as a mapping; a bare number becomes ``{"value": x}``."""
    raw = _mapping(day.get("metrics")).get(name)
    return raw if isinstance(raw, Mapping) else {"value": raw}


def _production_section(production: Sequence[Mapping]) -> str:
    days = [d for d in production if isinstance(d, Mapping)]
    labels = [str(d.get("day") or "?") for d in days]
    subs = [f"n = {_count(d.get('n'))}" for d in days]
    parts = [_production_rates(days, labels, subs), _latency(days, labels, subs)]
    if days:
        parts.append(_production_slices(days[-1]))
    return _section("production", "Production (sampled traffic)", *parts)


def _production_rates(days: list[Mapping], labels: list[str], subs: list[str]) -> str:
    """One line per rate any day carries; fabrication is plotted as its rate, not its count."""
    series = []
    for name in PRODUCTION_RATES:
        key = "rate" if name == "fabrication" else "value"
        values = [finite(_metric(d, name).get(key)) for d in days]
        if any(v is not None for v in values):
            lows = [finite(_metric(d, name).get("low")) for d in days]
            highs = [finite(_metric(d, name).get("high")) for d in days]
            label = "fabrication rate" if name == "fabrication" else name
            series.append(Series(label, values, PALETTE[len(series) % len(PALETTE)], lows, highs))
    if not series:
        return _note("No production rates in the daily summaries.", "production-trend")
    chart = line_chart(
        labels,
        series,
        title="Production rates per day",
        description="Daily reference-free rates on sampled production traces with 95% Wilson intervals.",
        axis_label="rate",
        sub_labels=subs,
    )
    caption = "Daily rates with 95% intervals (shaded bands; whiskers where a day stands alone)"
    return _figure("production-trend", caption, chart)


def _latency(days: list[Mapping], labels: list[str], subs: list[str]) -> str:
    series = []
    for name in LATENCIES:
        values = [finite(_metric(d, name).get("value")) for d in days]
        if any(v is not None for v in values):
            label = name.removeprefix("latency_").removesuffix("_ms")
            series.append(Series(label, values, PALETTE[len(series) % len(PALETTE)]))
    if not series:
        return _note("No latency figures in the daily summaries.", "production-latency")
    chart = line_chart(
        labels,
        series,
        title="Production latency per day",
        description="Daily latency percentiles p50 and p95 in milliseconds.",
        axis_label="milliseconds",
        sub_labels=subs,
        ceil=None,
        tick_format=plain,
        point_format=lambda v: f"{v:.0f} ms",
    )
    return _figure("production-latency", "Latency p50 / p95 per day (ms)", chart)


def _production_names(day: Mapping) -> list[str]:
    seen = set(_mapping(day.get("metrics")))
    for values in _mapping(day.get("slices")).values():
        for entry in _mapping(values).values():
            seen |= set(_mapping(_mapping(entry).get("metrics")))
    known = [n for n in (*PRODUCTION_RATES, *LATENCIES) if n in seen]
    return known + sorted(str(n) for n in seen - set(known))


def _production_cell(name: str, metric: Mapping) -> str:
    """A figure with its context in small print: a rate with its interval and ``(n)``, the fabrication
    count with its rate, a latency in ms."""
    value, n = metric.get("value"), finite(metric.get("n"))
    count = f"({_count(n)})" if n is not None else ""
    if name == "fabrication":  # a count of fabricating answers; its rate is the comparable figure
        if finite(value) is None and finite(metric.get("rate")) is None:
            return "n/a"
        rate = _pct(metric.get("rate"))
        return _count(value) + _small(f"{rate} {count}".strip())
    if finite(value) is None:
        return "n/a"
    if name.endswith("_ms"):
        return f"{finite(value):.0f} ms" + (_small(count) if count else "")
    if "low" in metric or "high" in metric:
        interval = _interval(metric.get("low"), metric.get("high"))
        return f'{_pct(value)}<br><span class="n">{interval} {count}</span>'
    return _fixed(value) + (_small(count) if count else "")


def _production_slices(day: Mapping) -> str:
    """The latest day: all traffic first, then every slice."""
    names = _production_names(day)
    overall = [_production_cell(m, _metric(day, m)) for m in names]
    rows = [("all", ["<i>all traffic</i>", _count(day.get("n")), *overall])]
    for dimension, values in _mapping(day.get("slices")).items():
        for value, entry in _mapping(values).items():
            cells = [_production_cell(m, _metric(_mapping(entry), m)) for m in names]
            rows.append(("", [f"{esc(dimension)}={esc(value)}", _count(_mapping(entry).get("n")), *cells]))
    heading = f"<h3>Latest day: {esc(day.get('day') or 'n/a')}</h3>"
    return heading + _table(("slice", "n", *names), rows, cls="compact")


_CSS = """
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
ul.reasons li { color: #a40e26; }
ul.soft li { color: #9a6700; }
p.verdict { color: #1a7f37; font-weight: 600; }
figure { margin: 10px 0 14px; }
figcaption { color: #57606a; font-size: 13px; margin-bottom: 4px; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg text { fill: #24292f; }
svg .tick, svg .small, svg .legend, svg .axis { fill: #57606a; }
svg .tick, svg .small { font-size: 11px; }
svg .fail { fill: #a40e26; font-weight: 600; }
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
.n { color: #6e7781; font-size: 11px; }
.pill { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.pill.pass { background: #dafbe1; color: #116329; }
.pill.fail { background: #ffebe9; color: #a40e26; }
.pill.na, .pill.warn { background: #eaeef2; color: #57606a; }
.note { color: #57606a; font-style: italic; }
@media print {
  main { max-width: none; padding: 0; }
  h2, h3 { break-after: avoid; }
  figure, table, dl.facts { break-inside: avoid; }
  .scroll { overflow: visible; }
  .badge, .pill, tr td { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  @page { margin: 14mm; }
}
"""

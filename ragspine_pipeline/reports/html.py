"""A standalone HTML page for one evaluation run: decision, gates, slices with intervals, stages, trends.

:func:`render_html` reads the JSON report of ``reports.evaluation.summary`` (what ``--format json``
writes; a ``cases`` array, if present, is ignored), optionally past runs and daily production summaries,
and returns one HTML document: inline CSS and SVG, no script, nothing fetched from the network. It is
pure (no file IO, no clock): the same input gives the same string, and the caller writes the file.

Every text taken from the data is HTML-escaped; a missing, ``None`` or non-finite number prints ``n/a``
and is never plotted. Each chart sits in a ``<figure data-chart="…">`` with a stable name: ``gates``,
``qa-gates``, ``slices-<dimension>``, ``stages``, ``extraction``, ``trend``, ``production-trend``,
``production-latency``. A section that has nothing to plot shows a ``<p class="note" data-note="…">``
instead of an empty chart. Sections live in :mod:`reports.html_qa` and :mod:`reports.html_production`
besides this module; the shared building blocks and the stylesheet in :mod:`reports.html_parts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from ragspine_pipeline.reports.html_judge import judge_section
from ragspine_pipeline.reports.html_parts import (
    STATUS_ORDER,
    applies,
    count,
    day,
    document,
    figure,
    figures_table,
    fixed,
    gate_status,
    generated_at,
    golden_version,
    index_versions,
    interval,
    mapping,
    metric_cell,
    note,
    op,
    pair,
    pct,
    pill,
    rate_floor,
    run_label,
    section,
    share,
    signed,
    small,
    table,
)
from ragspine_pipeline.reports.html_production import production_section
from ragspine_pipeline.reports.html_qa import extraction_section, qa_section
from ragspine_pipeline.reports.why import why_html

KEY_METRICS = ("releasable_rate", "precision", "admissible_rate", "context_recall", "faithfulness")
TREND_TABLE_RUNS = 10
DEFAULT_SLICE_GATE = 0.95  # SPEC §3.2; drawn only when the report does not carry its own slice gate
DECISION_COLOURS = {"ship": STATUS["pass"], "block": STATUS["fail"]}


def render_html(
    report: Mapping,
    *,
    history: Sequence[Mapping] = (),
    production: Sequence[Mapping] = (),
    title: str = "Release evaluation",
    slice_gate: float = DEFAULT_SLICE_GATE,
    extraction: Mapping | None = None,
    judge: Mapping | None = None,
) -> str:
    """The whole page as a string.

    ``history``: past runs, oldest first, ``{run_id, timestamp (epoch s), index_version, decision,
    metrics: {name: value}}``; include this run (e.g. via :func:`history_entry`) to plot it.
    ``production``: daily summaries, oldest first; the production section appears only when given.
    ``slice_gate``: the slice threshold (``min_rate``) drawn when the report carries none.
    ``extraction``: an extraction result (``ExtractionResult.to_dict``); its section appears only when given.
    The QA-gates section appears only when the report has ``qa_gates``; the LLM-judge section only when
    ``judge`` (a ``judge.report.judge_report``) is given.
    """
    release = mapping(report.get("release"))
    sections = [_header(report, release, history, title), _reasons(release), _gates_section(report, release)]
    if report.get("qa_gates"):
        sections.append(qa_section(report))
    sections += [_slices_section(report, release, slice_gate), _stages_section(report, release)]
    if judge is not None:
        sections.append(judge_section(judge))
    if extraction is not None:
        sections.append(extraction_section(extraction))
    sections.append(_trend_section(history, release.get("run_id")))
    if production:
        sections.append(production_section(production))
    return document(title, sections)


def history_entry(report: Mapping, *, timestamp: float) -> dict:
    """This run as one ``history`` point: every grounded and layered figure of the report, flat; None
    for a metric that does not apply to the run (it is not plotted)."""
    release = mapping(report.get("release"))
    grounded = {name: report.get(name) for name in mapping(report.get("denominators"))}
    figures = {**grounded, **mapping(report.get("layered"))}
    return {
        "run_id": release.get("run_id"),
        "timestamp": timestamp,
        "index_version": release.get("index_version"),
        "decision": release.get("decision"),
        "metrics": {name: value if applies(report, name) else None for name, value in figures.items()},
    }


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
    size = f"{count(report.get('n_cases'))} cases, {count(report.get('traces'))} traces"
    facts = [
        ("index version", index_versions(release)),
        ("golden set", golden_version(release)),
        ("run id", str(release.get("run_id") or "n/a")),
        ("generated", generated_at(report, release.get("run_id"), history)),
        ("cases", f"{size}, k = {count(report.get('k'))}"),
    ]
    facts += [(name, str(report[name])) for name in ("gold", "trace", "evidence") if report.get(name)]
    rows = "".join(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>" for name, value in facts)
    warnings = "".join(f"<li>{esc(w)}</li>" for w in report.get("warnings") or [] if w)
    return f'<header class="top"><h1>{esc(title)}</h1>{badge}</header>\n<dl class="facts">{rows}</dl>' + (
        f'\n<ul class="warnings">{warnings}</ul>' if warnings else ""
    )


def _reasons(release: Mapping) -> str:
    """Why the release is blocked: where the failing cases stop and the worst of them (when the decision
    carries ``causes``), then one line per index problem, failed gate, slice and regression; then soft
    warnings."""
    items = [
        f"blocked: <b>{esc(p.get('reason'))}</b>: {esc(p.get('detail'))}"
        for p in map(mapping, release.get("integrity") or [])
    ]
    items += [
        f"gate <b>{esc(g.get('metric'))}</b> = {fixed(g.get('value'))}, needs {op(g.get('op'))} "
        f"{fixed(g.get('threshold'))} (Δ {signed(g.get('delta'))})"
        for g in map(mapping, release.get("failed_gates") or [])
    ]
    items += [
        f"{esc(g.get('severity'))} gate <b>{esc(g.get('metric'))}</b> was not measured, needs "
        f"{op(g.get('op'))} {fixed(g.get('threshold'))}: it fails"
        for g in map(mapping, release.get("unmeasured_gates") or [])
    ]
    items += [
        f"slice <b>{esc(s.get('dimension'))}={esc(s.get('value'))}</b>: releasable "
        f"{pct(s.get('releasable_rate'))} of {count(s.get('n'))} "
        f"(95% CI {interval(*pair(s.get('ci95')))}), needs ≥ {pct(s.get('min_rate'))}"
        for s in map(mapping, release.get("failed_slices") or [])
    ]
    items += [
        f"regression <b>{esc(r.get('metric'))}</b>: {fixed(r.get('current'))} vs baseline "
        f"{fixed(r.get('baseline'))} (Δ {signed(r.get('delta'))})"
        for r in map(mapping, release.get("regressions") or [])
    ]
    soft = [
        f"soft gate <b>{esc(g.get('metric'))}</b> = {fixed(g.get('value'))}, wants {op(g.get('op'))} "
        f"{fixed(g.get('threshold'))} (Δ {signed(g.get('delta'))}): a warning, it does not block"
        for g in map(mapping, release.get("warned_gates") or [])
    ]
    warned = '<ul class="soft">' + "".join(f"<li>{item}</li>" for item in soft) + "</ul>" if soft else ""
    if items:
        why = why_html(mapping(release.get("causes"))) if release.get("decision") == "block" else ""
        return why + '<ul class="reasons">' + "".join(f"<li>{item}</li>" for item in items) + "</ul>" + warned
    if not release:
        return note("This report carries no release decision.", "decision")
    return '<p class="verdict">Every gate, slice and baselined metric holds.</p>' + warned


# -- gates -----------------------------------------------------------------------------------------


def _gates_section(report: Mapping, release: Mapping) -> str:
    gates = [g for g in report.get("gates") or [] if isinstance(g, Mapping)]
    if not gates:
        return section("gates", "Gates", note("No gates in this report.", "gates"))
    gates.sort(key=lambda g: STATUS_ORDER[gate_status(g)])  # failed first, else in the report's order
    caption = "Gates, failed first (≥: the bar must reach the tick; ≤: it must stay at or below it)"
    not_applicable = [str(g.get("metric")) for g in gates if gate_status(g) == "na"]
    return section(
        "gates",
        "Gates",
        figure("gates", caption, _gates_chart(gates)),
        _gates_table(gates),
        note(
            f"Not applicable to this run (no case to measure), so not checked and not blocking: "
            f"{', '.join(not_applicable)}.",
            "gates-not-applicable",
        )
        if not_applicable
        else "",
        _regressions(release),
        figures_table(report),
    )


def _gates_chart(gates: list[Mapping]) -> str:
    rows = [
        Row(
            label=str(g.get("metric")),
            value=_gate_value(g),
            status=gate_status(g),
            marker=finite(g.get("threshold")),
            value_text=f"{fixed(_gate_value(g))} {op(g.get('op'))} {fixed(g.get('threshold'))}",
            note="" if g.get("applicable") is not False else "applies to no case",
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


def _gate_value(gate: Mapping) -> float | None:
    """The gate's value; None when its metric does not apply to the run (``applicable`` false)."""
    return None if gate.get("applicable") is False else finite(gate.get("value"))


def _gates_table(gates: list[Mapping]) -> str:
    def delta(gate: Mapping) -> str:
        value, threshold = _gate_value(gate), finite(gate.get("threshold"))
        return "n/a" if value is None or threshold is None else signed(value - threshold)

    rows = [
        (
            gate_status(g),
            [
                esc(g.get("metric")),
                f"{op(g.get('op'))} {fixed(g.get('threshold'))}",
                fixed(_gate_value(g)) + (small("(0 cases)") if g.get("applicable") is False else ""),
                delta(g),
                esc(g.get("severity") or "hard"),
                pill(gate_status(g), warn="warns", na="n/a: does not block"),
            ],
        )
        for g in gates
    ]
    return table(("metric", "gate", "value", "Δ (value − threshold)", "severity", "result"), rows)


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
                    *(fixed(r.get(k)) for k in ("baseline", "current")),
                    signed(r.get("delta")),
                ],
            )
            for r in regressions
        ]
        parts.append("<h3>Baseline regressions</h3>" + table(("metric", "baseline", "current", "Δ"), rows))
    if unmeasured:
        parts.append(
            note(f"Baseline metrics this run did not measure: {', '.join(unmeasured)}.", "unmeasured")
        )
    return "\n".join(parts)


# -- slices ----------------------------------------------------------------------------------------


def _slice_gate(report: Mapping, release: Mapping, fallback: float) -> tuple[float, int, bool]:
    """``(min_rate, min_n, from the report)``: the report's slice gate, else a failed slice's rate, else
    ``fallback`` (then the third element is False and the page says the line is assumed)."""
    gate = mapping(report.get("slice_gate")) or mapping(release.get("slice_gate"))
    rates = [finite(mapping(s).get("min_rate")) for s in release.get("failed_slices") or []]
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
        listed = map(mapping, release["failed_slices"])
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

    return sorted(((str(v), mapping(e)) for v, e in values.items()), key=key)


def _slices_section(report: Mapping, release: Mapping, fallback: float) -> str:
    slices = mapping(report.get("slices"))
    if not slices:
        text = "No slices: the report has no layered evaluation (score with --evidence) or no tags."
        return section("slices", "Slices", note(text, "slices"))
    gate = _slice_gate(report, release, fallback)
    rule = (
        f"A slice with at least {gate[1]} case(s) below {share(gate[0])} blocks the release."
        if gate[2]
        else f"The report does not state its slice gate; the line is drawn at {share(gate[0])}."
    )
    parts = [
        note(f"Releasable rate per value of each tag with its 95% Wilson interval. {rule}", "slice-gate")
    ]
    for dimension, values in slices.items():
        ordered = _worst_first(mapping(values))
        statuses = [_slice_status(str(dimension), v, e, gate, release) for v, e in ordered]
        parts.append(f"<h3>{esc(dimension)}</h3>")
        parts.append(_slice_chart(str(dimension), ordered, statuses, gate))
        parts.append(_slice_table(report, ordered, statuses))
    return section("slices", "Slices", *parts)


def _slice_chart(dimension: str, ordered: list, statuses: list[str], gate: tuple[float, int, bool]) -> str:
    rows = [
        Row(
            label=value,
            value=finite(entry.get("releasable_rate")),
            status=status,
            low=pair(entry.get("releasable_ci95"))[0],
            high=pair(entry.get("releasable_ci95"))[1],
            value_text=pct(entry.get("releasable_rate")),
            note=f"n = {count(entry.get('n'))}",
        )
        for (value, entry), status in zip(ordered, statuses, strict=True)
    ]
    keys = [
        Key("dot", STATUS["pass"], "meets the slice gate"),
        Key("dot", STATUS["fail"], "blocks the release"),
    ]
    if "warn" in statuses:
        keys.append(Key("dot", STATUS["warn"], "below the line, did not block"))
    keys += [Key("whisker", INK, "95% Wilson interval"), Key("dash", INK, f"slice gate {share(gate[0])}")]
    chart = row_chart(
        rows,
        title=f"Releasable rate per {dimension}",
        description=f"Releasable rate of each {dimension} value, worst first, with its 95% interval.",
        axis_label="releasable rate",
        keys=keys,
        bars=False,
        reference=gate[0],
        reference_label=f"min {share(gate[0])}",
    )
    return figure(f"slices-{dimension}", f"Releasable rate per {dimension}, worst first", chart)


def _slice_metric_names(ordered: list) -> list[str]:
    """Every metric a slice reports with its count (``name`` and ``name_n``), in the report's order."""
    names: list[str] = []
    for _, entry in ordered:
        names += [k for k in entry if f"{k}_n" in entry and k != "releasable" and k not in names]
    return names


def _slice_table(report: Mapping, ordered: list, statuses: list[str]) -> str:
    """The layered metrics per slice (``(n)`` = cases where the metric applies); all cases first."""
    names = _slice_metric_names(ordered)
    layered, denominators = mapping(report.get("layered")), mapping(report.get("layered_denominators"))
    rows = []
    if layered:
        overall = [metric_cell(layered.get(m), denominators.get(m)) for m in names]
        total = count(report.get("n_cases"))
        rows.append(("all", ["<i>all cases</i>", total, pct(layered.get("releasable_rate")), "", *overall]))
    for (value, entry), status in zip(ordered, statuses, strict=True):
        cells = [metric_cell(entry.get(m), entry.get(f"{m}_n")) for m in names]
        rate, ci = pct(entry.get("releasable_rate")), interval(*pair(entry.get("releasable_ci95")))
        rows.append((status, [esc(value), count(entry.get("n")), rate, ci, *cells]))
    return table(("slice", "n", "releasable", "95% CI", *names), rows, cls="compact")


# -- stages ----------------------------------------------------------------------------------------


def _stages_section(report: Mapping, release: Mapping) -> str:
    histogram = mapping(report.get("first_failed_stage_histogram")) or mapping(
        release.get("first_failed_stage_histogram")
    )
    if not histogram:
        return section(
            "stages", "First failed stage", note("No layered evaluation in this report.", "stages")
        )
    total = sum(finite(c) or 0 for c in histogram.values())
    rows = []
    for stage, cases in histogram.items():
        value = finite(cases)
        status = "na" if not value else "pass" if stage == "pass" else "fail"
        part = f" ({value / total:.1%})" if value is not None and total else ""
        rows.append(Row(label=str(stage), value=value, status=status, value_text=f"{count(cases)}{part}"))
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
    caption = "Cases by first failed stage, in pipeline order"
    return section("stages", "First failed stage", figure("stages", caption, chart))


# -- trend over past runs --------------------------------------------------------------------------


def _trend_section(history: Sequence[Mapping], run_id: object) -> str:
    points = [h for h in history if isinstance(h, Mapping)]
    metrics = [
        m for m in KEY_METRICS if any(finite(mapping(h.get("metrics")).get(m)) is not None for h in points)
    ]
    if len(points) < 2 or not metrics:
        text = f"A trend needs at least two past runs with key metrics; this page was given {len(points)}."
        return section("trend", "Trend over past runs", note(text, "trend"))
    values = {m: [finite(mapping(h.get("metrics")).get(m)) for h in points] for m in metrics}
    series = [Series(m, values[m], PALETTE[i % len(PALETTE)]) for i, m in enumerate(metrics)]
    current = [i for i, h in enumerate(points) if run_id is not None and h.get("run_id") == run_id]
    chart = line_chart(
        [run_label(h) for h in points],
        series,
        title="Key metrics over past runs",
        description="One line per key metric, oldest run first; point fill = the run's release decision.",
        axis_label="value",
        sub_labels=[day(h.get("timestamp")) for h in points],
        point_fills=[DECISION_COLOURS.get(h.get("decision")) for h in points],
        extra_keys=[
            Key("dot", DECISION_COLOURS["ship"], "shipped"),
            Key("dot", DECISION_COLOURS["block"], "blocked"),
        ],
        floor=rate_floor(series),
        highlight=current[-1] if current else None,
    )
    caption = "Key metrics per run, oldest first (x: index version or short run id; point fill: decision)"
    return section(
        "trend", "Trend over past runs", figure("trend", caption, chart), _trend_table(points, values)
    )


def _trend_table(points: list[Mapping], values: dict[str, list[float | None]]) -> str:
    """The latest runs as figures (the chart shows them all), oldest first like the chart."""
    shown = range(max(0, len(points) - TREND_TABLE_RUNS), len(points))
    rows = [_trend_row(points[i], [values[m][i] for m in values]) for i in shown]
    runs = table(("run", "index version", "day", "decision", *values), rows, cls="compact")
    if len(shown) < len(points):
        runs = note(f"The latest {len(shown)} of {len(points)} runs:", "trend-table") + runs
    return runs


def _trend_row(run: Mapping, figures: list[float | None]) -> tuple[str, list[str]]:
    cells = [esc(run.get(key) or "n/a") for key in ("run_id", "index_version")]
    cells += [day(run.get("timestamp")) or "n/a", esc(run.get("decision") or "n/a")]
    return ("fail" if run.get("decision") == "block" else "", cells + [fixed(v) for v in figures])

"""A standalone HTML page for one evaluation run: decision, gates, slices with intervals, stages, trends.

:func:`render_html` reads the JSON report of ``reports.evaluation.summary`` (what ``--format json``
writes; a ``cases`` array, if present, is ignored), optionally past runs and daily production summaries,
and returns one HTML document: inline CSS and SVG, no script, nothing fetched from the network. It is
pure (no file IO, no clock): the same input gives the same string, and the caller writes the file.

Every text taken from the data is HTML-escaped; a missing, ``None`` or non-finite number prints ``n/a``
and is never plotted. Each chart sits in a ``<figure data-chart="…">`` with a stable name: ``gates``,
``gates-counts``, ``qa-gates``, ``slices-<dimension>``, ``stages``, ``extraction``, ``trend``,
``production-trend``, ``production-latency``; each has a title and names its x and y axes with their
units. A section that has nothing to plot shows a ``<p class="note" data-note="…">`` instead of an empty
chart. The page opens with the decision and, for a blocked run, its cause. Sections live in
:mod:`reports.html_gates`, :mod:`reports.html_slices`, :mod:`reports.html_qa` and
:mod:`reports.html_production` besides this module; the shared building blocks and the stylesheet in
:mod:`reports.html_parts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragspine_pipeline.reports.charts import PALETTE, STATUS, Key, Row, esc, finite, plain, row_chart
from ragspine_pipeline.reports.charts_lines import Series, small_multiples
from ragspine_pipeline.reports.html_gates import gate_delta, gates_section
from ragspine_pipeline.reports.html_judge import judge_section
from ragspine_pipeline.reports.html_parts import (
    count,
    day,
    document,
    figure,
    fixed,
    gate_figure,
    generated_at,
    golden_version,
    index_versions,
    interval,
    mapping,
    needs,
    note,
    pair,
    pct,
    run_label,
    section,
    signed,
    table,
)
from ragspine_pipeline.reports.html_production import production_section
from ragspine_pipeline.reports.html_qa import extraction_section, qa_section
from ragspine_pipeline.reports.html_slices import slices_section
from ragspine_pipeline.reports.slice_gate import SliceGate, slice_gate_of, ungated_slices
from ragspine_pipeline.reports.why import why_html

KEY_METRICS = ("releasable_rate", "precision", "admissible_rate", "context_recall", "claim_faithfulness")
TREND_TABLE_RUNS = 10
UNGATED_NAMED = 12  # slices named in the note on slices too small to gate; the slice tables list them all
# The slice gate's usual min_rate; drawn only when the report does not carry its own slice gate.
DEFAULT_SLICE_GATE = 0.95
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
    gate = slice_gate_of(report, slice_gate)
    sections = [_header(report, release, history, title), _decision_section(report, release, gate)]
    sections.append(gates_section(report, release))
    if report.get("qa_gates"):
        sections.append(qa_section(report))
    sections += [slices_section(report, release, gate), _stages_section(report, release)]
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
        "metrics": dict(figures),  # a metric that does not apply is null already
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


def _decision_section(report: Mapping, release: Mapping, gate: SliceGate) -> str:
    """Why the release is blocked: where the failing cases stop and the worst of them (when the decision
    carries ``causes``), then one line per index problem, failed gate, slice and regression; then soft
    warnings and the slices too small to be gated. A shipping run says what holds, and only that."""
    items = [
        f"blocked: <b>{esc(p.get('reason'))}</b>: {esc(p.get('detail'))}"
        for p in map(mapping, release.get("integrity") or [])
    ]
    items += [
        f"gate <b>{esc(g.get('metric'))}</b> = {gate_figure(g.get('metric'), g.get('value'))}, {needs(g)} "
        f"(Δ {gate_delta(g)})"
        for g in map(mapping, release.get("failed_gates") or [])
    ]
    items += [
        f"{esc(g.get('severity'))} gate <b>{esc(g.get('metric'))}</b> was not measured, {needs(g)}: it fails"
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
        f"soft gate <b>{esc(g.get('metric'))}</b> = {gate_figure(g.get('metric'), g.get('value'))}, "
        f"{needs(g)} (Δ {gate_delta(g)}): a warning, it does not block"
        for g in map(mapping, release.get("warned_gates") or [])
    ]
    warned = '<ul class="soft">' + "".join(f"<li>{item}</li>" for item in soft) + "</ul>" if soft else ""
    ungated = _ungated_note(report, gate)
    if items:
        why = why_html(mapping(release.get("causes"))) if release.get("decision") == "block" else ""
        reasons = '<ul class="reasons">' + "".join(f"<li>{item}</li>" for item in items) + "</ul>"
        body = why + reasons + warned + ungated
    elif not release:
        body = note("This report carries no release decision.", "decision")
    else:
        slices = "every gated slice" if ungated else "every slice"
        verdict = f"Every gate, {slices} and every baselined metric holds."
        body = f'<p class="verdict">{verdict}</p>' + warned + ungated
    return section("decision", "Release decision", body)


def _ungated_note(report: Mapping, gate: SliceGate) -> str:
    """The slices too small for the slice gate, named: they are neither holding nor failing."""
    names = ungated_slices(report, gate)
    if not names:
        return ""
    more = len(names) - UNGATED_NAMED
    shown = ", ".join(names[:UNGATED_NAMED]) + (f" and {more} more" if more > 0 else "")
    text = (
        f"{len(names)} slice(s) with fewer than {gate.min_n} cases are not gated (shown, never blocking): "
        f"{shown}."
    )
    return note(text, "slices-not-gated")


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
        x_label="cases (count)",
        y_label="first failed stage",
        keys=[Key("box", STATUS["pass"], "releasable"), Key("box", STATUS["fail"], "first failed here")],
        ceil=None,
        tick_format=plain,
        integer=True,
    )
    caption = "Cases by first failed stage, in pipeline order"
    return section("stages", "First failed stage", figure("stages", caption, chart))


# -- trend over past runs --------------------------------------------------------------------------


def trend_points(history: Sequence[Mapping]) -> tuple[list[Mapping], dict[str, list[float | None]]]:
    """The past runs (oldest first) and, for each key metric any of them carries, its value per run
    (None where a run lacks it): what the HTML trend and the Markdown trend table show."""
    points = [h for h in history if isinstance(h, Mapping)]
    values = {m: [finite(mapping(h.get("metrics")).get(m)) for h in points] for m in KEY_METRICS}
    return points, {m: v for m, v in values.items() if any(x is not None for x in v)}


def _trend_section(history: Sequence[Mapping], run_id: object) -> str:
    points, values = trend_points(history)
    metrics = list(values)
    if len(points) < 2 or not metrics:
        text = f"A trend needs at least two past runs with key metrics; this page was given {len(points)}."
        return section("trend", "Trend over past runs", note(text, "trend"))
    series = [Series(m, values[m], PALETTE[0]) for m in metrics]  # each panel names its metric
    current = [i for i, h in enumerate(points) if run_id is not None and h.get("run_id") == run_id]
    chart = small_multiples(
        [run_label(h) for h in points],
        series,
        title="Key metrics over past runs, one panel per metric",
        description="One panel per key metric, oldest run first; point fill = the run's release decision.",
        y_label="metric value (%) — each panel its own range",
        x_label="golden run (index version or run id, and its day), oldest first",
        sub_labels=[day(h.get("timestamp")) for h in points],
        point_fills=[DECISION_COLOURS.get(h.get("decision")) for h in points],
        extra_keys=[
            Key("dot", DECISION_COLOURS["ship"], "shipped"),
            Key("dot", DECISION_COLOURS["block"], "blocked"),
        ],
        highlight=current[-1] if current else None,
    )
    caption = (
        "Key metrics per run, oldest first, one panel per metric on its own y range (x: index version or "
        "short run id; point fill: decision)"
    )
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

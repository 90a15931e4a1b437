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
chart. The page opens with the decision and what failed (for a blocked run, its cause first), then the
run's facts. Sections live in :mod:`reports.html_failed`, :mod:`reports.html_gates`,
:mod:`reports.html_slices`, :mod:`reports.html_qa`, :mod:`reports.html_trend` and
:mod:`reports.html_production` besides this module; the shared building blocks and the stylesheet in
:mod:`reports.html_parts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragspine_pipeline.pages import CASE_EXPLORER_PAGE
from ragspine_pipeline.reports.charts import STATUS, Key, esc, finite, plain
from ragspine_pipeline.reports.charts_rows import Row, row_chart
from ragspine_pipeline.reports.html_failed import failed_section, failures, held
from ragspine_pipeline.reports.html_gates import gates_section
from ragspine_pipeline.reports.html_judge import judge_section
from ragspine_pipeline.reports.html_parts import (
    count,
    document,
    figure,
    generated_at,
    golden_version,
    index_versions,
    mapping,
    note,
    section,
)
from ragspine_pipeline.reports.html_production import production_section
from ragspine_pipeline.reports.html_qa import extraction_section, qa_section
from ragspine_pipeline.reports.html_slices import slices_section
from ragspine_pipeline.reports.html_trend import DECISION_COLOURS, comparable_runs, trend_section
from ragspine_pipeline.reports.slice_gate import SliceGate, slice_gate_of, ungated_slices

UNGATED_NAMED = 12  # slices named in the note on slices too small to gate; the slice tables list them all
# The slice gate's usual min_rate; drawn only when the report does not carry its own slice gate.
DEFAULT_SLICE_GATE = 0.95


def render_html(
    report: Mapping,
    *,
    history: Sequence[Mapping] = (),
    production: Sequence[Mapping] = (),
    title: str = "Release evaluation",
    slice_gate: float = DEFAULT_SLICE_GATE,
    extraction: Mapping | None = None,
    judge: Mapping | None = None,
    mode: str | None = None,
    case_explorer: str | None = CASE_EXPLORER_PAGE,
) -> str:
    """The whole page as a string.

    ``history``: past runs, oldest first, ``{run_id, timestamp (epoch s), index_version, golden_version,
    mode, decision, metrics: {name: value}}``; include this run (e.g. via :func:`history_entry`) to plot
    it. The trend shows only the runs of this run's golden set and, when ``mode`` (the baseline mode) is
    given, of that mode (:func:`reports.html_trend.comparable_runs`).
    ``production``: daily summaries, oldest first; the production section appears only when given.
    ``slice_gate``: the slice threshold (``min_rate``) drawn when the report carries none.
    ``extraction``: an extraction result (``ExtractionResult.to_dict``); its section appears only when given.
    The QA-gates section appears only when the report has ``qa_gates``; the LLM-judge section only when
    ``judge`` (a ``judge.report.judge_report``) is given.
    ``case_explorer``: the relative link to the run's case explorer (None: no link).

    The page opens with the title and the decision, then "What failed": every failure of the report
    and of the results shown with it, whatever the decision (:mod:`reports.html_failed`).
    """
    release = mapping(report.get("release"))
    gate = slice_gate_of(report, slice_gate)
    decision = _decision(release, report)
    found = failures(report, gate, extraction=extraction, judge=judge, production=production)
    first = failed_section(
        decision,
        found,
        held(report, gate, extraction),
        causes=mapping(release.get("causes")),
        extra=_ungated_note(report, gate),
        case_explorer=case_explorer,
    )
    sections = [_title(title, decision), first, _facts(report, release, history)]
    sections.append(gates_section(report, release))
    if report.get("qa_gates"):
        sections.append(qa_section(report))
    sections += [slices_section(report, release, gate), _stages_section(report, release)]
    if judge is not None:
        sections.append(judge_section(judge))
    if extraction is not None:
        sections.append(extraction_section(extraction))
    trend = comparable_runs(history, release.get("golden_version"), mode)
    sections.append(trend_section(trend, release.get("run_id")))
    if production:
        sections.append(production_section(production))
    return document(title, sections)


def history_entry(report: Mapping, *, timestamp: float, mode: str | None = None) -> dict:
    """This run as one ``history`` point: every grounded and layered figure of the report, flat; None
    for a metric that does not apply to the run (it is not plotted). ``mode``: the baseline mode the
    run was judged in, when known."""
    release = mapping(report.get("release"))
    grounded = {name: report.get(name) for name in mapping(report.get("denominators"))}
    figures = {**grounded, **mapping(report.get("layered"))}
    return {
        "run_id": release.get("run_id"),
        "timestamp": timestamp,
        "index_version": release.get("index_version"),
        "golden_version": release.get("golden_version"),
        "mode": mode,
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


def _title(title: str, decision: str | None) -> str:
    shown = decision or "unknown"
    badge = f'<span class="badge {shown}" data-decision="{shown}">{shown.upper()}</span>'
    return f'<header class="top"><h1>{esc(title)}</h1>{badge}</header>'


def _facts(report: Mapping, release: Mapping, history: Sequence[Mapping]) -> str:
    """The run: versions, id, when, its size and inputs, and the report's warnings."""
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
    listed = f'<ul class="warnings">{warnings}</ul>' if warnings else ""
    return section("run", "This run", f'<dl class="facts">{rows}</dl>', listed)


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

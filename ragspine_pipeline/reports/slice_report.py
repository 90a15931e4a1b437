"""The slice report in Markdown, from the JSON summary of a golden run and the daily production summaries.

The same inputs as the HTML report (:mod:`reports.html`), so the two never disagree. A reader learns, in
order: the decision and what failed, whatever the decision (the verdict, where a blocked release's
failing cases stop and the worst of them, then every failure of :func:`reports.html_failed.failures`:
those that block first, then failed soft gates, extraction channels, production drops and the judge),
the slices too small to be gated, the link to the run's case explorer; then every gate with its
severity, the QA gates (when the golden set has RAGSpine cases), each slice worst first with its
interval and how the slice gate judged it, the first failed stage per case, the LLM judge and the
extraction channels (when given), the key metrics over past runs of the same golden set, and
production: the key rates of every day given, then the latest day per slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragspine_pipeline.decision.baseline import COUNT_METRICS
from ragspine_pipeline.pages import CASE_EXPLORER_PAGE
from ragspine_pipeline.reports.html import DEFAULT_SLICE_GATE
from ragspine_pipeline.reports.html_failed import Failure, failures, held, verdict
from ragspine_pipeline.reports.html_parts import (
    compact,
    count,
    day,
    fixed,
    headline_figures,
    share,
)
from ragspine_pipeline.reports.html_production import FABRICATION as PRODUCTION_FABRICATION
from ragspine_pipeline.reports.html_production import RATES as PRODUCTION_METRICS
from ragspine_pipeline.reports.html_qa import channel_checks, qa_failures
from ragspine_pipeline.reports.html_trend import TREND_TABLE_RUNS, Trend, comparable_runs, trend_points
from ragspine_pipeline.reports.markdown import code_span, md_text, tag_slices_markdown
from ragspine_pipeline.reports.markdown import figure_cell as _num
from ragspine_pipeline.reports.slice_gate import (
    UNGATED,
    SliceGate,
    slice_gate_of,
    slice_status,
    ungated_slices,
)
from ragspine_pipeline.reports.why import why_markdown

SLICE_METRICS = (
    "candidate_recall",
    "context_recall",
    "claim_faithfulness",
    "citation_support",
    "point_coverage",
)
QA_FAILURES = 20
LATENCIES = ("latency_p50_ms", "latency_p95_ms")


def slice_markdown(
    report: dict | None,
    production: Sequence[dict] = (),
    extraction: dict | None = None,
    judge: dict | None = None,
    *,
    history: Sequence[Mapping] = (),
    mode: str | None = None,
    case_explorer: str | None = CASE_EXPLORER_PAGE,
) -> str:
    """Markdown for the Dagster UI and ``slice_report.md``; ``report`` None when no golden run exists yet.

    ``production``: the daily summaries, oldest first (every day in one table, the latest per slice).
    ``extraction``: an extraction result (``ExtractionResult.to_dict``), shown as a channel table.
    ``judge``: the golden run's LLM-judge report (``judge.report.judge_report``), shown with intervals.
    ``history``: past golden runs, oldest first, as :func:`reports.html.render_html` takes them; the
    trend keeps those of this run's golden set and of ``mode`` (when given), as the HTML page does.
    ``case_explorer``: the relative link to the run's case explorer (None: no link).
    """
    parts = ["# Slice report\n"]
    if report is None:
        parts.append("No golden evaluation has been materialised yet (`reeval_on_index_rebuild`).\n")
    else:
        gate = slice_gate_of(report, DEFAULT_SLICE_GATE)
        found = failures(report, gate, extraction=extraction, judge=judge, production=production)
        parts += [_decision(report, gate, found, extraction, case_explorer), _gates(report)]
        if report.get("qa_gates"):
            parts.append(_qa_gates(report))
        parts.append(_slices(report, gate))
        stages = _stages(report)
        if stages:
            parts.append(stages)
    if judge is not None:
        parts.append(judge_markdown(judge))
    if extraction is not None:
        parts.append(_extraction(extraction))
    golden = ((report or {}).get("release") or {}).get("golden_version")
    trend = comparable_runs(history, golden, mode)
    if trend.runs or trend.left_out:
        parts.append(_trend(trend))
    if production:
        shown = (_production_days(production), _incidents(production[-1]), _production(production[-1]))
        parts += [part for part in shown if part]
    return "\n".join(parts)


def _decision(
    report: dict, gate: SliceGate, found: list[Failure], extraction: dict | None, case_explorer: str | None
) -> str:
    """The verdict, why a blocked release is blocked, every failure (those that block first), the
    slices too small to gate, the link to the case explorer and the run's versions."""
    release = report["release"]
    decision = release.get("decision")
    lines = [
        f"## Release decision: **{str(decision).upper()}**\n",
        md_text(verdict(decision, found, held(report, gate, extraction))) + "\n",
    ]
    if decision == "block":
        lines.append(why_markdown(release.get("causes")))
    for blocks, heading in ((True, "**Blocks the release:**"), (False, "**Does not block:**")):
        items = [_failure(f) for f in found if f.blocks is blocks]
        if items:
            lines.append(f"{heading}\n\n" + "\n".join(items) + "\n")
    lines.append(_ungated_line(report, gate))
    if case_explorer:
        link = f"[case explorer]({case_explorer})"
        lines.append(f"Every case of this run, its answer and its scores: {link}.\n")
    versions = [(name, release.get(key) or "n/a") for name, key in _VERSIONS]
    lines.append(" · ".join(f"{name} {code_span(value)}" for name, value in versions) + "\n")
    return "\n".join(line for line in lines if line)


_VERSIONS = (("index", "index_version"), ("golden", "golden_version"), ("run", "run_id"))


def _failure(failure: Failure) -> str:
    name = f" **{md_text(failure.name)}**" if failure.name else ""
    return f"- {md_text(failure.what)}{name}{md_text(failure.detail)}"


def _ungated_line(report: dict, gate: SliceGate) -> str:
    names = ungated_slices(report, gate)
    if not names:
        return ""
    listed = ", ".join(md_text(name) for name in names)
    return (
        f"{len(names)} slice(s) with fewer than {gate.min_n} cases are not gated (shown, never "
        f"blocking): {listed}.\n"
    )


def _gate_value(gate: Mapping) -> str:
    """A gate's value: a count as a whole number, a rate with four decimals."""
    return count(gate.get("value")) if gate.get("metric") in COUNT_METRICS else _num(gate.get("value"))


def _threshold(gate: Mapping) -> str:
    """A gate's threshold as configured (``0.8``); a count's as a whole number."""
    threshold = gate.get("threshold")
    return count(threshold) if gate.get("metric") in COUNT_METRICS else str(threshold)


def _gates(report: dict) -> str:
    """Every gate, failed first; a gate whose metric does not apply to the run (``"pass": null``) reads
    n/a and does not block. Then the grounded figures with the cases each is over (n/a over 0)."""
    rows = ["## Gates\n", "| metric | gate | value | severity | result |", "|---|---|---|---|---|"]
    for gate in sorted(report["gates"], key=lambda g: _GATE_ORDER[g["pass"]]):
        severity = gate.get("severity", "hard")
        if gate["pass"] is None:
            value, result = "n/a (0 cases)", "n/a: does not block"
        else:
            value = _gate_value(gate)
            result = "pass" if gate["pass"] else "**FAIL**" if severity == "hard" else "warn"
        cells = [md_text(gate["metric"]), f"{gate['op']} {_threshold(gate)}", value, md_text(severity)]
        cells.append(result)
        rows.append("| " + " | ".join(cells) + " |")
    figures = headline_figures(report)
    if figures:
        rows += ["", "| figure | value | over (cases) |", "|---|---|---|"]
        rows += [f"| {name} | {_num(value)} | {_num(n)} |" for name, value, n in figures]
    return "\n".join(rows) + "\n"


_GATE_ORDER = {False: 0, None: 1, True: 2}


def _qa_gates(report: dict) -> str:
    """The four gates over the cases each applies to, the fabrication count, the first failures."""
    gates = report["qa_gates"]
    rows = ["## QA gates\n", "| gate | pass rate | passed / applicable |", "|---|---|---|"]
    for name, gate in gates.items():
        if gate.get("total"):
            rows.append(
                f"| {_escape(name)} | {_num(gate.get('pass_rate'))} | {gate['passed']} / {gate['total']} |"
            )
        else:
            rows.append(f"| {_escape(name)} | n/a | 0: applies to no case |")
    fabrication = report.get("fabrication") or {}
    if fabrication:
        found, checked = fabrication.get("count"), fabrication.get("checked")
        mark = " ❌" if found else ""
        rows.append(
            f"\nFabrication: **{_num(found)}**{mark} of {_num(checked)} answers that should refuse "
            "state a number (target 0)."
        )
    failures = qa_failures(report)
    if failures:
        rows += ["", "| gate | case | expected | actual |", "|---|---|---|---|"]
        for name, case, expected, actual in failures[:QA_FAILURES]:
            rows.append(f"| {_escape(name)} | {_code(case)} | {_code(expected)} | {_code(actual)} |")
        if len(failures) > QA_FAILURES:
            rows.append(f"\n… and {len(failures) - QA_FAILURES} more in the JSON report.")
    return "\n".join(rows) + "\n"


def _extraction(extraction: dict) -> str:
    """Accuracy per channel against the baseline thresholds, and how many fact lines were invalid."""
    channels = extraction.get("channels") or {}
    baseline = extraction.get("baseline")
    verdict = (
        "not checked (no baseline)" if baseline is None else "PASS" if extraction.get("pass") else "**FAIL**"
    )
    rows = [f"## Extraction channels: {verdict}\n"]
    rows += ["| channel | accuracy | correct / total | threshold | result |", "|---|---:|---:|---:|---|"]
    for name, (status, threshold, result) in channel_checks(channels, baseline).items():
        channel = channels[name]
        accuracy = _num(channel.get("accuracy")) if channel.get("total") else "n/a"
        figures = f"{accuracy} | {channel.get('correct')} / {channel.get('total')}"
        shown = "—" if threshold is None else _num(threshold)
        outcome = "**FAIL**" if status == "fail" else result
        rows.append(f"| {_escape(name)} | {figures} | {shown} | {outcome} |")
    invalid = (extraction.get("invalid_facts") or {}).get("count", 0)
    rows.append(f"\nInvalid fact lines: {invalid} (left out of every channel).")
    return "\n".join(rows) + "\n"


def _slices(report: dict, gate: SliceGate) -> str:
    """Every slice, worst first, with how the slice gate judged it: ``**FAIL**`` (blocks), ``holds``,
    ``below the line, did not block``, or not gated (fewer than ``min_n`` cases)."""
    slices = report.get("slices") or {}
    if not slices and report.get("tag_slices"):
        return tag_slices_markdown(report["tag_slices"])
    if not slices:
        return "## Slices\n\nNo slices: the golden cases carry no tags.\n"
    verdicts = {"fail": "**FAIL**", "pass": "holds", "warn": "below the line, did not block", "na": "n/a"}
    verdicts[UNGATED] = gate.not_gated_text()
    rule = f"A slice with at least {gate.min_n} case(s) below {share(gate.min_rate)} blocks the release"
    rule += "; one with fewer cases is not gated.\n" if gate.min_n > 1 else ".\n"
    head = ["slice", "n", "releasable", "95% CI", "slice gate", *SLICE_METRICS]
    rows = ["## Slices (worst first)\n", rule, "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    flat = [(dim, value, s) for dim, values in slices.items() for value, s in values.items()]
    for dim, value, s in sorted(flat, key=lambda x: (x[2]["releasable_rate"], -x[2]["n"], x[0], x[1])):
        low, high = s["releasable_ci95"]
        status = slice_status(dim, value, s, gate, report["release"])
        cells = [_escape(f"{dim}={value}"), s["n"], _num(s["releasable_rate"]), f"{low:.3f}–{high:.3f}"]
        cells += [verdicts[status], *(_num(s.get(m)) for m in SLICE_METRICS)]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _stages(report: dict) -> str:
    """Cases by the first pipeline stage they fail (``pass``: releasable), in pipeline order; "" without
    a layered evaluation."""
    release = report.get("release") or {}
    histogram = report.get("first_failed_stage_histogram") or release.get("first_failed_stage_histogram")
    if not histogram:
        return ""
    total = sum(v for v in histogram.values() if isinstance(v, int | float))
    rows = ["## First failed stage\n", "| first failed stage | cases | share |", "|---|---:|---:|"]
    for stage, cases in histogram.items():
        share = f"{cases / total:.1%}" if total and isinstance(cases, int | float) else "n/a"
        rows.append(f"| {_escape(stage)} | {count(cases)} | {share} |")
    return "\n".join(rows) + "\n"


def _trend(trend: Trend) -> str:
    """The key metrics of the latest comparable golden runs, oldest first (the HTML page charts them),
    after the line on the runs of other golden sets or modes left out."""
    points, values = trend_points(trend.runs)
    shown = points[-TREND_TABLE_RUNS:]
    title = "## Trend over past golden runs of this golden set"
    title += f" (the latest {len(shown)} of {len(points)})\n" if len(shown) < len(points) else "\n"
    rows = [title]
    if trend.left_out:
        rows.append(f"_{md_text(trend.left_out[0].upper() + trend.left_out[1:])}_\n")
    if not shown or not values:
        rows.append("No past run of this golden set has key metrics yet.")
        return "\n".join(rows) + "\n"
    head = ["run", "index version", "day", "decision", *values]
    rows += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    offset = len(points) - len(shown)
    for i, run in enumerate(shown, offset):
        cells = [_code(run.get("run_id") or "n/a"), _code(run.get("index_version") or "n/a")]
        cells += [day(run.get("timestamp")) or "n/a", _escape(run.get("decision") or "n/a")]
        cells += [fixed(values[m][i]) for m in values]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def judge_markdown(judge: dict) -> str:
    """The judged metrics (combined over the judge models): mean score and pass rate with their bootstrap
    95 % intervals, overall and per slice, with the n behind each figure."""
    models = ", ".join(md_text(model) for model in judge["models"])
    rows = [f"## LLM judge ({models}; {judge['prompt_version']})\n"]
    if judge.get("failed"):
        rows.append(f"**The judge step failed:** {_escape(judge['failed'])}\n")
    head = ["metric", "slice", "n", "errors", "mean score", "95% CI", "pass rate", "95% CI"]
    rows += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, summary in judge["metrics"].items():
        rows.append(_judged_row(metric, "all", summary["combined"]))
        for dimension, values in sorted((judge.get("slices") or {}).items()):
            for value, by_metric in sorted(values.items()):
                if metric in by_metric:
                    rows.append(_judged_row(metric, f"{dimension}={value}", by_metric[metric]))
    return "\n".join(rows) + "\n"


def _judged_row(metric: str, name: str, s: dict) -> str:
    def ci(pair: list | None) -> str:
        return "n/a" if pair is None else f"{pair[0]:.2f}–{pair[1]:.2f}"

    cells = [metric, _escape(name), s["n"], s["excluded"], _num(s["mean"]), ci(s["mean_ci"])]
    cells += [_num(s["pass_rate"]), ci(s["pass_rate_ci"])]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _production_days(days: Sequence[dict]) -> str:
    """One row per day given, oldest first: the key rates, the fabrication count and the latency."""
    head = ["day", "n", *PRODUCTION_METRICS, PRODUCTION_FABRICATION, "latency p50 / p95 (ms)"]
    rows = [f"## Production, {len(days)} day(s)\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for summary in days:
        metrics = summary.get("metrics") or {}
        figures = [_num((metrics.get(m) or {}).get("value")) for m in PRODUCTION_METRICS]
        latency = [(metrics.get(m) or {}).get("value") for m in LATENCIES]
        shown = "n/a" if all(v is None for v in latency) else " / ".join(_ms(v) for v in latency)
        cells = [_escape(summary.get("day")), count(summary.get("n")), *figures]
        cells += [_fabrication(metrics.get(PRODUCTION_FABRICATION)), shown]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _fabrication(metric: object) -> str:
    """The day's count of fabricating answers with its rate, e.g. ``0 (0.0% of 38)``."""
    if not isinstance(metric, Mapping) or metric.get("value") is None:
        return "n/a"
    rate, checked = metric.get("rate"), metric.get("n")
    detail = f" ({rate:.1%} of {count(checked)})" if isinstance(rate, int | float) else ""
    return count(metric["value"]) + detail


def _ms(value: object) -> str:
    return f"{value:.0f}" if isinstance(value, int | float) else "n/a"


def _incidents(day: dict) -> str:
    """The open incidents after the latest night (one row per rate), and the accepted levels."""
    if "incidents" not in day:
        return ""
    rows = [f"### Open incidents after {_escape(day['day'])}\n"]
    if not day["incidents"]:
        return rows[0] + "None.\n"
    rows += ["| rate | since | status | level it dropped from | latest night |", "|---|---|---|---|---|"]
    for r in day["incidents"]:
        cells = [_escape(r["rate"]), _escape(r.get("opened") or "?"), _escape(r.get("status") or "")]
        cells += [_num(r.get("level")), _num(r.get("tonight"))]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _production(day: dict) -> str:
    rows = [f"### Latest day {_escape(day['day'])} per slice (sample of {day['n']})\n"]
    head = ["slice", "n", *PRODUCTION_METRICS]
    rows += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    overall = [("all", day["n"], day["metrics"])]
    per_slice = [
        (f"{dim}={value}", s["n"], s["metrics"])
        for dim, values in sorted(day.get("slices", {}).items())
        for value, s in sorted(values.items())
    ]
    for name, n, metrics in overall + per_slice:
        cells = [_escape(name), n, *(_num((metrics.get(m) or {}).get("value")) for m in PRODUCTION_METRICS)]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _escape(text: str) -> str:
    return md_text(text)


def _code(value: object) -> str:
    """A JSON value of any shape as an inline code span that is safe in a table cell (one line)."""
    return code_span(compact(value), cell=True)

"""The slice report in Markdown, from the JSON summary of a golden run and the daily production summaries.

The same inputs as the HTML report (:mod:`reports.html`), so the two never disagree. A reader learns, in
order: the decision and why (where the failing cases stop, the worst of them, then every failed gate,
slice and regression), every gate, the QA gates (when the golden set has RAGSpine cases), each slice
worst first with its interval, the extraction channels (when given), and the latest production day per
slice.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragspine_pipeline.reports.html_parts import compact, headline_figures
from ragspine_pipeline.reports.html_qa import channel_checks, qa_failures
from ragspine_pipeline.reports.markdown import code_span, md_text
from ragspine_pipeline.reports.why import why_markdown

SLICE_METRICS = ("candidate_recall", "context_recall", "faithfulness", "citation_support", "point_coverage")
PRODUCTION_METRICS = (
    "refusal_rate",
    "compliance",
    "citation_validity",
    "admissible_rate",
    "lexical_faithfulness",
)
QA_FAILURES = 20


def slice_markdown(
    report: dict | None,
    production: Sequence[dict] = (),
    extraction: dict | None = None,
    judge: dict | None = None,
) -> str:
    """Markdown for the Dagster UI and ``slice_report.md``; ``report`` None when no golden run exists yet.

    ``extraction``: an extraction result (``ExtractionResult.to_dict``), shown as a channel table.
    ``judge``: the golden run's LLM-judge report (``judge.report.judge_report``), shown with intervals.
    """
    parts = ["# Slice report\n"]
    if report is None:
        parts.append("No golden evaluation has been materialised yet (`reeval_on_index_rebuild`).\n")
    else:
        parts += [_decision(report), _gates(report)]
        if report.get("qa_gates"):
            parts.append(_qa_gates(report))
        parts.append(_slices(report))
    if judge is not None:
        parts.append(judge_markdown(judge))
    if extraction is not None:
        parts.append(_extraction(extraction))
    if production:
        parts.append(_production(production[-1]))
    return "\n".join(parts)


def _decision(report: dict) -> str:
    release = report["release"]
    lines = [
        f"## Release decision: **{release['decision'].upper()}**\n",
        f"index {code_span(release.get('index_version'))} · "
        f"golden {code_span(release.get('golden_version'))} · run {code_span(release.get('run_id'))}\n",
    ]
    for problem in release.get("integrity") or []:
        lines.append(f"- **blocked: {md_text(problem.get('reason'))}**: {md_text(problem.get('detail'))}")
    why = why_markdown(release.get("causes")) if release["decision"] == "block" else ""
    if why:
        lines.append(why)
    for gate in release["failed_gates"]:
        lines.append(
            f"- failed gate **{gate['metric']}** = {gate['value']:.4f}, needs {gate['op']} "
            f"{gate['threshold']} (Δ {gate['delta']:+.4f})"
        )
    for gate in release.get("unmeasured_gates", []):
        lines.append(
            f"- {gate['severity']} gate **{gate['metric']}** was not measured (needs {gate['op']} "
            f"{gate['threshold']}): it fails"
        )
    for gate in release.get("warned_gates", []):
        lines.append(
            f"- soft gate **{gate['metric']}** = {gate['value']:.4f}, wants {gate['op']} "
            f"{gate['threshold']} (warning)"
        )
    for failed in release["failed_slices"]:
        low, high = failed["ci95"]
        lines.append(
            f"- failed slice **{md_text(failed['dimension'])}={md_text(failed['value'])}**: releasable "
            f"{failed['releasable_rate']:.1%} of {failed['n']} (95% CI {low:.1%}–{high:.1%}), "
            f"needs ≥ {failed['min_rate']:.0%}"
        )
    for regression in release["regressions"]:
        lines.append(
            f"- regression **{regression['metric']}**: {regression['current']:.4f} vs baseline "
            f"{regression['baseline']:.4f}"
        )
    return "\n".join(lines) + "\n"


def _gates(report: dict) -> str:
    """Every gate, failed first; a gate whose metric does not apply to the run (``"pass": null``) reads
    n/a and does not block. Then the grounded figures with the cases each is over (n/a over 0)."""
    rows = ["## Gates\n", "| metric | gate | value | result |", "|---|---|---|---|"]
    for gate in sorted(report["gates"], key=lambda g: _GATE_ORDER[g["pass"]]):
        if gate["pass"] is None:
            value, result = "n/a (0 cases)", "n/a: does not block"
        else:
            value = _num(gate["value"])
            hard = gate.get("severity", "hard") == "hard"
            result = "pass" if gate["pass"] else "**FAIL**" if hard else "warn"
        rows.append(f"| {gate['metric']} | {gate['op']} {gate['threshold']} | {value} | {result} |")
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


def _slices(report: dict) -> str:
    slices = report.get("slices") or {}
    if not slices:
        return "## Slices\n\nNo slices: the run had no evidence registry or no tags.\n"
    failing = {(f["dimension"], f["value"]) for f in report["release"]["failed_slices"]}
    head = ["slice", "n", "releasable", "95% CI", *SLICE_METRICS]
    rows = ["## Slices (worst first)\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    flat = [(dim, value, s) for dim, values in slices.items() for value, s in values.items()]
    for dim, value, s in sorted(flat, key=lambda x: (x[2]["releasable_rate"], -x[2]["n"], x[0], x[1])):
        low, high = s["releasable_ci95"]
        name = f"{dim}={value}" + (" ❌" if (dim, value) in failing else "")
        cells = [_escape(name), s["n"], _num(s["releasable_rate"]), f"{low:.3f}–{high:.3f}"]
        cells += [_num(s.get(m)) for m in SLICE_METRICS]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
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


def _production(day: dict) -> str:
    rows = [f"## Production {day['day']} (sample of {day['n']})\n"]
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


def _num(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _escape(text: str) -> str:
    return md_text(text)


def _code(value: object) -> str:
    """A JSON value of any shape as an inline code span that is safe in a table cell (one line)."""
    return code_span(compact(value), cell=True)

"""The judge's report: summaries with intervals, agreement with human labels, slices, gates.

The gateable aggregates of a run (:func:`judged_metrics`) are, per metric, ``judge_<metric>`` (the mean
combined score, 1–5) and ``judge_<metric>_pass_rate`` (the share of cases whose combined score reaches
the threshold). A metric with no judged case has no aggregate: a gate on it fails as "not measured".
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from pathlib import Path

from ragspine_pipeline import inputs
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.jsonvalues import DuplicateKey, no_duplicate_keys
from ragspine_pipeline.judge.prompts import JUDGED_METRICS, METRICS, PROMPT_VERSION
from ragspine_pipeline.judge.run import COMBINED, JudgeRun
from ragspine_pipeline.judge.stats import krippendorff_alpha, score_summary
from ragspine_pipeline.reports.markdown import md_text

__all__ = ["JUDGED_METRICS", "judge_report", "judged_metrics", "load_labels", "render_markdown"]

# An error line shows a bounded part of a hostile value (a megabyte of metric name, 5,000 digits of score).
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 60, 60, 40


def judged_metrics(run: JudgeRun) -> dict[str, float]:
    """The gateable aggregates of ``run`` (see the module docstring); unmeasured metrics are absent."""
    out: dict[str, float] = {}
    for metric, summary in run.summary.items():
        combined = summary[COMBINED]
        if combined["n"]:
            out[f"judge_{metric}"] = combined["mean"]
            out[f"judge_{metric}_pass_rate"] = combined["pass_rate"]
    return out


def load_labels(path: str | Path) -> dict[tuple[str, str], int]:
    """Human labels, JSONL ``{qid, metric, score}`` (score an integer 1–5): ``{(qid, metric): score}``.

    Read like every input (``inputs``): a regular file only (a FIFO or a device is refused without
    blocking), line by line with each line's length capped, each line's nesting checked before it is
    parsed, strict UTF-8. Lines end at ``\\n`` only (a U+2028 inside a JSON string is text). A malformed
    or oversized line, a key repeated in a line, an unknown metric or a repeated (qid, metric) is an
    InputError naming the line.
    """
    labels: dict[tuple[str, str], int] = {}
    with inputs.open_regular(path, "labels") as stream:
        try:
            for line in inputs.iter_lines(stream):
                _add_label(labels, line, str(path))
        except OSError as exc:  # EIO and the like: one line naming the file, as every input
            raise InputError(str(path), f"cannot read: {exc}") from None
    return labels


def _add_label(labels: dict[tuple[str, str], int], line: inputs.Line, path: str) -> None:
    number = line.number
    if line.too_long:
        raise InputError(path, inputs.too_long_message(line.length), number)
    if not line.data.strip():
        return
    try:
        row = inputs.loads(line.data, path, number, object_pairs_hook=no_duplicate_keys)
    except DuplicateKey as exc:
        raise InputError(path, "duplicate key", number, field=exc.key) from None
    if not isinstance(row, dict):
        raise InputError(path, "expected a JSON object {qid, metric, score}", number)
    qid, metric, score = row.get("qid"), row.get("metric"), row.get("score")
    if not isinstance(qid, str | int) or isinstance(qid, bool):
        raise InputError(path, "qid must be a string", number, field="qid")
    shown_id = _SHORT.repr(str(qid))[1:-1]
    if metric not in METRICS:
        raise InputError(
            path,
            f"unknown metric {_SHORT.repr(metric)} (known: {', '.join(METRICS)})",
            number,
            shown_id,
            "metric",
        )
    if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
        raise InputError(
            path,
            f"score must be an integer from 1 to 5 (got {_SHORT.repr(score)})",
            number,
            shown_id,
            "score",
        )
    key = (str(qid), metric)
    if key in labels:
        raise InputError(path, "this case and metric are labelled twice", number, shown_id, "qid")
    labels[key] = score


def judge_report(
    run: JudgeRun,
    *,
    labels: Mapping[tuple[str, str], int] | None = None,
    tags: Mapping[str, list[tuple[str, str]]] | None = None,
) -> dict:
    """The whole report as JSON-ready data (no secrets: the endpoint's key is never part of a run)."""
    summary = run.summary
    report: dict = {
        "prompt_version": PROMPT_VERSION,
        "models": list(run.models),
        "repeat": run.settings.repeat,
        "failed": run.failed,
        "metrics": summary,
        "usage": run.usage,
        "cache": run.cache,
        "truncated": run.truncated,
        "stopped": run.stopped,
        "judgments": run.counts,
    }
    if labels is not None:
        report["agreement"] = {metric: _agreement(run, metric, labels) for metric in run.settings.metrics}
    if tags:
        report["slices"] = _slices(run, tags)
    report["cases"] = [
        {
            "qid": j.qid,
            "metric": j.metric,
            "model": j.model,
            "score": j.score,
            "passed": j.passed,
            "repeats": list(j.repeats),
            "reason": j.reason,
            "error": j.error,
            "cached": j.cached,
        }
        for j in run.judgments
        if j.applicable
    ]
    return report


def _agreement(run: JudgeRun, metric: str, labels: Mapping[tuple[str, str], int]) -> dict:
    """Ordinal Krippendorff's α between the combined judge score (rounded half up to an integer, the
    scale the labels use) and the human label, over the cases that have both."""
    judge, human = [], []
    for j in run.judgments:
        if j.metric == metric and j.model == COMBINED and j.score is not None and (j.qid, metric) in labels:
            judge.append(int(j.score + 0.5))
            human.append(labels[(j.qid, metric)])
    return krippendorff_alpha(judge, human)


def _slices(run: JudgeRun, tags: Mapping[str, list[tuple[str, str]]]) -> dict:
    """Per tag dimension and value, per metric, the combined summary of the cases in that slice."""
    groups: dict[str, dict[str, dict[str, list]]] = {}
    for j in run.judgments:
        if j.model != COMBINED or not j.applicable:
            continue
        for dimension, value in tags.get(j.qid, []):
            groups.setdefault(dimension, {}).setdefault(value, {}).setdefault(j.metric, []).append(j.score)
    return {
        dimension: {
            value: {
                metric: score_summary(
                    scores, threshold=run.settings.threshold(metric), seed=run.settings.seed
                )
                for metric, scores in sorted(by_metric.items())
            }
            for value, by_metric in sorted(values.items())
        }
        for dimension, values in sorted(groups.items())
    }


def _interval(ci: list[float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _figure(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render_markdown(report: dict) -> str:
    """The report as Markdown: the verdict and why, how many judgments got a score, the gates, one table
    per metric (each model and the combined score) with errors and agreement, the inputs cut, usage.

    Every text that comes from data or from the endpoint (case ids, model names, reasons, errors) goes
    through ``md_text``: HTML-escaped, table pipes escaped, on one line, so none of it renders as HTML or
    as Markdown syntax."""
    lines = [f"# LLM-judge report ({report['prompt_version']})", ""]
    if report.get("pass") is True:
        lines += ["**Passed.**", ""]
    elif report.get("pass") is False:
        lines += [f"**Not passed:** {md_text(report.get('reason') or 'a gate failed')}", ""]
    elif report["failed"]:
        lines += [f"**The judge step failed:** {md_text(report['failed'])}", ""]
    if report.get("stopped"):
        lines += [f"**Judging stopped early:** {md_text(report['stopped'])}", ""]
    models = ", ".join(md_text(model) for model in report["models"])
    lines += [f"Models: {models}; repeats per judgment: {report['repeat']}.", ""]
    counts = report.get("judgments")
    if counts is not None:
        errors = ", ".join(f"{md_text(kind)} {n}" for kind, n in counts["errors"].items())
        lines += [
            f"Judged: {counts['scored']} of {counts['applicable']} case × metric judgments got a score "
            f"({counts['failed']} without one{'; errors: ' + errors if errors else ''}); "
            f"{counts['not_applicable']} not applicable.",
            "",
        ]
    if report.get("gates"):
        lines += ["| gate | value | needs | passed |", "|---|---|---|---|"]
        lines += [
            f"| {md_text(g['metric'])} | {_figure(g['value'], 4)} | {md_text(g['op'])} {g['threshold']:g} | "
            f"{'yes' if g['passed'] else 'no'} |"
            for g in report["gates"]
        ]
        lines.append("")
    for metric, summary in report["metrics"].items():
        lines += [
            f"## {metric} (pass: score ≥ {summary['threshold']:g})",
            "",
            "| judge | n | errors | mean | 95% CI | pass rate | 95% CI |",
            "|---|---|---|---|---|---|---|",
        ]
        rows = [*summary["models"].items(), (COMBINED, summary[COMBINED])]
        for model, s in rows:
            mean = f"{_figure(s['mean'])} | {_interval(s['mean_ci'])}"
            rate = f"{_figure(s['pass_rate'])} | {_interval(s['pass_rate_ci'])}"
            lines.append(f"| {md_text(model)} | {s['n']} | {s['excluded']} | {mean} | {rate} |")
        extras = [f"not applicable: {summary['not_applicable']}"]
        if summary["errors"]:
            extras.append("errors: " + ", ".join(f"{md_text(k)} {v}" for k, v in summary["errors"].items()))
        agreement = report.get("agreement", {}).get(metric)
        if agreement is not None:
            extras.append(
                f"Krippendorff's α vs human labels: {_figure(agreement['alpha'], 3)} (n = {agreement['n']})"
            )
        lines += ["", "; ".join(extras) + ".", ""]
    if report.get("truncated"):
        lines += [
            "## Inputs cut to the per-field limit",
            "",
            "| case | metric | field | characters | sent |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {md_text(row['qid'])} | {md_text(row['metric'])} | {md_text(row['field'])} | {row['chars']} "
            f"| {row['kept']} |"
            for row in report["truncated"]
        ]
        lines.append("")
    usage, cache = report["usage"], report["cache"]
    lines.append(
        f"Calls: {usage.get('calls', 0)} ({usage.get('prompt_tokens', 0)} prompt + "
        f"{usage.get('completion_tokens', 0)} completion tokens); "
        f"cache hits {cache['hits']}, misses {cache['misses']}"
        + ("; the budget was exhausted" if usage.get("budget_exhausted") else "")
        + "."
    )
    return "\n".join(lines) + "\n"

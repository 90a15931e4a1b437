"""The LLM-judge section of the HTML report: judged metrics with their bootstrap intervals, per slice."""

from __future__ import annotations

from collections.abc import Mapping

from ragspine_pipeline.reports.charts import esc
from ragspine_pipeline.reports.html_parts import count, fixed, mapping, note, section, table


def judge_section(judge: Mapping) -> str:
    """One row per metric and slice (``all`` first): n, errors, mean score and pass rate with their 95 %
    bootstrap intervals, combined over the judge models."""
    models = ", ".join(str(m) for m in judge.get("models") or [])
    parts = []
    if judge.get("failed"):
        parts.append(note(f"The judge step failed: {judge['failed']}", "judge-failed"))
    rows = []
    for metric, summary in mapping(judge.get("metrics")).items():
        rows.append(("", _cells(metric, "all", mapping(mapping(summary).get("combined")))))
        for dimension, values in sorted(mapping(judge.get("slices")).items()):
            for value, by_metric in sorted(mapping(values).items()):
                if metric in mapping(by_metric):
                    rows.append(("", _cells(metric, f"{dimension}={value}", mapping(by_metric[metric]))))
    head = ["metric", "slice", "n", "errors", "mean score", "95% CI", "pass rate", "95% CI"]
    parts.append(table(head, rows, figures_from=2))
    heading = f"LLM judge ({models}; prompt {judge.get('prompt_version', '?')})"
    return section("judge", heading, *parts)


def _cells(metric: str, name: str, s: Mapping) -> list[str]:
    def ci(pair: object) -> str:
        return (
            "n/a" if not isinstance(pair, list | tuple) or len(pair) != 2 else f"{pair[0]:.2f}–{pair[1]:.2f}"
        )

    return [
        esc(metric),
        esc(name),
        count(s.get("n")),
        count(s.get("excluded")),
        fixed(s.get("mean")),
        ci(s.get("mean_ci")),
        fixed(s.get("pass_rate")),
        ci(s.get("pass_rate_ci")),
    ]

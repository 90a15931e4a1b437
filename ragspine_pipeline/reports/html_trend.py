"""The trend over past golden runs, comparing like with like: the key metrics of the runs of this golden set
(and, when given, this baseline mode) only.

A golden set of 10 cases and one of 84 measure different things; a line through both would show a change
no index made. :func:`comparable_runs` keeps the past runs whose ``golden_version`` is the current run's
and whose ``mode`` is the given one, and says in one line what it left out (``golden set changed on
2026-11-20: demo-2026.11 → g-12; 4 earlier runs on other golden sets not shown``). A run recorded
without a golden version (a materialisation older than the entry, or an unfrozen set: ``unknown``) has
an unknown version: it is kept only when the current run's version is unknown too. The HTML section
(:func:`trend_section`) and the Markdown table (:mod:`reports.slice_report`) both read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragspine_pipeline.reports.charts import PALETTE, STATUS, Key, esc, finite
from ragspine_pipeline.reports.charts_lines import Series, small_multiples
from ragspine_pipeline.reports.html_parts import day, figure, fixed, mapping, note, run_label, section, table

KEY_METRICS = ("releasable_rate", "precision", "admissible_rate", "context_recall", "claim_faithfulness")
TREND_RUNS = 30  # comparable runs charted; the table shows the latest TREND_TABLE_RUNS of them
TREND_TABLE_RUNS = 10
DECISION_COLOURS = {"ship": STATUS["pass"], "block": STATUS["fail"]}
UNKNOWN = "unknown"  # what metric_table records for a run without a frozen golden set


@dataclass(frozen=True)
class Trend:
    """The comparable runs, oldest first, and the one line on the runs left out (None: none were)."""

    runs: list[Mapping]
    left_out: str | None = None


def _version(value: object) -> str | None:
    return None if value in (None, "", UNKNOWN) else str(value)


def comparable_runs(
    history: Sequence[Mapping], golden_version: object, mode: str | None = None, limit: int = TREND_RUNS
) -> Trend:
    """The latest ``limit`` runs of ``history`` (oldest first) on golden set ``golden_version`` and, when
    ``mode`` is given, in that baseline mode; with the line that names what was left out."""
    current = _version(golden_version)
    runs = [h for h in history if isinstance(h, Mapping)]
    same_set = [h for h in runs if _version(h.get("golden_version")) == current]
    other_sets = [h for h in runs if _version(h.get("golden_version")) != current]
    kept = [h for h in same_set if mode is None or h.get("mode") == mode]
    other_modes = sorted({str(h.get("mode") or UNKNOWN) for h in same_set if mode is not None} - {mode})
    lines = []
    if other_sets:
        lines.append(_golden_change(runs, current, len(other_sets)))
    if len(same_set) > len(kept):
        n = len(same_set) - len(kept)
        lines.append(f"{_runs(n)} of this golden set in another mode ({', '.join(other_modes)}) not shown")
    return Trend(kept[-limit:], "; ".join(lines) + "." if lines else None)


def _golden_change(runs: list[Mapping], current: str | None, left_out: int) -> str:
    """``golden set changed on <day>: <old> → <new>; N earlier runs on other golden sets not shown``: the
    day is that of the first run on the current set after the last run on another one."""
    last_other = max(i for i, h in enumerate(runs) if _version(h.get("golden_version")) != current)
    before = _version(runs[last_other].get("golden_version")) or UNKNOWN
    after = [h for h in runs[last_other + 1 :] if _version(h.get("golden_version")) == current]
    on = day(after[0].get("timestamp")) if after else ""
    changed = f"golden set changed on {on}" if on else "golden set changed"
    others = "on another golden set" if left_out == 1 else "on other golden sets"
    return f"{changed}: {before} → {current or UNKNOWN}; {_runs(left_out, 'earlier run')} {others} not shown"


def _runs(n: int, noun: str = "run") -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def trend_points(runs: Sequence[Mapping]) -> tuple[list[Mapping], dict[str, list[float | None]]]:
    """The runs (oldest first) and, for each key metric any of them carries, its value per run (None
    where a run lacks it): what the HTML trend and the Markdown trend table show."""
    points = [h for h in runs if isinstance(h, Mapping)]
    values = {m: [finite(mapping(h.get("metrics")).get(m)) for h in points] for m in KEY_METRICS}
    return points, {m: v for m, v in values.items() if any(x is not None for x in v)}


def trend_section(trend: Trend, run_id: object) -> str:
    """Small multiples of the key metrics over the comparable runs and the latest of them as figures."""
    points, values = trend_points(trend.runs)
    left_out = (
        note(trend.left_out[0].upper() + trend.left_out[1:], "trend-left-out") if trend.left_out else ""
    )
    metrics = list(values)
    if len(points) < 2 or not metrics:
        text = (
            "A trend needs at least two past runs of this golden set with key metrics; this page was "
            f"given {len(points)}."
        )
        return section("trend", "Trend over past runs", left_out, note(text, "trend"))
    series = [Series(m, values[m], PALETTE[0]) for m in metrics]  # each panel names its metric
    current = [i for i, h in enumerate(points) if run_id is not None and h.get("run_id") == run_id]
    chart = small_multiples(
        [run_label(h) for h in points],
        series,
        title="Key metrics over past runs of this golden set, one panel per metric",
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
        "Key metrics per run of this golden set, oldest first, one panel per metric on its own y range "
        "(x: index version or short run id; point fill: decision)"
    )
    return section(
        "trend",
        "Trend over past runs",
        left_out,
        figure("trend", caption, chart),
        _trend_table(points, values),
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

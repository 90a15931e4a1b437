"""The production section of the HTML report: daily reference-free rates, latency, the latest day's slices.

Reads the daily production summaries, oldest first: ``{day, n, metrics: {name: {value, n, low, high}}, slices:
{dimension: {value: {n, metrics}}}}``; a metric may also be a bare number. Charts: ``production-trend`` and
``production-latency``; a chart with nothing to plot is a note of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragspine_pipeline.reports.charts import PALETTE, Series, esc, finite, line_chart, plain
from ragspine_pipeline.reports.html_parts import (
    count,
    figure,
    fixed,
    interval,
    mapping,
    note,
    pct,
    section,
    small,
    table,
)

PRODUCTION_RATES = (
    "refusal_rate",
    "compliance",
    "citation_validity",
    "admissible_rate",
    "lexical_faithfulness",
    "fabrication",
)
LATENCIES = ("latency_p50_ms", "latency_p95_ms")


def production_section(production: Sequence[Mapping]) -> str:
    days = [d for d in production if isinstance(d, Mapping)]
    labels = [str(d.get("day") or "?") for d in days]
    subs = [f"n = {count(d.get('n'))}" for d in days]
    parts = [_production_rates(days, labels, subs), _latency(days, labels, subs)]
    if days:
        parts.append(_production_slices(days[-1]))
    return section("production", "Production (sampled traffic)", *parts)


def _metric(day: Mapping, name: str) -> Mapping:
    """One metric of a daily summary or slice as a mapping; a bare number becomes ``{"value": x}``."""
    raw = mapping(day.get("metrics")).get(name)
    return raw if isinstance(raw, Mapping) else {"value": raw}


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
        return note("No production rates in the daily summaries.", "production-trend")
    chart = line_chart(
        labels,
        series,
        title="Production rates per day",
        description="Daily reference-free rates on sampled production traces with 95% Wilson intervals.",
        axis_label="rate",
        sub_labels=subs,
    )
    caption = "Daily rates with 95% intervals (shaded bands; whiskers where a day stands alone)"
    return figure("production-trend", caption, chart)


def _latency(days: list[Mapping], labels: list[str], subs: list[str]) -> str:
    series = []
    for name in LATENCIES:
        values = [finite(_metric(d, name).get("value")) for d in days]
        if any(v is not None for v in values):
            label = name.removeprefix("latency_").removesuffix("_ms")
            series.append(Series(label, values, PALETTE[len(series) % len(PALETTE)]))
    if not series:
        return note("No latency figures in the daily summaries.", "production-latency")
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
    return figure("production-latency", "Latency p50 / p95 per day (ms)", chart)


def _production_names(day: Mapping) -> list[str]:
    seen = set(mapping(day.get("metrics")))
    for values in mapping(day.get("slices")).values():
        for entry in mapping(values).values():
            seen |= set(mapping(mapping(entry).get("metrics")))
    known = [n for n in (*PRODUCTION_RATES, *LATENCIES) if n in seen]
    return known + sorted(str(n) for n in seen - set(known))


def _production_cell(name: str, metric: Mapping) -> str:
    """A figure with its context in small print: a rate with its interval and ``(n)``, the fabrication
    count with its rate, a latency in ms."""
    value, n = metric.get("value"), finite(metric.get("n"))
    cases = f"({count(n)})" if n is not None else ""
    if name == "fabrication":  # a count of fabricating answers; its rate is the comparable figure
        if finite(value) is None and finite(metric.get("rate")) is None:
            return "n/a"
        rate = pct(metric.get("rate"))
        return count(value) + small(f"{rate} {cases}".strip())
    if finite(value) is None:
        return "n/a"
    if name.endswith("_ms"):
        return f"{finite(value):.0f} ms" + (small(cases) if cases else "")
    if "low" in metric or "high" in metric:
        bounds = interval(metric.get("low"), metric.get("high"))
        return f'{pct(value)}<br><span class="n">{bounds} {cases}</span>'
    return fixed(value) + (small(cases) if cases else "")


def _production_slices(day: Mapping) -> str:
    """The latest day: all traffic first, then every slice."""
    names = _production_names(day)
    overall = [_production_cell(m, _metric(day, m)) for m in names]
    rows = [("all", ["<i>all traffic</i>", count(day.get("n")), *overall])]
    for dimension, values in mapping(day.get("slices")).items():
        for value, entry in mapping(values).items():
            cells = [_production_cell(m, _metric(mapping(entry), m)) for m in names]
            rows.append(("", [f"{esc(dimension)}={esc(value)}", count(mapping(entry).get("n")), *cells]))
    heading = f"<h3>Latest day: {esc(day.get('day') or 'n/a')}</h3>"
    return heading + table(("slice", "n", *names), rows, cls="compact")

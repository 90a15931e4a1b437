"""The production section of the HTML report: daily reference-free rates, latency, the latest day's slices.

Reads the daily production summaries, oldest first: ``{day, n, metrics: {name: {value, n, low, high}}, slices:
{dimension: {value: {n, metrics}}}, drop_tests}``; a metric may also be a bare number. The latest night's
drop tests are summed up in one line. Charts: ``production-trend`` (one
small panel per rate: rates near 100 % would hide each other on one plot) and ``production-latency``; a
chart with nothing to plot is a note of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragspine_pipeline.metrics import family
from ragspine_pipeline.reports.charts import PALETTE, Key, esc, finite, plain
from ragspine_pipeline.reports.charts_lines import Series, line_chart, small_multiples
from ragspine_pipeline.reports.html_parts import (
    count,
    figure,
    interval,
    mapping,
    note,
    pct,
    section,
    small,
    table,
)

RATES = tuple(m.name for m in family("production") if m.kind == "rate")
# The count of fabricating refusals: plotted by its rate, shown as a count with its rate.
(FABRICATION,) = (m.name for m in family("production") if m.kind == "count")
PRODUCTION_RATES = (*RATES, FABRICATION)
LATENCIES = ("latency_p50_ms", "latency_p95_ms")
LATENCY = "latency p50 / p95"  # the two percentiles share one column of the latest day's table


def production_section(production: Sequence[Mapping]) -> str:
    days = [d for d in production if isinstance(d, Mapping)]
    labels = [str(d.get("day") or "?") for d in days]
    subs = [f"n = {count(d.get('n'))}" for d in days]
    parts = [_production_rates(days, labels, subs), _latency(days, labels, subs)]
    if days:
        parts += [_drop_tests(days[-1]), _incidents(days[-1]), _production_slices(days[-1])]
    return section("production", "Production (sampled traffic)", *parts)


def _incidents(day: Mapping) -> str:
    """The open incidents after the latest night: each rate, since when, the level it dropped from (an
    incident stays open until its rates are back there, or a person accepts the new level) and the
    latest night's value; then the accepted levels. "" for a summary written without them."""
    rows = [mapping(r) for r in day.get("incidents") or []]
    if "incidents" not in day:
        return ""
    if not rows:
        return note(f"No open incident after {day.get('day') or 'the latest night'}.", "production-incidents")
    shown = [
        (
            "",
            [
                esc(str(r.get("rate"))),
                esc(str(r.get("opened") or "?")),
                esc(str(r.get("status") or "")),
                pct(finite(r.get("level"))),
                pct(finite(r.get("tonight"))),
            ],
        )
        for r in rows
    ]
    header = ["rate", "since", "status", "level it dropped from", day.get("day") or "latest night"]
    return figure(
        "production-incidents",
        "Open incidents: each stays open until its rates are back at the level they dropped from, or a "
        "person accepts the new level (ragspine-eval incidents accept)",
        table(header, shown, figures_from=3),
    )


def _drop_tests(day: Mapping) -> str:
    """The latest night's drop tests in one line (its alerts are listed under "What failed"); "" for a
    summary written without them."""
    tests = mapping(day.get("drop_tests"))
    if not tests:
        return ""
    alerts = [mapping(a) for a in tests.get("alerts") or []]
    named = ", ".join(f"{a.get('metric')} on {a.get('slice')}" for a in alerts)
    text = (
        f"Drop tests of {day.get('day') or 'the latest night'}: {count(tests.get('tested'))} rate(s) "
        f"tested, {count(tests.get('untested'))} not testable, {len(alerts)} alert(s)"
        + (f": {named}." if named else ".")
    )
    return note(text, "production-drops")


def _metric(day: Mapping, name: str) -> Mapping:
    """One metric of a daily summary or slice as a mapping; a bare number becomes ``{"value": x}``."""
    raw = mapping(day.get("metrics")).get(name)
    return raw if isinstance(raw, Mapping) else {"value": raw}


def _production_rates(days: list[Mapping], labels: list[str], subs: list[str]) -> str:
    """One panel per rate any day carries; fabrication is plotted as its rate (fabricating answers over
    the answers checked), never its count."""
    series = []
    for name in PRODUCTION_RATES:
        key = "rate" if name == FABRICATION else "value"
        values = [finite(_metric(d, name).get(key)) for d in days]
        if any(v is not None for v in values):
            lows = [finite(_metric(d, name).get("low")) for d in days]
            highs = [finite(_metric(d, name).get("high")) for d in days]
            label = f"{name} rate" if name == FABRICATION else name
            series.append(Series(label, values, PALETTE[0], lows, highs))  # the panel names the rate
    if not series:
        return note("No production rates in the daily summaries.", "production-trend")
    chart = small_multiples(
        labels,
        series,
        title="Production rates per day, one panel per rate",
        description="Daily reference-free rates on sampled production traces with 95% Wilson intervals; "
        "each panel has its own y range.",
        y_label="rate (%) — each panel its own range",
        x_label="day (n = traces sampled that day)",
        sub_labels=subs,
        extra_keys=[Key("line", PALETTE[0], "daily rate"), Key("box", "#0072B21f", "95% Wilson interval")],
    )
    caption = (
        "Daily rates with 95% intervals, one panel per rate on its own y range (shaded bands; whiskers "
        "where a day stands alone)"
    )
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
        y_label="latency (ms)",
        x_label="day (n = traces sampled that day)",
        sub_labels=subs,
        ceil=None,
        tick_format=plain,
        point_format=lambda v: f"{v:.0f} ms",
    )
    return figure("production-latency", "Latency p50 / p95 per day (ms)", chart)


def _production_names(day: Mapping) -> tuple[list[str], list[str]]:
    """The columns of the latest day's two tables: the rates (each with its interval), then the other
    figures (fabrication, token counts, …) with one latency column for both percentiles."""
    seen = set(mapping(day.get("metrics")))
    for values in mapping(day.get("slices")).values():
        for entry in mapping(values).values():
            seen |= set(mapping(mapping(entry).get("metrics")))
    rates = [n for n in RATES if n in seen]
    rest = sorted(str(n) for n in seen - set(rates) - set(LATENCIES) - {FABRICATION})
    others = ([FABRICATION] if FABRICATION in seen else []) + rest
    return rates, others + ([LATENCY] if seen & set(LATENCIES) else [])


def _production_cell(name: str, figures: Mapping, traces: object) -> str:
    """A figure with its context in small print: a rate with its interval, the fabrication count with its
    rate, the latency percentiles in ms. ``(n)`` is printed where a figure is over another number of
    traces than the row's ``traces``."""
    if name == LATENCY:
        p50, p95 = (finite(_metric(figures, m).get("value")) for m in LATENCIES)
        if p50 is None and p95 is None:
            return "n/a"
        return " / ".join("n/a" if v is None else f"{v:.0f}" for v in (p50, p95)) + " ms"
    metric = _metric(figures, name)
    value, n = metric.get("value"), finite(metric.get("n"))
    cases = f"({count(n)})" if n is not None and n != finite(traces) else ""
    if name == FABRICATION:  # a count of fabricating answers; its rate is the comparable figure
        if finite(value) is None and finite(metric.get("rate")) is None:
            return "n/a"
        checked = f" of {count(n)}" if n is not None else ""
        return count(value) + small(f"({pct(metric.get('rate'))}{checked})")
    number = finite(value)
    if number is None:
        return "n/a"
    if "low" in metric or "high" in metric:
        bounds = interval(metric.get("low"), metric.get("high"))
        return f'{pct(value)}<br><span class="n">{f"{bounds} {cases}".strip()}</span>'
    shown = f"{number:,.0f}" if number.is_integer() else f"{number:,.1f}"  # token counts and their means
    return shown + (small(cases) if cases else "")


def _production_slices(day: Mapping) -> str:
    """The latest day, all traffic first, then every slice: its rates in one table, its other figures
    in a second (one table would not fit the page)."""
    rates, others = _production_names(day)
    rows: list[tuple[str, Mapping, object, str]] = [("all", day, day.get("n"), "<i>all traffic</i>")]
    for dimension, values in mapping(day.get("slices")).items():
        for value, entry in mapping(values).items():
            entry = mapping(entry)
            rows.append(("", entry, entry.get("n"), f"{esc(dimension)}={esc(value)}"))

    def day_table(names: list[str]) -> str:
        cells = [
            (cls, [label, count(n), *(_production_cell(m, figures, n) for m in names)])
            for cls, figures, n, label in rows
        ]
        return table(("slice", "n", *names), cells, cls="compact")

    heading = f"<h3>Latest day: {esc(day.get('day') or 'n/a')}</h3>"
    caption = note(
        "Rates with their 95% interval; (n) where a figure is over another number of traces than the "
        "row's n.",
        "production-day",
    )
    parts = [heading, caption]
    if rates:
        parts.append(day_table(rates))
    if others:
        text = "The same day's counts (fabrication with its rate), latency and other figures:"
        parts += [note(text, "production-day-figures"), day_table(others)]
    return "".join(parts)

"""The gates section of the HTML report: every gate against its threshold, failed first.

Gates on rates share one chart on a 0–100 % axis (``gates``); gates on counts (the fabrication count) get
their own chart on a count axis (``gates-counts``), since a count is not a share of anything. A value is
printed with its requirement, ``0.3846 (needs ≤ 0.1000)``, so a failing value never reads as if the
inequality held. Then the table of every gate with its severity, the baseline regressions, what the
golden set can detect with the baseline test in use (the release decision's ``detectable_drop``) and the
grounded figures.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragspine_pipeline.decision.baseline import COUNT_METRIC, COUNT_METRICS
from ragspine_pipeline.decision.detectable import detectable_drop_text
from ragspine_pipeline.reports.charts import INK, STATUS, Key, esc, finite, plain
from ragspine_pipeline.reports.charts_rows import Row, row_chart
from ragspine_pipeline.reports.html_parts import (
    STATUS_ORDER,
    count,
    figure,
    figures_table,
    fixed,
    gate_figure,
    gate_status,
    mapping,
    needs,
    note,
    op,
    pill,
    section,
    signed,
    small,
    table,
)


def gates_section(report: Mapping, release: Mapping) -> str:
    gates = [g for g in report.get("gates") or [] if isinstance(g, Mapping)]
    if not gates:
        return section("gates", "Gates", note("No gates in this report.", "gates"))
    gates.sort(key=lambda g: STATUS_ORDER[gate_status(g)])  # failed first, else in the report's order
    rates = [g for g in gates if g.get("metric") not in COUNT_METRICS]
    counts = [g for g in gates if g.get("metric") in COUNT_METRICS]
    caption = "Gates on rates, failed first (≥: the bar must reach the tick; ≤: it must stay at or below it)"
    not_applicable = [str(g.get("metric")) for g in gates if gate_status(g) == "na"]
    return section(
        "gates",
        "Gates",
        figure("gates", caption, _gates_chart(rates)) if rates else "",
        figure(
            "gates-counts",
            "Gates on counts (answers, not a share of them)",
            _count_gates_chart(report, counts),
        )
        if counts
        else "",
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


def _gate_row(gate: Mapping, note: str = "") -> Row:
    value = _gate_value(gate)
    return Row(
        label=str(gate.get("metric")),
        value=value,
        status=gate_status(gate),
        marker=finite(gate.get("threshold")),
        value_text=f"{gate_figure(gate.get('metric'), value)} ({needs(gate)})",
        note=note if gate.get("applicable") is not False else "applies to no case",
    )


def _gate_keys(rows: list[Row]) -> list[Key]:
    keys = [Key("box", STATUS["pass"], "passes"), Key("box", STATUS["fail"], "fails")]
    if any(row.status == "warn" for row in rows):
        keys.append(Key("box", STATUS["warn"], "soft gate fails (warns)"))
    return [*keys, Key("tick", INK, "threshold")]


def _gates_chart(gates: list[Mapping]) -> str:
    rows = [_gate_row(g) for g in gates]
    return row_chart(
        rows,
        title="Gates on rates: each value against its threshold",
        description="One bar per gate on a rate, failed gates first; the dark tick is the gate's threshold.",
        x_label="metric value (% of the cases it is over)",
        y_label="gate",
        keys=_gate_keys(rows),
    )


def _count_gates_chart(report: Mapping, gates: list[Mapping]) -> str:
    """The axis runs to the number of answers checked (when the report says), so one fabricating answer
    of three reads as one of three, not as a full bar."""
    checked = finite(mapping(report.get(COUNT_METRIC)).get("checked"))
    of = f"of {count(checked)} checked" if checked is not None else ""
    rows = [_gate_row(g, of if g.get("metric") == COUNT_METRIC else "") for g in gates]
    return row_chart(
        rows,
        title="Gates on counts: each count against its threshold",
        description="One bar per gate on a count of answers (e.g. answers stating a fabricated number).",
        x_label="count (answers)",
        y_label="gate",
        keys=_gate_keys(rows),
        ceil=checked if checked and len(gates) == 1 else None,
        tick_format=plain,
        integer=True,
    )


def _gate_value(gate: Mapping) -> float | None:
    """The gate's value; None when its metric does not apply to the run (``applicable`` false)."""
    return None if gate.get("applicable") is False else finite(gate.get("value"))


def _gates_table(gates: list[Mapping]) -> str:
    def delta(gate: Mapping) -> str:
        value, threshold = _gate_value(gate), finite(gate.get("threshold"))
        if value is None or threshold is None:
            return "n/a"
        return gate_delta({"metric": gate.get("metric"), "delta": value - threshold})

    rows = [
        (
            gate_status(g),
            [
                esc(g.get("metric")),
                f"{op(g.get('op'))} {gate_figure(g.get('metric'), g.get('threshold'))}",
                gate_figure(g.get("metric"), _gate_value(g)) + _over(g),
                delta(g),
                esc(g.get("severity") or "hard"),
                pill(gate_status(g), warn="warns", na="n/a: does not block"),
            ],
        )
        for g in gates
    ]
    return table(("metric", "gate", "value", "Δ (value − threshold)", "severity", "result"), rows)


def _over(gate: Mapping) -> str:
    """What the gate's value is over, from the same gate row: ``(14 / 15)`` for a rate with its numerator,
    ``(0 cases)`` for a metric that does not apply."""
    if gate.get("applicable") is False:
        return small("(0 cases)")
    numerator, denominator = finite(gate.get("numerator")), finite(gate.get("denominator"))
    if numerator is None or denominator is None:
        return ""
    return small(f"({count(numerator)} / {count(denominator)})")


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
    detectable = detectable_drop_text(release.get("detectable_drop"))
    if detectable is not None:
        parts.append(note(detectable, "detectable-drop"))
    return "\n".join(parts)


def gate_delta(gate: Mapping) -> str:
    """A gate's ``delta`` (value − threshold), signed: a whole number for a count."""
    delta = finite(gate.get("delta"))
    if gate.get("metric") in COUNT_METRICS and delta is not None:
        return f"{delta:+g}"
    return signed(delta)

"""The slices section of the HTML report: per tag dimension, the releasable rate of each value with its
95 % Wilson interval against the slice gate (chart ``slices-<dimension>``), and its layered metrics.

Which slices the gate judges is :mod:`reports.slice_gate`: a slice below ``min_n`` cases is drawn in grey
and labelled "not gated (n < min_n)", never as holding or failing.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragspine_pipeline.reports.charts import INK, STATUS, Key, esc, finite
from ragspine_pipeline.reports.charts_rows import Row, row_chart
from ragspine_pipeline.reports.html_parts import (
    count,
    figure,
    interval,
    mapping,
    metric_cell,
    note,
    pair,
    pct,
    section,
    share,
    table,
)
from ragspine_pipeline.reports.markdown import TAG_SLICES_NOTE
from ragspine_pipeline.reports.slice_gate import UNGATED, SliceGate, slice_status, worst_first

_STATUS_TEXT = {"fail": "blocks the release", "warn": "below the line, did not block"}


def slices_section(report: Mapping, release: Mapping, gate: SliceGate) -> str:
    slices = mapping(report.get("slices"))
    if not slices and mapping(report.get("tag_slices")):
        return _tag_slices_section(mapping(report.get("tag_slices")))
    if not slices:
        return section("slices", "Slices", note("No slices: the golden cases carry no tags.", "slices"))
    if gate.stated:
        rule = f"A slice with at least {gate.min_n} case(s) below {share(gate.min_rate)} blocks the release."
        if gate.min_n > 1:
            rule += f" A slice with fewer than {gate.min_n} cases is not gated: shown, never blocking."
    else:
        rule = f"The report does not state its slice gate; the line is drawn at {share(gate.min_rate)}."
    parts = [
        note(f"Releasable rate per value of each tag with its 95% Wilson interval. {rule}", "slice-gate")
    ]
    for dimension, values in slices.items():
        ordered = worst_first(mapping(values))
        statuses = [slice_status(str(dimension), v, e, gate, release) for v, e in ordered]
        parts.append(f"<h3>{esc(dimension)}</h3>")
        parts.append(_slice_chart(str(dimension), ordered, statuses, gate))
        parts.append(_slice_table(report, ordered, statuses, gate))
    return section("slices", "Slices", *parts)


def _slice_chart(dimension: str, ordered: list, statuses: list[str], gate: SliceGate) -> str:
    def note_of(entry: Mapping, status: str) -> str:
        n = f"n = {count(entry.get('n'))}"
        return f"{n} · {gate.not_gated_text()}" if status == UNGATED else n

    rows = [
        Row(
            label=value,
            value=finite(entry.get("releasable_rate")),
            status=status,
            low=pair(entry.get("releasable_ci95"))[0],
            high=pair(entry.get("releasable_ci95"))[1],
            value_text=pct(entry.get("releasable_rate")),
            note=note_of(entry, status),
        )
        for (value, entry), status in zip(ordered, statuses, strict=True)
    ]
    keys = [
        Key("dot", STATUS["pass"], "meets the slice gate"),
        Key("dot", STATUS["fail"], "blocks the release"),
    ]
    if "warn" in statuses:
        keys.append(Key("dot", STATUS["warn"], _STATUS_TEXT["warn"]))
    if UNGATED in statuses:
        keys.append(Key("dot", STATUS["na"], gate.not_gated_text()))
    keys += [
        Key("whisker", INK, "95% Wilson interval"),
        Key("dash", INK, f"slice gate {share(gate.min_rate)}"),
    ]
    chart = row_chart(
        rows,
        title=f"Releasable rate per {dimension}",
        description=f"Releasable rate of each {dimension} value, worst first, with its 95% interval.",
        x_label="releasable rate (% of the slice's cases)",
        y_label=dimension,
        keys=keys,
        bars=False,
        reference=gate.min_rate,
        reference_label=f"min {share(gate.min_rate)}",
    )
    return figure(f"slices-{dimension}", f"Releasable rate per {dimension}, worst first", chart)


def _slice_metric_names(ordered: list) -> list[str]:
    """Every metric a slice reports with its count (``name`` and ``name_n``), in the report's order."""
    names: list[str] = []
    for _, entry in ordered:
        names += [k for k in entry if f"{k}_n" in entry and k != "releasable" and k not in names]
    return names


def _slice_table(report: Mapping, ordered: list, statuses: list[str], gate: SliceGate) -> str:
    """The layered metrics per slice (``(n)`` = cases where the metric applies); all cases first. A slice
    that fails, sits below the line or is not gated says so under its name."""
    names = _slice_metric_names(ordered)
    layered, denominators = mapping(report.get("layered")), mapping(report.get("layered_denominators"))
    texts = {**_STATUS_TEXT, UNGATED: gate.not_gated_text()}
    rows = []
    if layered:
        overall = [metric_cell(layered.get(m), denominators.get(m)) for m in names]
        total = count(report.get("n_cases"))
        rows.append(("all", ["<i>all cases</i>", total, pct(layered.get("releasable_rate")), "", *overall]))
    for (value, entry), status in zip(ordered, statuses, strict=True):
        cells = [metric_cell(entry.get(m), entry.get(f"{m}_n")) for m in names]
        rate, ci = pct(entry.get("releasable_rate")), interval(*pair(entry.get("releasable_ci95")))
        name = esc(value) + (f'<br><span class="n">{esc(texts[status])}</span>' if status in texts else "")
        rows.append((status, [name, count(entry.get("n")), rate, ci, *cells]))
    return table(("slice", "n", "releasable", "95% CI", *names), rows, cls="compact")


_OUTCOME_FLAGS = (("citation_hit", "citation hit"), ("contained", "contained"), ("recall_hit", "recall@k"))


def _tag_slices_section(tag_slices: Mapping) -> str:
    """A run without a layered evaluation: each tag value's right-outcome rate with its interval and
    its grounded flags; no gate, so every row is drawn in one neutral colour."""
    parts = [note(TAG_SLICES_NOTE, "slice-gate")]
    for dimension, values in tag_slices.items():
        ordered = sorted(
            mapping(values).items(),
            key=lambda item: (finite(item[1].get("right_rate")) or 0.0, -(item[1].get("n") or 0), item[0]),
        )
        rows = [
            Row(
                label=value,
                value=finite(entry.get("right_rate")),
                status="na",
                low=pair(entry.get("right_ci95"))[0],
                high=pair(entry.get("right_ci95"))[1],
                value_text=pct(entry.get("right_rate")),
                note=f"n = {count(entry.get('n'))}",
            )
            for value, entry in ordered
        ]
        chart = row_chart(
            rows,
            title=f"Right outcome per {dimension}",
            description=f"Share of cases with the right outcome per {dimension} value, worst first, "
            "with its 95% interval; not gated.",
            x_label="right outcome (% of the slice's cases)",
            y_label=str(dimension),
            keys=[Key("dot", STATUS["na"], "not gated"), Key("whisker", INK, "95% Wilson interval")],
            bars=False,
        )
        parts.append(f"<h3>{esc(dimension)}</h3>")
        parts.append(figure(f"slices-{dimension}", f"Right outcome per {dimension}, worst first", chart))
        table_rows = [
            (
                "na",
                [
                    esc(value),
                    count(entry.get("n")),
                    pct(entry.get("right_rate")),
                    interval(*pair(entry.get("right_ci95"))),
                    *(metric_cell(entry.get(name), entry.get(f"{name}_n")) for name, _ in _OUTCOME_FLAGS),
                ],
            )
            for value, entry in ordered
        ]
        head = ("slice", "n", "right outcome", "95% CI", *(label for _, label in _OUTCOME_FLAGS))
        parts.append(table(head, table_rows, cls="compact"))
    return section("slices", "Slices by tag (not gated)", *parts)

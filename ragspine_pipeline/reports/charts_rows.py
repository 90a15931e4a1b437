"""Row charts for the HTML report: one row per gate, slice, stage or channel, as a bar or as a dot with its
interval whiskers, against one shared value axis (:func:`row_chart`).

The contract of :mod:`reports.charts` holds here: a wide and a narrow drawing, each a self-contained
``<svg>`` with its ``<title>`` first, tick labels, named axes and a legend, every text escaped, nothing
plotted for a missing value. Each row is a ``<g>`` whose first ``<text>`` is the row's label; a failing
row is shaded and its label bold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragspine_pipeline.reports.charts import (
    BOLD_CHAR_PX,
    CHAR_PX,
    FAIL_BACKGROUND,
    GRID,
    INK,
    MUTED,
    NARROW,
    ROW_PX,
    STATUS,
    WIDTH,
    Format,
    Key,
    Scale,
    coord,
    domain,
    esc,
    legend,
    line,
    percent,
    shorten,
    svg,
    text,
    ticks,
    wrapped_text,
)


@dataclass(frozen=True)
class Row:
    """One horizontal row: a bar (or a dot) at ``value``, an optional interval and threshold tick.

    ``status`` is a key of :data:`STATUS`; ``fail`` rows are also shaded. ``value_text`` and ``note`` are
    printed to the right of the plot. A ``None`` value draws nothing and prints ``n/a``.
    """

    label: str
    value: float | None
    status: str = "pass"
    low: float | None = None
    high: float | None = None
    marker: float | None = None
    value_text: str = ""
    note: str = ""


@dataclass(frozen=True)
class RowAxis:
    """What both drawings of a row chart share: the value axis and the chart's words."""

    title: str
    description: str
    x_label: str
    y_label: str
    keys: Sequence[Key]
    bars: bool
    reference: float | None
    reference_label: str
    floor: float
    ceil: float | None
    tick_format: Format
    integer: bool

    def scale(self, rows: Sequence[Row], start: float, end: float) -> Scale:
        values = [v for r in rows for v in (r.value, r.low, r.high, r.marker)]
        return Scale(*domain([*values, self.reference], self.floor, self.ceil), start, end)


def row_chart(
    rows: Sequence[Row],
    *,
    title: str,
    description: str,
    x_label: str,
    y_label: str,
    keys: Sequence[Key],
    bars: bool = True,
    reference: float | None = None,
    reference_label: str = "",
    floor: float = 0.0,
    ceil: float | None = 1.0,
    tick_format: Format = percent,
    integer: bool = False,
) -> str:
    """Rows top to bottom, one shared horizontal axis; ``reference`` is a dashed line across every row.

    ``x_label`` names the value axis with its unit; ``y_label`` says what a row is (the row labels are
    its ticks), written above the row labels. The wide drawing puts each label left of its row and the
    value right of it; the narrow one writes label and value above the row's bar.
    """
    axis = RowAxis(
        title, description, x_label, y_label, keys, bars, reference, reference_label, floor, ceil,
        tick_format, integer,
    )  # fmt: skip
    return _wide_rows(rows, axis) + _narrow_rows(rows, axis)


def _wide_rows(rows: Sequence[Row], axis: RowAxis) -> str:
    label_px = max([10, *(len(shorten(r.label)) for r in rows)]) * BOLD_CHAR_PX + 14
    label_px = max(label_px, len(axis.y_label) * CHAR_PX + 14)
    right_px = max([4, *(len(_right_text(r)) for r in rows)]) * BOLD_CHAR_PX + 16
    left, right = min(label_px, 250), WIDTH - min(right_px, 230)
    parts, legend_px = legend(axis.keys, left, 6, right - left)
    top = 6 + legend_px + (18 if axis.reference is not None else 14)
    bottom = top + ROW_PX * max(len(rows), 1)
    scale = axis.scale(rows, left, right)
    named = _axis(scale, top, bottom, axis, WIDTH, parts)
    for i, row in enumerate(rows):
        parts += _row(row, scale, top + i * ROW_PX, axis.bars)
    # The category axis is named like a column header, above its labels: a rotated label would not fit
    # beside a chart of one or two rows.
    parts.append(text(scale.start - 8, top - 8, axis.y_label, anchor="end", cls="axis y-axis"))
    if axis.reference is not None:
        x = scale(axis.reference)
        parts.append(line(x, top - 6, x, bottom, INK, 1.5, ' stroke-dasharray="5 3"'))
        parts.append(text(x, top - 9, axis.reference_label, anchor="middle", cls="small"))
    return svg(WIDTH, bottom + 42 + named, axis.title, axis.description, parts)


def _narrow_rows(rows: Sequence[Row], axis: RowAxis) -> str:
    """The phone drawing: per row, its label (and its value, when both fit on one line; else the value
    on a second line) above a bar across the full width."""
    left, right = 10.0, NARROW - 18.0  # room for the last tick label, centred on the axis's end
    parts, legend_px = legend(axis.keys, left, 6, right - left)
    y = 6 + legend_px + 14
    parts.append(text(left, y, axis.y_label, cls="axis y-axis"))
    scale = axis.scale(rows, left, right)
    if axis.reference is not None:
        y += 15
        x = scale(axis.reference)
        anchor = "end" if x > (left + right) / 2 else "start"
        parts.append(text(x, y, axis.reference_label, anchor=anchor, cls="small"))
    top = y + 6
    grid = [scale(t) for t in ticks(scale.lo, scale.hi, integer=axis.integer)]
    reference = None if axis.reference is None else scale(axis.reference)
    for row in rows:
        drawn, height = _narrow_row(row, scale, y + 6, axis.bars, grid, reference)
        parts += drawn
        y += height
    bottom = max(y + 6, top + ROW_PX)
    named = _axis(scale, top, bottom, axis, NARROW, parts, grid=False)
    return svg(NARROW, bottom + 42 + named, axis.title, axis.description, parts, variant="narrow")


def _narrow_row(
    row: Row, scale: Scale, y: float, bars: bool, grid: Sequence[float], reference: float | None
) -> tuple[list[str], float]:
    """One row of the phone drawing and its height. The grid lines (``grid``: the x of each tick) and
    the dashed reference line cross the bar's band only, so that none runs through the text above."""
    label, value = shorten(row.label), _right_text(row)
    room = scale.end - scale.start
    one_line = len(label) * BOLD_CHAR_PX + 12 + len(value) * CHAR_PX <= room
    height = 40.0 if one_line else 54.0
    mid = y + height - 12
    failing = row.status == "fail"
    parts = [f"<g><title>{esc(row.label)}: {esc(value)}</title>"]
    if failing:
        parts.append(
            f'<rect x="0" y="{coord(y + 1)}" width="{NARROW}" height="{coord(height - 2)}" '
            f'fill="{FAIL_BACKGROUND}"/>'
        )
    parts.append(text(scale.start, y + 15, label, cls="label fail" if failing else "label"))
    value_cls = "value" + (" fail" if failing else "")
    if one_line:
        parts.append(text(scale.end, y + 15, value, anchor="end", cls=value_cls))
    else:
        parts.append(text(scale.start, y + 29, value, cls=value_cls))
    parts += [line(x, mid - 8, x, mid + 8, GRID) for x in grid]
    if reference is not None:
        parts.append(line(reference, mid - 8, reference, mid + 8, INK, 1.5, ' stroke-dasharray="5 3"'))
    if row.value is not None:
        parts += _mark(row, scale, mid, STATUS.get(row.status, STATUS["na"]), bars)
    if row.marker is not None:
        x = scale(row.marker)
        parts.append(line(x, mid - 9, x, mid + 9, INK, 2.5))
    parts.append("</g>")
    return parts, height


def _right_text(row: Row) -> str:
    shown = row.value_text if row.value is not None else "n/a"
    return f"{shown} · {row.note}" if row.note else shown


def _axis(
    scale: Scale,
    top: float,
    bottom: float,
    axis: RowAxis,
    width: float,
    parts: list[str],
    grid: bool = True,
) -> float:
    """Appends the tick labels (and the grid lines, with ``grid``) and the axis's name, wrapped where it
    would not fit the ``width`` of the drawing; returns the height the wrapping added."""
    for tick in ticks(scale.lo, scale.hi, integer=axis.integer):
        x = scale(tick)
        if grid:
            parts.append(line(x, top, x, bottom, GRID))
        parts.append(text(x, bottom + 15, axis.tick_format(tick), anchor="middle", cls="tick"))
    parts.append(line(scale.start, bottom, scale.end, bottom, MUTED))
    middle = (scale.start + scale.end) / 2
    room = 2 * min(middle, width - middle) - 8
    named, more = wrapped_text(middle, bottom + 34, axis.x_label, room, anchor="middle", cls="axis x-axis")
    parts.append(named)
    return more


def _row(row: Row, scale: Scale, y: float, bars: bool) -> list[str]:
    mid = y + ROW_PX / 2
    colour = STATUS.get(row.status, STATUS["na"])
    parts = [f"<g><title>{esc(row.label)}: {esc(_right_text(row))}</title>"]
    if row.status == "fail":
        parts.append(
            f'<rect x="0" y="{coord(y + 1)}" width="{WIDTH}" height="{ROW_PX - 2}" fill="{FAIL_BACKGROUND}"/>'
        )
    label_cls = "label fail" if row.status == "fail" else "label"
    parts.append(text(scale.start - 8, mid + 4, shorten(row.label), anchor="end", cls=label_cls))
    if row.value is not None:
        parts += _mark(row, scale, mid, colour, bars)
    if row.marker is not None:
        x = scale(row.marker)
        parts.append(line(x, mid - 10, x, mid + 10, INK, 2.5))
    parts.append(
        text(
            scale.end + 10, mid + 4, _right_text(row), cls="value" + (" fail" if row.status == "fail" else "")
        )
    )
    parts.append("</g>")
    return parts


def _mark(row: Row, scale: Scale, mid: float, colour: str, bars: bool) -> list[str]:
    parts = []
    if bars:
        x0, x1 = sorted((scale(max(scale.lo, 0.0)), scale(row.value)))
        parts.append(
            f'<rect x="{coord(x0)}" y="{coord(mid - 7)}" width="{coord(max(x1 - x0, 1.0))}" height="14" '
            f'fill="{colour}" fill-opacity="0.85"/>'
        )
    if row.low is not None and row.high is not None:
        lo, hi = scale(row.low), scale(row.high)
        parts.append(line(lo, mid, hi, mid, colour, 1.5))
        parts.append(line(lo, mid - 5, lo, mid + 5, colour, 1.5))
        parts.append(line(hi, mid - 5, hi, mid + 5, colour, 1.5))
    if not bars:
        parts.append(
            f'<circle cx="{coord(scale(row.value))}" cy="{coord(mid)}" r="5" fill="{colour}" '
            f'stroke="#ffffff" stroke-width="1"/>'
        )
    return parts

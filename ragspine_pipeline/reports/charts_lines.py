"""Inline SVG charts over an x axis of runs or days: a line chart, and small multiples (one panel per series).

The contract of :mod:`reports.charts` holds here too: a wide and a narrow self-contained ``<svg>``, each
with a ``<title>`` first, tick labels, an x- and a y-axis label (classes ``x-axis`` and ``y-axis``),
every text escaped, no point for a missing or non-finite value, and output that depends only on the
arguments. Where the x labels do not fit between the points, the wide drawing turns them; the narrow one
labels every k-th point instead (always the highlighted one, else the latest), never turned.

Use small multiples when series share a range and would hide each other on one plot (daily rates that
all sit at 100 %): each series gets its own panel and its own y range, under one shared x axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragspine_pipeline.reports.charts import (
    BOLD_CHAR_PX,
    CHAR_PX,
    GRID,
    MUTED,
    NARROW,
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

PLOT_PX = 240
PANEL_PX = 64  # the plot height of one small-multiple panel
PANEL_GAP_PX = 34  # room above each panel for its name
X_LABEL_CHARS = 24


@dataclass(frozen=True)
class Series:
    """One polyline; ``low``/``high`` (same length as ``values``) draw an interval band or whiskers."""

    name: str
    values: Sequence[float | None]
    colour: str
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None


def line_chart(
    x_labels: Sequence[str],
    series: Sequence[Series],
    *,
    title: str,
    description: str,
    y_label: str,
    x_label: str,
    sub_labels: Sequence[str] = (),
    floor: float = 0.0,
    ceil: float | None = 1.0,
    tick_format: Format = percent,
    point_format: Format = lambda v: f"{v:.4f}",
) -> str:
    """Points at evenly spaced x positions on one y axis, one legend entry per series; a missing value
    breaks its line (no point is invented). ``sub_labels`` is a second, smaller x label line."""
    return "".join(
        _line_chart(
            width, x_labels, series, title, description, y_label, x_label, sub_labels, floor, ceil,
            tick_format, point_format,
        )
        for width in (WIDTH, NARROW)
    )  # fmt: skip


def _line_chart(
    width: float,
    x_labels: Sequence[str],
    series: Sequence[Series],
    title: str,
    description: str,
    y_label: str,
    x_label: str,
    sub_labels: Sequence[str],
    floor: float,
    ceil: float | None,
    tick_format: Format,
    point_format: Format,
) -> str:
    left, right = 58.0, width - 18.0
    keys = [Key("line", s.colour, s.name) for s in series]
    parts, legend_px = legend(keys, left, 6, right - left)
    top, bottom = 6 + legend_px + 12, 6 + legend_px + 12 + PLOT_PX
    values = [v for s in series for seq in (s.values, s.low or (), s.high or ()) for v in seq]
    y = Scale(*domain(values, floor, ceil), bottom, top)
    xs = _positions(len(x_labels), left, right)
    parts += _y_axis(y, left, right, tick_format)
    parts.append(_y_label(y_label, top, bottom))
    label_parts, label_px = _x_labels(x_labels, sub_labels, xs, bottom, None, width)
    parts += label_parts
    named, more = _x_label(x_label, left, right, bottom + label_px + 14)
    parts.append(named)
    for s in series:
        parts += _series(s, xs, y, x_labels, (), point_format)
    return svg(width, bottom + label_px + 24 + more, title, description, parts, _variant(width))


def small_multiples(
    x_labels: Sequence[str],
    series: Sequence[Series],
    *,
    title: str,
    description: str,
    y_label: str,
    x_label: str,
    sub_labels: Sequence[str] = (),
    point_fills: Sequence[str | None] = (),
    extra_keys: Sequence[Key] = (),
    tick_format: Format = percent,
    highlight: int | None = None,
    point_format: Format = lambda v: f"{v:.4f}",
) -> str:
    """One panel per series, stacked, sharing the x positions and the x labels under the last panel.

    ``sub_labels`` is a second, smaller x label line; ``point_fills`` colours each x position's markers
    (e.g. by release decision); ``highlight`` makes one x label bold.

    Each panel's y range is its own (:func:`_panel_domain`), with its ticks labelled, so a series flat
    at 100 % and one moving between 10 % and 30 % are both readable.
    """
    return "".join(
        _small_multiples(
            width, x_labels, series, title, description, y_label, x_label, sub_labels, point_fills,
            extra_keys, tick_format, highlight, point_format,
        )
        for width in (WIDTH, NARROW)
    )  # fmt: skip


def _small_multiples(
    width: float,
    x_labels: Sequence[str],
    series: Sequence[Series],
    title: str,
    description: str,
    y_label: str,
    x_label: str,
    sub_labels: Sequence[str],
    point_fills: Sequence[str | None],
    extra_keys: Sequence[Key],
    tick_format: Format,
    highlight: int | None,
    point_format: Format,
) -> str:
    left, right = 58.0, width - 18.0
    parts, legend_px = legend(list(extra_keys), left, 6, right - left)
    xs = _positions(len(x_labels), left, right)
    top = 6 + legend_px
    first = top + PANEL_GAP_PX
    for s in series:
        panel_top, panel_bottom = top + PANEL_GAP_PX, top + PANEL_GAP_PX + PANEL_PX
        parts.append(text(left, panel_top - 10, s.name, cls="panel"))
        y = Scale(*_panel_domain(s), panel_bottom, panel_top)
        parts += _y_axis(y, left, right, tick_format, count=2)
        parts += _series(s, xs, y, x_labels, point_fills, point_format)
        top = panel_bottom
    for x in xs:  # the shared x positions, carried through every panel
        parts.append(line(x, first, x, top, GRID, 1, ' stroke-dasharray="2 4"'))
    parts.append(_y_label(y_label, first, top))
    label_parts, label_px = _x_labels(x_labels, sub_labels, xs, top, highlight, width)
    parts += label_parts
    named, more = _x_label(x_label, left, right, top + label_px + 14)
    parts.append(named)
    return svg(width, top + label_px + 24 + more, title, description, parts, _variant(width))


def _variant(width: float) -> str:
    return "narrow" if width == NARROW else "wide"


def _panel_domain(s: Series) -> tuple[float, float]:
    """The panel's y range: its values (intervals included) on a 10 % grid, at least 10 % tall; a series
    with a value outside [0, 1] (not a rate) gets the plain rounded domain instead."""
    values = [v for seq in (s.values, s.low or (), s.high or ()) for v in seq if v is not None]
    if not values:
        return 0.0, 1.0
    lowest, highest = min(values), max(values)
    if lowest < 0.0 or highest > 1.0:
        return domain(values, lowest, None)
    lo, hi = math.floor(lowest * 10 + 1e-9) / 10, math.ceil(highest * 10 - 1e-9) / 10
    if hi - lo < 0.1:
        lo, hi = (hi - 0.1, hi) if hi >= 0.1 else (lo, lo + 0.1)
    return lo, hi


def _positions(n: int, left: float, right: float) -> list[float]:
    pad = 24.0
    step = (right - left - 2 * pad) / (n - 1) if n > 1 else 0.0
    return [left + pad + i * step if n > 1 else (left + right) / 2 for i in range(n)]


def _y_axis(y: Scale, left: float, right: float, fmt: Format, count: int = 5) -> list[str]:
    parts = []
    for tick in ticks(y.lo, y.hi, count):
        parts.append(line(left, y(tick), right, y(tick), GRID))
        parts.append(text(left - 6, y(tick) + 4, fmt(tick), anchor="end", cls="tick"))
    parts.append(line(left, y.start, right, y.start, MUTED))
    return parts


def _y_label(label: str, top: float, bottom: float) -> str:
    middle = (top + bottom) / 2
    rotate = f' transform="rotate(-90 14 {coord(middle)})"'
    return text(14, middle, label, anchor="middle", cls="axis y-axis", extra=rotate)


def _x_label(label: str, left: float, right: float, y: float) -> tuple[str, float]:
    """The x axis's name under the plot, on two lines where one would not fit; and the height added."""
    return wrapped_text((left + right) / 2, y, label, right - left, anchor="middle", cls="axis x-axis")


def _x_labels(
    labels: Sequence[str],
    subs: Sequence[str],
    xs: Sequence[float],
    bottom: float,
    bold: int | None,
    width: float,
) -> tuple[list[str], float]:
    """Horizontal labels when they fit between points; otherwise turned in the wide drawing (then
    without the second line) and thinned out in the narrow one: the bold point (else the last), the
    first, every k-th point counted from the bold one, and none that would overlap a label placed.

    A horizontal label that would run past the chart's edge is aligned to that edge instead of centred
    on its point.
    """
    step = xs[1] - xs[0] if len(xs) > 1 else width
    longest = max([1, *(len(shorten(label, X_LABEL_CHARS)) for label in labels)])
    narrow = width == NARROW
    widest = max([longest * BOLD_CHAR_PX, *(len(sub) * CHAR_PX for sub in subs)])
    rotate = not narrow and len(labels) > 1 and longest * CHAR_PX > step - 6
    every = math.ceil((widest + 8) / step) if narrow and len(labels) > 1 and widest > step - 6 else 1
    first = bold if bold is not None else len(labels) - 1
    # The bold (or last) point first, then the oldest, so that both ends of the axis are named.
    order = sorted(range(len(labels)), key=lambda i: (i != first, i != 0, abs(i - first), i))
    placed: list[tuple[int, str]] = []
    taken: list[tuple[float, float]] = []
    for i in (i for i in order if i == 0 or (i - first) % every == 0):
        x, shown = xs[i], shorten(labels[i], X_LABEL_CHARS)
        cls = "tick strong" if i == bold else "tick"
        if rotate:
            extra = f' transform="rotate(-35 {coord(x)} {coord(bottom + 14)})"'
            placed.append((i, text(x, bottom + 14, shown, anchor="end", cls=cls, extra=extra)))
            continue
        sub = subs[i] if i < len(subs) else ""
        span = max(len(shown) * (BOLD_CHAR_PX if i == bold else CHAR_PX), len(sub) * CHAR_PX)
        anchor, at, start = "middle", x, x - span / 2
        if x + span / 2 > width - 2:
            anchor, at, start = "end", width - 2.0, width - 2.0 - span
        elif x - span / 2 < 2:
            anchor, at, start = "start", 2.0, 2.0
        if narrow and any(start < end + 6 and other < start + span + 6 for other, end in taken):
            continue
        taken.append((start, start + span))
        below = text(at, bottom + 30, sub, anchor=anchor, cls="small") if sub else ""
        placed.append((i, text(at, bottom + 16, shown, anchor=anchor, cls=cls) + below))
    parts = [markup for _, markup in sorted(placed)]  # in the order of the points, left to right
    return parts, (longest * CHAR_PX * 0.6 + 24 if rotate else 36)


def _series(
    s: Series,
    xs: Sequence[float],
    y: Scale,
    labels: Sequence[str],
    fills: Sequence[str | None],
    fmt: Format,
) -> list[str]:
    parts = []
    lows = s.low or [None] * len(xs)
    highs = s.high or [None] * len(xs)
    banded = [
        lo is not None and hi is not None and v is not None
        for v, lo, hi in zip(s.values, lows, highs, strict=True)
    ]
    for run in _runs(banded):
        if len(run) > 1:
            upper = [f"{coord(xs[i])},{coord(y(highs[i]))}" for i in run]
            lower = [f"{coord(xs[i])},{coord(y(lows[i]))}" for i in reversed(run)]
            parts.append(
                f'<polygon points="{" ".join(upper + lower)}" fill="{s.colour}" fill-opacity="0.12"/>'
            )
        else:
            (i,) = run
            parts.append(line(xs[i], y(lows[i]), xs[i], y(highs[i]), s.colour, 1.5))
    for run in _runs([v is not None for v in s.values]):
        if len(run) > 1:
            points = " ".join(f"{coord(xs[i])},{coord(y(s.values[i]))}" for i in run)
            parts.append(f'<polyline points="{points}" fill="none" stroke="{s.colour}" stroke-width="2"/>')
    for i, value in enumerate(s.values):
        if value is None:
            continue
        fill = fills[i] if i < len(fills) and fills[i] else s.colour
        parts.append(
            f'<circle cx="{coord(xs[i])}" cy="{coord(y(value))}" r="4.5" fill="{fill}" stroke="{s.colour}" '
            f'stroke-width="1.5"><title>{esc(s.name)} at {esc(labels[i])}: {esc(fmt(value))}</title></circle>'
        )
    return parts


def _runs(flags: Sequence[bool]) -> list[list[int]]:
    """Maximal runs of consecutive indices whose flag is true."""
    runs: list[list[int]] = []
    for i, flag in enumerate(flags):
        if not flag:
            continue
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs

"""Inline SVG charts for the HTML report: the shared primitives and row charts (bars, or dots with interval
whiskers); the charts over runs or days are in :mod:`reports.charts_lines`.

Contract of every chart function: it returns one self-contained ``<svg>`` string whose first child is an
accessible ``<title>``, with axis tick labels, an x-axis and a y-axis label (``<text>`` of class
``x-axis`` and ``y-axis``, naming the unit) and a legend. Every text is HTML-escaped
here, so callers pass raw strings. A value that is missing or not a finite number is never plotted
(callers pass ``None``), and :func:`coord` refuses a non-finite coordinate, so ``NaN`` or ``inf`` can
never reach the markup. Output depends only on the arguments (no clock, no randomness).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Okabe-Ito: distinguishable with the common colour-vision deficiencies and dark enough on white.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#7F3C8D", "#56B4E9")
STATUS = {"pass": "#1a7f37", "fail": "#cf222e", "warn": "#b35900", "na": "#8c959f"}
INK, GRID, MUTED, FAIL_BACKGROUND = "#24292f", "#e4e7eb", "#57606a", "#fdecec"

FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"
WIDTH = 880
CHAR_PX = 6.6  # mean advance of a 12 px sans-serif glyph: sizes margins without measuring text
BOLD_CHAR_PX = 7.6  # the same for bold text (failing rows), with room for wide glyphs such as ≥
ROW_PX = 26
MAX_LABEL_CHARS = 32

Format = Callable[[float], str]


def esc(value: object) -> str:
    """``value`` as text safe in HTML content and in quoted attributes."""
    return html.escape(str(value), quote=True)


def finite(value: object) -> float | None:
    """``value`` as a float when it is a real, finite number; otherwise None (None, bool, str, NaN, inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def coord(x: float) -> str:
    """An SVG coordinate. Raises on NaN/inf: a bad value fails here instead of silently breaking a chart."""
    if not math.isfinite(x):
        raise ValueError(f"non-finite SVG coordinate {x!r}")
    return f"{x:.1f}"


def shorten(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def percent(value: float) -> str:
    return f"{value:.0%}"


def plain(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Scale:
    """Linear map of the domain ``[lo, hi]`` (``lo < hi``) onto pixels ``[start, end]``."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        return self.start + (value - self.lo) / (self.hi - self.lo) * (self.end - self.start)


def domain(values: Sequence[float | None], floor: float, ceil: float | None = None) -> tuple[float, float]:
    """``[lo, hi]`` covering ``floor`` (and ``ceil``) and every finite value, with ``lo < hi``.

    Without ``ceil`` the top is rounded up to the next tick, so the axis ends on a labelled value.
    """
    seen = [v for v in values if v is not None]
    lo = min([floor, *seen])
    hi = max([ceil if ceil is not None else floor, *seen])
    if hi <= lo:
        hi = lo + 1.0
    if ceil is None:
        step = _step(lo, hi)
        hi = math.ceil(hi / step - 1e-9) * step
    return lo, hi


def _step(lo: float, hi: float, count: int = 5) -> float:
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2, 2.5 or 5 × 10^k) within ``[lo, hi]``."""
    step = _step(lo, hi, count)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def text(x: float, y: float, content: str, *, anchor: str = "start", cls: str = "", extra: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f'<text x="{coord(x)}" y="{coord(y)}" text-anchor="{anchor}"{klass}{extra}>{esc(content)}</text>'


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1, extra: str = "") -> str:
    return (
        f'<line x1="{coord(x1)}" y1="{coord(y1)}" x2="{coord(x2)}" y2="{coord(y2)}" '
        f'stroke="{stroke}" stroke-width="{width:g}"{extra}/>'
    )


def svg(width: float, height: float, title: str, description: str, body: Sequence[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {coord(width)} {coord(height)}" '
        f'width="{coord(width)}" height="{coord(height)}" class="chart" '
        f'font-family="{FONT}" font-size="12">'
        f"<title>{esc(title)}</title><desc>{esc(description)}</desc>" + "".join(body) + "</svg>"
    )


# -- legend ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One legend entry: ``kind`` is ``box``, ``line``, ``tick``, ``dash``, ``dot`` or ``whisker``."""

    kind: str
    colour: str
    label: str


def legend(keys: Sequence[Key], left: float, top: float, width: float) -> tuple[list[str], float]:
    """Legend entries flowed into lines of at most ``width`` pixels; returns the parts and its height."""
    parts, x, y = [], left, top + 10
    for key in keys:
        span = 26 + len(key.label) * CHAR_PX + 14
        if x > left and x + span > left + width:
            x, y = left, y + 18
        parts.append(_swatch(key, x, y))
        parts.append(text(x + 24, y + 4, key.label, cls="legend"))
        x += span
    return parts, (y - top + 12) if keys else 0.0


def _swatch(key: Key, x: float, y: float) -> str:
    if key.kind == "box":
        return f'<rect x="{coord(x)}" y="{coord(y - 5)}" width="18" height="10" fill="{key.colour}"/>'
    if key.kind == "dot":
        return f'<circle cx="{coord(x + 9)}" cy="{coord(y)}" r="4.5" fill="{key.colour}"/>'
    if key.kind == "tick":
        return line(x + 9, y - 7, x + 9, y + 7, key.colour, 2.5)
    if key.kind == "dash":
        return line(x, y, x + 18, y, key.colour, 2, ' stroke-dasharray="4 3"')
    if key.kind == "whisker":
        return (
            line(x, y, x + 18, y, key.colour, 1.5)
            + line(x, y - 4, x, y + 4, key.colour, 1.5)
            + line(x + 18, y - 4, x + 18, y + 4, key.colour, 1.5)
        )
    return line(x, y, x + 18, y, key.colour, 2.5)


# -- row chart -------------------------------------------------------------------------------------


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
    its ticks), written above the row labels.
    """
    label_px = max([10, *(len(shorten(r.label)) for r in rows)]) * BOLD_CHAR_PX + 14
    label_px = max(label_px, len(y_label) * CHAR_PX + 14)
    right_px = max([4, *(len(_right_text(r)) for r in rows)]) * BOLD_CHAR_PX + 16
    left, right = min(label_px, 250), WIDTH - min(right_px, 230)
    parts, legend_px = legend(keys, left, 6, right - left)
    top = 6 + legend_px + (18 if reference is not None else 14)
    bottom = top + ROW_PX * max(len(rows), 1)
    values = [v for r in rows for v in (r.value, r.low, r.high, r.marker)]
    scale = Scale(*domain([*values, reference], floor, ceil), left, right)
    parts += _axis(scale, top, bottom, x_label, tick_format, integer)
    for i, row in enumerate(rows):
        parts += _row(row, scale, top + i * ROW_PX, bars)
    # The category axis is named like a column header, above its labels: a rotated label would not fit
    # beside a chart of one or two rows.
    parts.append(text(scale.start - 8, top - 8, y_label, anchor="end", cls="axis y-axis"))
    if reference is not None:
        x = scale(reference)
        parts.append(line(x, top - 6, x, bottom, INK, 1.5, ' stroke-dasharray="5 3"'))
        parts.append(text(x, top - 9, reference_label, anchor="middle", cls="small"))
    return svg(WIDTH, bottom + 42, title, description, parts)


def _right_text(row: Row) -> str:
    shown = row.value_text if row.value is not None else "n/a"
    return f"{shown} · {row.note}" if row.note else shown


def _axis(scale: Scale, top: float, bottom: float, label: str, fmt: Format, integer: bool) -> list[str]:
    parts = []
    for tick in ticks(scale.lo, scale.hi, integer=integer):
        x = scale(tick)
        parts.append(line(x, top, x, bottom, GRID))
        parts.append(text(x, bottom + 15, fmt(tick), anchor="middle", cls="tick"))
    parts.append(line(scale.start, bottom, scale.end, bottom, MUTED))
    parts.append(text((scale.start + scale.end) / 2, bottom + 34, label, anchor="middle", cls="axis x-axis"))
    return parts


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

"""Inline SVG charts for the HTML report: the shared primitives and the legend; row charts (bars, or dots
with interval whiskers) are in :mod:`reports.charts_rows`, the charts over runs or days in
:mod:`reports.charts_lines`.

Contract of every chart function: it returns two self-contained ``<svg>`` drawings of the same data, one
laid out for a wide window (class ``chart wide``, :data:`WIDTH` units wide) and one for a phone (class
``chart narrow``, :data:`NARROW` units wide: labels above their bars, fewer x labels); the stylesheet
shows one of them, scaled to the width of the page, so its text stays about the size it was drawn at.
Each drawing's first child is an accessible ``<title>``, and each has axis tick labels, an x-axis and a
y-axis label (``<text>`` of class ``x-axis`` and ``y-axis``, naming the unit) and a legend. Every text
is HTML-escaped here, so callers pass raw strings. A value that is missing or not a finite number is
never plotted (callers pass ``None``), and :func:`coord` refuses a non-finite coordinate, so ``NaN`` or
``inf`` can never reach the markup. Output depends only on the arguments (no clock, no randomness).
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
# The phone drawing: shown at about 350–560 px (the stylesheet's breakpoint), so 12 px text stays ~12 px.
NARROW = 380
CHAR_PX = 6.6  # mean advance of a 12 px sans-serif glyph: sizes margins without measuring text
BOLD_CHAR_PX = 7.6  # the same for bold text (failing rows), with room for wide glyphs such as ≥
ROW_PX = 26
LINE_PX = 14  # the step between two lines of one wrapped label
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


def wrapped_text(
    x: float, y: float, content: str, room: float, *, anchor: str, cls: str
) -> tuple[str, float]:
    """``content`` as one ``<text>`` broken at spaces into lines of at most ``room`` pixels (each a
    ``<tspan>``, the space kept at the end of a line so the text reads whole), and the height it adds
    below ``y``."""
    limit = max(8, int(room / CHAR_PX))
    lines: list[str] = []
    for word in content.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= limit:
            lines[-1] += " " + word
        else:
            lines.append(word)
    if len(lines) == 1:
        return text(x, y, content, anchor=anchor, cls=cls), 0.0
    ends = [" "] * (len(lines) - 1) + [""]
    spans = "".join(
        f'<tspan x="{coord(x)}" dy="{0 if i == 0 else LINE_PX}">{esc(part + end)}</tspan>'
        for i, (part, end) in enumerate(zip(lines, ends, strict=True))
    )
    markup = f'<text x="{coord(x)}" y="{coord(y)}" text-anchor="{anchor}" class="{cls}">{spans}</text>'
    return markup, LINE_PX * (len(lines) - 1)


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1, extra: str = "") -> str:
    return (
        f'<line x1="{coord(x1)}" y1="{coord(y1)}" x2="{coord(x2)}" y2="{coord(y2)}" '
        f'stroke="{stroke}" stroke-width="{width:g}"{extra}/>'
    )


def svg(
    width: float, height: float, title: str, description: str, body: Sequence[str], variant: str = "wide"
) -> str:
    """One drawing; ``variant`` (``wide`` or ``narrow``) says which window width it is laid out for."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {coord(width)} {coord(height)}" '
        f'width="{coord(width)}" height="{coord(height)}" class="chart {variant}" '
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

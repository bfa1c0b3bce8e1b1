"""Inline SVG for the pages' plots: scales from data to pixels, round tick values, axes, and
the few shapes the charts draw. Pixels are written to 0.1 px: a page of a few hundred
shapes stays small, and the same data always gives the same bytes.

Shapes carry CSS classes, not colours: the page's one stylesheet (markup.STYLE) colours
every chart alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from transformer.research.html.markup import escape, tag


@dataclasses.dataclass(frozen=True)
class Scale:
    """Data values in [low, high] to pixels in [start, end] (end < start for a y axis)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.high - self.low
        if span == 0:
            return (self.start + self.end) / 2
        return self.start + (value - self.low) / span * (self.end - self.start)


def padded(values: Sequence[float], fraction: float = 0.06) -> tuple[float, float]:
    """(low, high) around the finite values with a margin; (0, 1) when there are none, and
    a unit-wide range around a single value."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    if low == high:
        return low - 0.5, high + 0.5
    margin = (high - low) * fraction
    return low - margin, high + margin


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) inside [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    out = []
    value = first
    while value <= high + step * 1e-9:
        out.append(round(value, 12))
        value += step
    return out


def tick_label(value: float) -> str:
    return f"{value:g}"


def number(value: float) -> str:
    """A coordinate as the file writes it."""
    return f"{value:.1f}".rstrip("0").rstrip(".") or "0"


@dataclasses.dataclass(frozen=True)
class Frame:
    """A chart's size and the margins around its plotting area."""

    width: float
    height: float
    left: float = 44
    right: float = 10
    top: float = 22
    bottom: float = 34

    def x_scale(self, low: float, high: float) -> Scale:
        return Scale(low, high, self.left, self.width - self.right)

    def y_scale(self, low: float, high: float) -> Scale:
        return Scale(low, high, self.height - self.bottom, self.top)


def document(frame: Frame, body: str, label: str, **attrs) -> str:
    """The <svg> element: its <title> is what a screen reader and a hover show."""
    return tag(
        "svg",
        tag("title", escape(label)) + body,
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {number(frame.width)} {number(frame.height)}",
        width=number(frame.width),
        height=number(frame.height),
        role="img",
        **attrs,
    )


def line(x1: float, y1: float, x2: float, y2: float, cls: str) -> str:
    return (
        f'<line x1="{number(x1)}" y1="{number(y1)}" x2="{number(x2)}" y2="{number(y2)}" '
        f'class="{escape(cls)}"/>'
    )


def polyline(points: Sequence[tuple[float, float]], cls: str) -> str:
    coords = " ".join(f"{number(x)},{number(y)}" for x, y in points)
    return f'<polyline points="{coords}" class="{escape(cls)}"/>'


def polygon(points: Sequence[tuple[float, float]], cls: str) -> str:
    coords = " ".join(f"{number(x)},{number(y)}" for x, y in points)
    return f'<polygon points="{coords}" class="{escape(cls)}"/>'


def rect(x: float, y: float, width: float, height: float, cls: str) -> str:
    return (
        f'<rect x="{number(x)}" y="{number(y)}" width="{number(max(0.0, width))}" '
        f'height="{number(max(0.0, height))}" class="{escape(cls)}"/>'
    )


def circle(x: float, y: float, r: float, cls: str, title: str | None = None, **data) -> str:
    """A point; `title` shows on hover, `data` become data-* attributes (data_delta=...)."""
    attrs = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in data.items())
    inner = tag("title", escape(title)) if title else ""
    return (
        f'<circle cx="{number(x)}" cy="{number(y)}" r="{number(r)}" class="{escape(cls)}"'
        f"{attrs}>{inner}</circle>"
    )


def text(x: float, y: float, content: str, anchor: str = "start", cls: str | None = None) -> str:
    cls_attr = f' class="{escape(cls)}"' if cls else ""
    return (
        f'<text x="{number(x)}" y="{number(y)}" text-anchor="{anchor}"{cls_attr}>'
        f"{escape(content)}</text>"
    )


def x_axis(frame: Frame, x: Scale, positions: Sequence[float], labels: Sequence[str]) -> str:
    """The bottom axis: a line, a tick and label at each position, light grid lines."""
    bottom = frame.height - frame.bottom
    out = [line(frame.left, bottom, frame.width - frame.right, bottom, "axis")]
    for value, label in zip(positions, labels, strict=True):
        px = x(value)
        out.append(line(px, frame.top, px, bottom, "grid"))
        out.append(line(px, bottom, px, bottom + 4, "axis"))
        out.append(text(px, bottom + 15, label, "middle"))
    return "".join(out)


def y_axis(frame: Frame, y: Scale, positions: Sequence[float]) -> str:
    """The left axis with round tick values and grid lines."""
    out = [line(frame.left, frame.top, frame.left, frame.height - frame.bottom, "axis")]
    for value in positions:
        py = y(value)
        out.append(line(frame.left, py, frame.width - frame.right, py, "grid"))
        out.append(text(frame.left - 5, py + 4, tick_label(value), "end"))
    return "".join(out)


def axis_titles(frame: Frame, x_title: str, title: str) -> str:
    """The x axis's title under it and the chart's title above the plotting area."""
    middle = (frame.left + frame.width - frame.right) / 2
    return text(middle, frame.height - 4, x_title, "middle") + text(
        frame.left, frame.top - 8, title
    )

"""Small multiples: one small chart per arm, every chart on the same axes, each showing the
arm's mean over its runs as a line with the range of the runs (min to max) as a band, and
the baseline's mean as a dashed line to compare against. One chart per arm keeps 16 arms
readable where 16 overlaid lines and bands would not be.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

from transformer.research.html import svg
from transformer.research.html.markup import escape, tag

PANEL = svg.Frame(width=260, height=170)


@dataclasses.dataclass(frozen=True)
class Band:
    """A series over runs: at each x that some run has, the runs' mean, min and max."""

    xs: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    runs: int


def band(curves: Sequence[Mapping[float, float]]) -> Band | None:
    """The Band of the curves ({x: y} each; non-finite values left out); None without a
    value."""
    xs = sorted({x for c in curves for x, y in c.items() if _finite(y)})
    if not xs:
        return None
    columns = [[c[x] for c in curves if x in c and _finite(c[x])] for x in xs]
    return Band(
        xs=xs,
        mean=[statistics.fmean(v) for v in columns],
        low=[min(v) for v in columns],
        high=[max(v) for v in columns],
        runs=len(curves),
    )


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


@dataclasses.dataclass(frozen=True)
class Axes:
    """What the panels of one section share: scales, ticks and the x axis's labels."""

    x: svg.Scale
    y: svg.Scale
    x_positions: list[float]
    x_labels: list[str]
    y_ticks: list[float]
    x_title: str


def shared_axes(
    bands: Sequence[Band | None],
    x_positions: Sequence[float],
    x_labels: Sequence[str],
    x_title: str,
    frame: svg.Frame = PANEL,
) -> Axes:
    """Axes that hold every band, so that panels compare at a glance."""
    values = [v for b in bands if b for v in (*b.low, *b.high)]
    low, high = svg.padded(values)
    xs = [x for b in bands if b for x in b.xs]
    x_low, x_high = svg.padded([*xs, *x_positions], fraction=0.04)
    return Axes(
        x=frame.x_scale(x_low, x_high),
        y=frame.y_scale(low, high),
        x_positions=list(x_positions),
        x_labels=list(x_labels),
        y_ticks=svg.ticks(low, high, 4),
        x_title=x_title,
    )


def x_ticks(xs: Sequence[float], count: int = 5) -> tuple[list[float], list[str]]:
    """Round tick positions and labels over numeric x values (steps)."""
    low, high = min(xs), max(xs)
    positions = svg.ticks(low, high, count) if high > low else [low]
    return positions, [svg.tick_label(p) for p in positions]


def band_panel(
    axes: Axes,
    title: str,
    own: Band | None,
    reference: Band | None = None,
    frame: svg.Frame = PANEL,
) -> str:
    """One arm's chart: its band, mean line and points over the reference's dashed mean."""
    body = [
        svg.x_axis(frame, axes.x, axes.x_positions, axes.x_labels),
        svg.y_axis(frame, axes.y, axes.y_ticks),
        svg.axis_titles(frame, axes.x_title, title),
    ]
    if reference is not None:
        body.append(_reference_line(axes, reference))
    if own is None:
        body.append(svg.text(frame.width / 2, frame.height / 2, "no finished runs", "middle"))
    else:
        body.append(_band_marks(axes, own))
    return svg.document(frame, "".join(body), title)


def _reference_line(axes: Axes, reference: Band) -> str:
    points = [(axes.x(x), axes.y(m)) for x, m in zip(reference.xs, reference.mean, strict=True)]
    if len(points) == 1:  # one step: a short dash across the point
        ((px, py),) = points
        return svg.line(px - 12, py, px + 12, py, "ref")
    return svg.polyline(points, "ref")


def _band_marks(axes: Axes, own: Band) -> str:
    out = []
    if any(lo != hi for lo, hi in zip(own.low, own.high, strict=True)):
        upper = [(axes.x(x), axes.y(h)) for x, h in zip(own.xs, own.high, strict=True)]
        lower = [(axes.x(x), axes.y(lo)) for x, lo in zip(own.xs, own.low, strict=True)]
        if len(own.xs) > 1:
            out.append(svg.polygon(upper + lower[::-1], "band"))
        else:  # one step: the range as a whisker
            out.append(svg.line(upper[0][0], upper[0][1], lower[0][0], lower[0][1], "whisker"))
    points = [(axes.x(x), axes.y(m)) for x, m in zip(own.xs, own.mean, strict=True)]
    if len(points) > 1:
        out.append(svg.polyline(points, "mean"))
    for (px, py), x, m, lo, hi in zip(points, own.xs, own.mean, own.low, own.high, strict=True):
        label = f"{_x_name(axes, x)}: mean {m:.3f} over {own.runs} run(s), range {lo:.3f}-{hi:.3f}"
        out.append(svg.circle(px, py, 2.2, "point", label))
    return "".join(out)


def _x_name(axes: Axes, x: float) -> str:
    """x as its axis labels it (a length bucket's range), else as a number (a step)."""
    named = dict(zip(axes.x_positions, axes.x_labels, strict=True))
    return named.get(x, svg.tick_label(x))


def multiples(figures: Sequence[tuple[str, str]]) -> str:
    """(svg, caption) pairs side by side, wrapping."""
    inner = "".join(
        tag("figure", chart + (tag("figcaption", escape(caption)) if caption else ""))
        for chart, caption in figures
    )
    return tag("div", inner, class_="multiples")

"""The forest plot: each variant's difference from the baseline with its interval, one row
per variant, drawn from the rows of results.csv (the table's own figures, never
recomputed).

The interval is the one the table's stars rest on: Holm's simultaneous interval
(`<metric>_delta_simultaneous_low/high`), which leaves out 0 exactly where the sign is
claimed; where a study's results.csv has no such columns, or for the A/A arm (outside Holm's
family), the unadjusted interval (`<metric>_delta_low/high`), drawn dashed. Behind each row,
the comparison's minimum detectable differences as bands around 0: a true gap inside the
darker band is detected at p < 0.05 with less than 80% probability, one inside the lighter
band (Holm's first step) is starred with less than that.
"""

from __future__ import annotations

import dataclasses

from transformer.research.html import svg
from transformer.research.html.markup import escape, tag

ROW = 24  # pixels per variant
WIDTH = 760


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One variant's row of the plot, from its results.csv row."""

    variant: str
    delta: float
    low: float
    high: float
    simultaneous: bool  # Holm's simultaneous interval; False: the unadjusted one
    significant: bool
    aa: bool
    mdd: float | None
    mdd_holm: float | None


def comparisons(table: list[dict], metric: str, baseline: str, aa: str | None) -> list[Comparison]:
    """The rows with a seed-aware difference ('bleu' or 'chrf'), in the table's order."""
    out = []
    for row in table:
        if row["variant"] == baseline or row.get(f"{metric}_delta") is None:
            continue
        low, high = (
            row.get(f"{metric}_delta_simultaneous_low"),
            row.get(f"{metric}_delta_simultaneous_high"),
        )
        simultaneous = low is not None and high is not None
        if not simultaneous:
            low, high = row[f"{metric}_delta_low"], row[f"{metric}_delta_high"]
        out.append(
            Comparison(
                variant=row["variant"],
                delta=row[f"{metric}_delta"],
                low=low,
                high=high,
                simultaneous=simultaneous,
                significant=bool(row.get(f"{metric}_significant")),
                aa=row["variant"] == aa,
                mdd=row.get(f"{metric}_mdd"),
                mdd_holm=row.get(f"{metric}_mdd_holm"),
            )
        )
    return out


def label(c: Comparison) -> str:
    return c.variant + (" *" if c.significant else "") + (" (A/A)" if c.aa else "")


def describe(c: Comparison, name: str) -> str:
    """What a point's hover says: the gap, its interval as the table writes it, the MDD."""
    if c.significant and c.simultaneous:  # open at 0: the claim bounds the far side only
        interval = f"(0, {c.high:+.2f}]" if c.delta > 0 else f"[{c.low:+.2f}, 0)"
    else:
        interval = f"[{c.low:+.2f}, {c.high:+.2f}]"
    kind = "simultaneous 95% (Holm)" if c.simultaneous else "unadjusted 95%"
    text = f"{label(c)}: {name} {c.delta:+.2f}, {kind} {interval}"
    return text + (f"; MDD {c.mdd:.2f}" if c.mdd is not None else "")


def plot(rows: list[Comparison], name: str, baseline: str) -> str:
    """The SVG: a row per comparison, the zero line, the MDD bands and the x axis."""
    if not rows:
        return tag("p", escape(f"No variant has a seed-aware {name} difference (2 runs each)."))
    frame = _frame(rows)
    x = frame.x_scale(*_domain(rows))
    body = [svg.x_axis(frame, x, *_x_ticks(x))]
    for i, c in enumerate(rows):
        body.append(_row(frame, x, frame.top + (i + 0.5) * ROW, c, name))
    body.append(svg.line(x(0), frame.top, x(0), frame.height - frame.bottom, "zero"))
    body.append(svg.axis_titles(frame, f"Δ{name} vs {baseline}", f"Δ{name}"))
    return svg.document(frame, "".join(body), f"Forest plot of Δ{name} vs {baseline}")


def _frame(rows: list[Comparison]) -> svg.Frame:
    longest = max(len(label(c)) for c in rows)
    left = min(260, max(90, 7 * longest + 14))
    return svg.Frame(width=WIDTH, height=len(rows) * ROW + 64, left=left, right=16, top=26)


def _domain(rows: list[Comparison]) -> tuple[float, float]:
    values = [0.0]
    for c in rows:
        values += [c.low, c.high]
        values += [s * m for m in (c.mdd, c.mdd_holm) if m is not None for s in (-1, 1)]
    return svg.padded(values, fraction=0.05)


def _x_ticks(x: svg.Scale) -> tuple[list[float], list[str]]:
    positions = svg.ticks(x.low, x.high, 6)
    return positions, [f"{p:+g}" if p else "0" for p in positions]


def _row(frame: svg.Frame, x: svg.Scale, y: float, c: Comparison, name: str) -> str:
    out = []
    for mdd, cls in ((c.mdd_holm, "mdd-holm"), (c.mdd, "mdd")):
        if mdd is not None:
            out.append(svg.rect(x(-mdd), y - ROW / 2 + 2, x(mdd) - x(-mdd), ROW - 4, cls))
    kind = "interval" + (" aa" if c.aa else "") + ("" if c.simultaneous else " unadjusted")
    out.append(svg.line(x(c.low), y, x(c.high), y, kind))
    estimate = "estimate" + (" significant" if c.significant else "") + (" aa" if c.aa else "")
    out.append(
        svg.circle(
            x(c.delta),
            y,
            4.5,
            estimate,
            describe(c, name),
            data_variant=c.variant,
            data_delta=repr(c.delta),
            data_low=repr(c.low),
            data_high=repr(c.high),
        )
    )
    cls = "label" + (" significant" if c.significant else "") + (" aa" if c.aa else "")
    out.append(svg.text(frame.left - 8, y + 4, label(c), "end", cls))
    return "".join(out)


LEGEND = (
    "Each row: the variant's difference from the baseline (mean run score of its arm minus "
    "the baseline's, the seed-aware test of the table), with the interval its * rests on: "
    "Holm's simultaneous 95% interval (solid), or the unadjusted 95% interval (dashed) for "
    "the A/A arm, which is outside Holm's family, and wherever results.csv has no "
    "simultaneous interval. Filled point and bold name (*): the sign is claimed after Holm. "
    "Orange: the A/A arm, the baseline again under other seeds; its interval should hold 0. "
    "Green bands around 0: the comparison's minimum detectable difference at 80% power, "
    "darker at p < 0.05 alone, lighter at Holm's first step (starred whatever the others "
    "show): a true gap inside a band is more likely missed than found. Hover a point for "
    "its numbers."
)

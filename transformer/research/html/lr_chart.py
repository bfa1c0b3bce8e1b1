"""Each arm's learning-rate search as a small chart: the final validation loss (mean over the
tuning seeds, with their sd as whiskers where there are several) against the multiple of the
arm's learning rate on a log axis, the chosen point ringed, a diverged point as a red mark at
the top. Drawn from lr_grid.csv, the rows the Markdown grid table is written from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from transformer.research.html import charts, svg
from transformer.research.sweep.lr_grid import scale_label


def by_variant(grid_rows: list[dict]) -> dict[str, list[dict]]:
    """{variant: its grid points, by scale}, variants in the file's order."""
    out: dict[str, list[dict]] = {}
    for row in grid_rows:
        out.setdefault(row["variant"], []).append(row)
    return {name: sorted(rows, key=lambda r: r["lr_scale"]) for name, rows in out.items()}


def axes(searches: dict[str, list[dict]]) -> charts.Axes:
    """Axes shared by every arm's chart: every scale tried, every loss +- sd."""
    scales = sorted({r["lr_scale"] for rows in searches.values() for r in rows})
    values = []
    for rows in searches.values():
        for r in rows:
            if r["valid_loss_mean"] is not None:
                sd = r["valid_loss_std"] or 0.0
                values += [r["valid_loss_mean"] - sd, r["valid_loss_mean"] + sd]
    low, high = svg.padded(values)
    positions = [math.log2(s) for s in scales]
    x_low, x_high = svg.padded(positions, fraction=0.08)
    frame = charts.PANEL
    return charts.Axes(
        x=frame.x_scale(x_low, x_high),
        y=frame.y_scale(low, high),
        x_positions=positions,
        x_labels=[scale_label(s) for s in scales],
        y_ticks=svg.ticks(low, high, 4),
        x_title="learning-rate multiple",
    )


def title(name: str, rows: Sequence[dict]) -> str:
    chosen = next((r for r in rows if r["chosen"]), None)
    if chosen is None:
        return f"{name}: search not finished"
    return f"{name}: {scale_label(chosen['lr_scale'])} chosen"


def panel(shared: charts.Axes, name: str, rows: Sequence[dict]) -> str:
    frame = charts.PANEL
    body = [
        svg.x_axis(frame, shared.x, shared.x_positions, shared.x_labels),
        svg.y_axis(frame, shared.y, shared.y_ticks),
        svg.axis_titles(frame, shared.x_title, title(name, rows)),
    ]
    finished = [r for r in rows if r["valid_loss_mean"] is not None and not r["diverged"]]
    points = [
        (shared.x(math.log2(r["lr_scale"])), shared.y(r["valid_loss_mean"])) for r in finished
    ]
    if len(points) > 1:
        body.append(svg.polyline(points, "mean"))
    for (px, py), r in zip(points, finished, strict=True):
        body.append(_point(shared, px, py, r))
    for r in rows:
        if r["diverged"]:
            px = shared.x(math.log2(r["lr_scale"]))
            body.append(
                svg.circle(
                    px, frame.top + 4, 4, "diverged", f"{scale_label(r['lr_scale'])}: diverged"
                )
            )
    return svg.document(frame, "".join(body), f"learning-rate search of {name}")


def _point(shared: charts.Axes, px: float, py: float, r: dict) -> str:
    out = []
    sd = r["valid_loss_std"]
    mean = r["valid_loss_mean"]
    if sd:
        out.append(svg.line(px, shared.y(mean - sd), px, shared.y(mean + sd), "whisker"))
    lr = "" if r["learning_rate"] is None else f" (lr {r['learning_rate']:g})"
    hover = f"{scale_label(r['lr_scale'])}{lr}: final valid loss {mean:.3f}"
    hover += f" ± {sd:.3f}" if sd else ""
    hover += f" over {r['done']} run(s)" + (", chosen" if r["chosen"] else "")
    out.append(svg.circle(px, py, 3, "point", hover))
    if r["chosen"]:
        out.append(svg.circle(px, py, 7.5, "chosen"))
    return "".join(out)


CAPTION = (
    "Final validation loss against the multiple of each arm's configured learning rate (log "
    "axis), mean over the search's tuning seeds (whiskers: their sd where there are several); "
    "ring: the point chosen (lowest validation loss; test scores play no part); red mark: a "
    "point that diverged. All charts share their axes. Drawn from lr_grid.csv."
)

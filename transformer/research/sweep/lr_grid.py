"""Per-variant learning rates: each variant of a sweep's `lr_grid` is trained at 3-5
log-spaced multiples of its own learning rate and reported at the one with the lowest
validation loss.

A sweep config's ``'lr_grid': {'scales': [0.5, 1.0, 2.0], 'variants': [...]}`` (variants
default to all) multiplies each listed variant's train.learning_rate (after the sweep's and the
variant's overrides) by each scale. Scale 1 is the variant's ordinary run in
DIR/<variant>/<seed>; the others run in DIR/<variant>/lr_x<scale>/<seed>, every seed each.

Selection uses the validation split only: a grid point's score is its final validation loss
(the eval row at the last step, i.e. of the checkpoint eval.py then scores) averaged over its
seeds, and the chosen point is the lowest among the points none of whose seeds diverged.
Until every run of the grid has finished (trained and evaluated, or diverged) the variant
stays at scale 1 and its row says the grid is incomplete. Sensitivity is the spread (max -
min) of the per-point mean validation losses over the points that did not diverge: how much
the variant's result depends on getting its learning rate right; the diverged points are
listed beside it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping

from transformer.common.errors import UserError

MIN_POINTS, MAX_POINTS = 3, 5
SPACING_TOLERANCE = 1e-6  # relative, on consecutive ratios


def scale_label(scale: float) -> str:
    """'x0.5', 'x1', 'x2': a scale as tables and directory names show it."""
    return f"x{scale:g}"


def check_lr_grid(raw: Mapping, variants: Mapping, path: str) -> dict[str, list[float]]:
    """{variant: sorted scales} from the sweep config's lr_grid field ({} when absent)."""
    spec = raw.get("lr_grid")
    if not spec:
        return {}
    if not isinstance(spec, Mapping) or set(spec) - {"scales", "variants"} or "scales" not in spec:
        raise UserError(f"{path}: lr_grid must be {{'scales': [...], 'variants': [...]}}")
    scales = _check_scales(spec["scales"], path)
    names = list(spec.get("variants") or variants)
    unknown = [n for n in names if n not in variants]
    if unknown:
        raise UserError(f"{path}: lr_grid variants {unknown} are not variants; valid: "
                        f"{list(variants)}")  # fmt: skip
    return {name: scales for name in names}


def _check_scales(values, path: str) -> list[float]:
    try:
        scales = sorted(float(v) for v in values)
    except (TypeError, ValueError):
        raise UserError(f"{path}: lr_grid scales must be numbers, got {values!r}") from None
    if not MIN_POINTS <= len(scales) <= MAX_POINTS or len(set(scales)) != len(scales):
        raise UserError(f"{path}: lr_grid needs {MIN_POINTS}-{MAX_POINTS} distinct scales, "
                        f"got {values!r}")  # fmt: skip
    if scales[0] <= 0 or 1.0 not in scales:
        raise UserError(f"{path}: lr_grid scales must be positive and include 1.0 (the "
                        f"variant's own learning rate), got {values!r}")  # fmt: skip
    ratios = [b / a for a, b in zip(scales, scales[1:], strict=False)]
    if max(ratios) - min(ratios) > SPACING_TOLERANCE * max(ratios):
        raise UserError(f"{path}: lr_grid scales must be log-spaced (one ratio between "
                        f"neighbours, e.g. [0.5, 1, 2]), got {values!r}")  # fmt: skip
    return scales


@dataclasses.dataclass
class GridPoint:
    scale: float
    learning_rate: float | None
    runs: int
    done: int
    diverged: int
    valid_loss_mean: float | None  # final validation loss, mean over the done seeds
    valid_loss_std: float | None
    bleu_mean: float | None  # shown beside the grid, never used to choose

    @property
    def complete(self) -> bool:
        return self.done + self.diverged == self.runs

    @property
    def eligible(self) -> bool:
        return self.complete and not self.diverged and self.valid_loss_mean is not None


@dataclasses.dataclass
class Choice:
    scale: float  # the chosen point, or 1.0 while the grid is incomplete
    points: list[GridPoint]

    @property
    def complete(self) -> bool:
        return all(p.complete for p in self.points)

    @property
    def sensitivity(self) -> float | None:
        losses = [p.valid_loss_mean for p in self.points if p.eligible]
        return max(losses) - min(losses) if self.complete and losses else None

    @property
    def learning_rate(self) -> float | None:
        return next(p.learning_rate for p in self.points if p.scale == self.scale)

    @property
    def edge(self) -> str | None:
        """'top' or 'bottom' where a finished grid chose its largest or smallest scale: the
        validation loss was still falling there, so the best rate may lie past the grid."""
        if not self.complete or not any(p.eligible for p in self.points):
            return None
        scales = [p.scale for p in self.points]
        return {max(scales): "top", min(scales): "bottom"}.get(self.scale)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _point(scale: float, rows: list[dict]) -> GridPoint:
    done = [r for r in rows if r["status"] == "done"]
    losses = [r["final_valid_loss"] for r in done if _finite(r["final_valid_loss"])]
    return GridPoint(
        scale=scale,
        learning_rate=next((r["learning_rate"] for r in rows), None),
        runs=len(rows),
        done=len(losses),
        diverged=sum(r["status"] == "diverged" for r in rows),
        valid_loss_mean=_mean(losses),
        valid_loss_std=statistics.stdev(losses) if len(losses) >= 2 else None,
        bleu_mean=_mean([r["bleu"] for r in done if r["bleu"] is not None]),
    )


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def choose(grid: Mapping[str, list[float]], per_run: list[dict]) -> dict[str, Choice]:
    """{variant: Choice} for each variant of the grid, from the per-run summaries (each with
    variant, lr_scale, learning_rate, status, final_valid_loss, bleu)."""
    choices = {}
    for name, scales in grid.items():
        points = [
            _point(s, [r for r in per_run if r["variant"] == name and r["lr_scale"] == s])
            for s in scales
        ]
        choice = Choice(scale=1.0, points=points)
        eligible = [p for p in points if p.eligible]
        if choice.complete and eligible:
            choice.scale = min(eligible, key=lambda p: p.valid_loss_mean).scale
        choices[name] = choice
    return choices


CSV_COLUMNS = ["variant", "lr_scale", "learning_rate", "runs", "done", "diverged",
               "valid_loss_mean", "valid_loss_std", "bleu_mean", "chosen"]  # fmt: skip
NOTE = (
    "lr (best on valid): each grid variant at the multiple of its learning rate whose final "
    "validation loss, mean over seeds, is lowest (test BLEU plays no part); the spread is the "
    "max - min of those means over the grid's non-diverged points. A choice at the grid's "
    "top or bottom scale means validation loss was still falling there: the best learning "
    "rate may lie outside the grid. ΔBLEU: a variant at the best point of its own finished "
    "grid meets the baseline at the baseline's best point; every other variant meets the "
    "baseline at the configured rate, x1 (named in the cell where the baseline's row shows "
    "another), so that one factor changes at a time. Grid table: "
    "`lr_grid.csv`; plot: `lr_valid_loss.png`."
)


def csv_rows(choices: Mapping[str, Choice]) -> list[dict]:
    """One row per (variant, grid point)."""
    rows = []
    for name, choice in choices.items():
        for p in choice.points:
            row = dataclasses.asdict(p)
            row["lr_scale"] = row.pop("scale")
            rows.append({"variant": name, **row,
                         "chosen": choice.complete and p.scale == choice.scale})  # fmt: skip
    return rows


def _cell(point: GridPoint, chosen: bool) -> str:
    if point.diverged:
        return f"diverged ({point.diverged}/{point.runs})"
    if point.valid_loss_mean is None:
        return f"not run ({point.done}/{point.runs})"
    text = f"{point.valid_loss_mean:.3f}"
    if point.valid_loss_std is not None:
        text += f" ± {point.valid_loss_std:.3f}"
    if point.done < point.runs:
        text += f" ({point.done}/{point.runs})"
    return f"**{text}**" if chosen else text


def markdown(choices: Mapping[str, Choice]) -> list[str]:
    """A table of final validation loss (mean ± std over seeds) per variant and grid point,
    the chosen point in bold; [] without a grid."""
    if not choices:
        return []
    scales = sorted({p.scale for c in choices.values() for p in c.points})
    lines = ["", "Learning-rate grid (final validation loss, mean ± std over seeds):", "",
             "| variant | " + " | ".join(f"lr {scale_label(s)}" for s in scales) + " |",
             "|---|" + "---|" * len(scales)]  # fmt: skip
    for name, choice in choices.items():
        by_scale = {p.scale: p for p in choice.points}
        cells = [
            _cell(by_scale[s], choice.complete and s == choice.scale) if s in by_scale else ""
            for s in scales
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines

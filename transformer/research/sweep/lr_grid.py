"""Per-variant learning rates: each variant of a sweep's `lr_grid` is trained at log-spaced
multiples of its own learning rate, the grid widens while its best point is at an edge, and
the variant is reported at the point with the lowest validation loss.

A sweep config's ``'lr_grid': {'scales': [0.5, 1.0, 2.0], 'variants': [...], 'min_scale':
1/16, 'max_scale': 16, 'tune_seeds': [999]}`` multiplies each listed variant's
train.learning_rate (after the sweep's and the variant's overrides) by each scale. Variants
default to all (the A/A arm included); a variant left out runs at its configured rate only,
and the table marks it untuned. Scale 1 is the variant's ordinary run in
DIR/<variant>/<seed>; the others run in DIR/<variant>/lr_x<scale>/<seed>.

The search: the grid's points run on the tuning seeds. By default these are seeds of their own,
disjoint from the compared ones (a list, default [999]; the A/A arm's are each + 1000), so that
every compared run is a fresh draw at the chosen rate: a run that won the selection on
validation loss is never one of the runs the variant is compared with (its luck in the draw
would otherwise count for the variant). 'first' (the variant's first compared seed) and 'all'
(every compared seed at every point) tune on compared runs instead; the table says so. Once
every point has finished, a best point at the grid's largest scale adds the next one up (the
largest times the grid's ratio), at its smallest the next one down, until the best point is
interior or the next point would pass max_scale / min_scale (the cap: a choice there is
flagged 'top'/'bottom' in the table, never reported silently). Then the compared seeds that
are not tuning seeds run at the chosen scale only: the seeds' budget is spent where the
variant is reported.

Selection uses the validation split only: a grid point's score is its final validation loss
(the eval row at the last step, i.e. of the checkpoint eval.py then scores) averaged over its
tuning seeds, and the chosen point is the lowest among the points none of whose tuning seeds
diverged (a diverged point counts as tried: a best point below it is interior). Until the
search has ended the variant stays at scale 1 and its row says the grid is incomplete.
Sensitivity is the spread (max - min) of the per-point mean validation losses over the points
that did not diverge: how much the variant's result depends on getting its learning rate
right.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping

from transformer.common.errors import UserError

MIN_POINTS, MAX_POINTS = 3, 5
SPACING_TOLERANCE = 1e-6  # relative, on consecutive ratios
DEFAULT_MIN_SCALE, DEFAULT_MAX_SCALE = 1 / 16, 16.0  # the widening's cap
TUNE_MODES = ("first", "all")  # tuning on compared seeds; a list of seeds tunes on its own
DEFAULT_TUNE_SEEDS = (999,)  # disjoint from the usual compared seeds 0, 1, 2, ...
FIELDS = {"scales", "variants", "min_scale", "max_scale", "tune_seeds"}


@dataclasses.dataclass(frozen=True, eq=False)  # compared as the mapping it is
class LrGrid(Mapping):
    """{variant: its starting scales}, and how the search widens and on which seeds."""

    scales: dict[str, list[float]]
    min_scale: float = DEFAULT_MIN_SCALE
    max_scale: float = DEFAULT_MAX_SCALE
    tune_seeds: str = "all"  # 'own' (disjoint seeds), 'first' or 'all'
    tuning_seeds: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # per variant

    def __getitem__(self, name: str) -> list[float]:
        return self.scales[name]

    def __iter__(self):
        return iter(self.scales)

    def __len__(self) -> int:
        return len(self.scales)

    @property
    def ratio(self) -> float:
        """The factor between neighbouring points (all variants share the starting grid)."""
        first = next(iter(self.scales.values()))
        return first[1] / first[0]

    def tunes_on(self, name: str, seed: int) -> bool:
        """Whether `seed` is one the variant's grid points run on (any seed of a plain
        grid)."""
        if name not in self.tuning_seeds:
            return self.tune_seeds == "all"
        return seed in self.tuning_seeds[name]

    @property
    def separate(self) -> bool:
        """Whether the search runs on seeds of its own, none of them compared."""
        return self.tune_seeds == "own"

    def own_seeds(self, name: str) -> list[int]:
        """The variant's tuning seeds that are not compared seeds ([] unless separate)."""
        return list(self.tuning_seeds.get(name, [])) if self.separate else []

    @classmethod
    def of(cls, grid: Mapping[str, list[float]]) -> LrGrid:
        """A plain {variant: scales} as a fixed grid on every seed (caps at its own ends)."""
        if isinstance(grid, LrGrid):
            return grid
        every = [s for scales in grid.values() for s in scales]
        low, high = min(every, default=0.0), max(every, default=0.0)
        return cls(scales=dict(grid), min_scale=low, max_scale=high)


def scale_label(scale: float) -> str:
    """'x0.5', 'x1', 'x2': a scale as tables and directory names show it."""
    return f"x{scale:g}"


def check_lr_grid(
    raw: Mapping, variants: Mapping, path: str, seeds: Mapping[str, list[int]], offsets=None
) -> LrGrid:
    """The sweep config's lr_grid field (an empty grid when absent). `seeds` gives each
    variant's compared seeds; `offsets` what is added to a variant's own tuning seeds (the
    A/A arm's shift, so that it repeats the baseline's procedure on fresh seeds)."""
    spec = raw.get("lr_grid")
    if not spec:
        return LrGrid(scales={})
    if not isinstance(spec, Mapping) or set(spec) - FIELDS or "scales" not in spec:
        raise UserError(
            f"{path}: lr_grid must be {{'scales': [...], 'variants': [...], 'min_scale': x, "
            "'max_scale': x, 'tune_seeds': [seeds] | 'first' | 'all'}"
        )
    scales = _check_scales(spec["scales"], path)
    names = _grid_variants(spec, variants, path)
    low, high = _check_caps(spec, scales, path)
    mode, own = _check_tune_seeds(spec.get("tune_seeds", list(DEFAULT_TUNE_SEEDS)), seeds, path)
    offsets = offsets or {}
    return LrGrid(
        scales={name: scales for name in names},
        min_scale=low,
        max_scale=high,
        tune_seeds=mode,
        tuning_seeds={
            name: _tuning_seeds(mode, own, seeds[name], offsets.get(name, 0)) for name in names
        },
    )


def _check_tune_seeds(value, seeds: Mapping[str, list[int]], path: str) -> tuple[str, list[int]]:
    """('own', the listed seeds) or ('first' | 'all', []); own seeds must be distinct ints
    that no variant compares."""
    if isinstance(value, str):
        if value not in TUNE_MODES:
            raise UserError(
                f"{path}: lr_grid tune_seeds must be a list of seeds or one of {TUNE_MODES}, "
                f"got {value!r}"
            )
        return value, []
    try:
        own = [int(s) for s in value]
    except (TypeError, ValueError):
        raise UserError(
            f"{path}: lr_grid tune_seeds must be a list of ints, got {value!r}"
        ) from None
    if not own or len(set(own)) != len(own):
        raise UserError(f"{path}: lr_grid tune_seeds must be distinct ints, got {value!r}")
    compared = sorted({s for listed in seeds.values() for s in listed} & set(own))
    if compared:
        raise UserError(
            f"{path}: lr_grid tune_seeds {compared} are also compared seeds; the search needs "
            "seeds of its own (e.g. 'tune_seeds': [999]), or 'first' to tune on a compared one"
        )
    return "own", own


def _tuning_seeds(mode: str, own: list[int], compared: list[int], offset: int) -> list[int]:
    if mode == "first":
        return compared[:1]
    if mode == "all":
        return list(compared)
    return [s + offset for s in own]


def _grid_variants(spec: Mapping, variants: Mapping, path: str) -> list[str]:
    names = list(spec.get("variants") or variants)
    unknown = [n for n in names if n not in variants]
    if unknown:
        raise UserError(
            f"{path}: lr_grid variants {unknown} are not variants; valid: {list(variants)}"
        )
    return names


def _check_caps(spec: Mapping, scales: list[float], path: str) -> tuple[float, float]:
    """(min_scale, max_scale): how far the grid may widen; they must hold the grid."""
    try:
        low = float(spec.get("min_scale", DEFAULT_MIN_SCALE))
        high = float(spec.get("max_scale", DEFAULT_MAX_SCALE))
    except (TypeError, ValueError):
        raise UserError(f"{path}: lr_grid min_scale and max_scale must be numbers") from None
    slack = 1 + SPACING_TOLERANCE
    if not 0 < low <= scales[0] * slack or high * slack < scales[-1]:
        raise UserError(
            f"{path}: lr_grid min_scale {low:g} and max_scale {high:g} must hold the grid's "
            f"scales {scales} (0 < min_scale <= smallest, largest <= max_scale)"
        )
    return low, high


def _check_scales(values, path: str) -> list[float]:
    try:
        scales = sorted(float(v) for v in values)
    except (TypeError, ValueError):
        raise UserError(f"{path}: lr_grid scales must be numbers, got {values!r}") from None
    if not MIN_POINTS <= len(scales) <= MAX_POINTS or len(set(scales)) != len(scales):
        raise UserError(
            f"{path}: lr_grid needs {MIN_POINTS}-{MAX_POINTS} distinct scales, got {values!r}"
        )
    if scales[0] <= 0 or 1.0 not in scales:
        raise UserError(
            f"{path}: lr_grid scales must be positive and include 1.0 (the "
            f"variant's own learning rate), got {values!r}"
        )
    ratios = [b / a for a, b in zip(scales, scales[1:], strict=False)]
    if max(ratios) - min(ratios) > SPACING_TOLERANCE * max(ratios):
        raise UserError(
            f"{path}: lr_grid scales must be log-spaced (one ratio between "
            f"neighbours, e.g. [0.5, 1, 2]), got {values!r}"
        )
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
    scale: float  # the chosen point, or 1.0 while the search goes on
    points: list[GridPoint]
    next_scale: float | None = None  # the point the search adds: the best is at an edge

    @property
    def complete(self) -> bool:
        """Every point finished and the best one interior or at the cap."""
        return all(p.complete for p in self.points) and self.next_scale is None

    @property
    def sensitivity(self) -> float | None:
        losses = [p.valid_loss_mean for p in self.points if p.eligible]
        return max(losses) - min(losses) if self.complete and losses else None

    @property
    def learning_rate(self) -> float | None:
        return next(p.learning_rate for p in self.points if p.scale == self.scale)

    @property
    def edge(self) -> str | None:
        """'top' or 'bottom' where a finished search chose its largest or smallest scale (at
        the cap, or on a fixed grid): the validation loss was still falling there, so the
        best rate may lie past the grid."""
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
    """{variant: Choice} for each variant of the grid (an LrGrid, or a plain {variant:
    scales}: a fixed grid on every seed), from the per-run summaries (each with variant,
    seed, lr_scale, learning_rate, status, final_valid_loss, bleu); the points are the grid's
    starting scales and any the search added."""
    grid = LrGrid.of(grid)
    choices = {}
    for name, start in grid.items():
        rows = [r for r in per_run if r["variant"] == name and grid.tunes_on(name, r.get("seed"))]
        scales = sorted(set(start) | {r["lr_scale"] for r in rows})
        points = [_point(s, [r for r in rows if r["lr_scale"] == s]) for s in scales]
        choices[name] = _choice(grid, points)
    return choices


def _choice(grid: LrGrid, points: list[GridPoint]) -> Choice:
    choice = Choice(scale=1.0, points=points)
    eligible = [p for p in points if p.eligible]
    if not eligible or not all(p.complete for p in points):
        return choice
    best = min(eligible, key=lambda p: p.valid_loss_mean).scale
    choice.next_scale = _next_scale(grid, [p.scale for p in points], best)
    if choice.next_scale is None:
        choice.scale = best
    return choice


def _next_scale(grid: LrGrid, scales: list[float], best: float) -> float | None:
    """The point past an edge where the best is, unless it would pass the cap."""
    slack = 1 + SPACING_TOLERANCE
    if best == max(scales) and best * grid.ratio <= grid.max_scale * slack:
        return best * grid.ratio
    if best == min(scales) and best / grid.ratio * slack >= grid.min_scale:
        return best / grid.ratio
    return None


CSV_COLUMNS = [
    "variant",
    "lr_scale",
    "learning_rate",
    "runs",
    "done",
    "diverged",
    "valid_loss_mean",
    "valid_loss_std",
    "bleu_mean",
    "chosen",
]
NOTE = (
    "lr (best on valid): each grid variant at the multiple of its learning rate whose final "
    "validation loss, mean over its tuning seeds, is lowest (test BLEU plays no part); the "
    "search widened the grid while its best point was at an edge, up to the cap, and a choice "
    "flagged 'top of grid' or 'bottom of grid' sits at that cap, where the best learning rate "
    "may lie further out. The spread is the max - min of the per-point means over the "
    "non-diverged points. ΔBLEU: a variant at the best point of its own finished search meets "
    "the baseline at the baseline's best point; an untuned variant (outside lr_grid) meets "
    "the baseline at the configured rate, x1 (named in the cell where the baseline's row "
    "shows another), so that one factor changes at a time. Grid table: `lr_grid.csv`; plot: "
    "`lr_valid_loss.png`."
)


def tuning_note(grid: LrGrid) -> str:
    """Which seeds the search ran on, and whether the compared runs include them."""
    grid = LrGrid.of(grid)
    if grid.separate:
        seeds = sorted({s for listed in grid.tuning_seeds.values() for s in listed})
        return (
            f"The search ran on seed(s) {seeds} of its own (an A/A arm's shifted as its "
            "compared seeds are), none of them compared: every compared run is a fresh draw "
            "at the chosen rate."
        )
    which = "each variant's first seed" if grid.tune_seeds == "first" else "every seed"
    return (
        f"The search ran on {which} (tune_seeds '{grid.tune_seeds}'), so the compared runs "
        "include the run(s) that won the selection on validation loss: their luck in the draw "
        "counts for the variant. Tune on seeds of their own (a list) to keep it out."
    )


def csv_rows(choices: Mapping[str, Choice]) -> list[dict]:
    """One row per (variant, grid point)."""
    rows = []
    for name, choice in choices.items():
        for p in choice.points:
            row = dataclasses.asdict(p)
            row["lr_scale"] = row.pop("scale")
            rows.append(
                {"variant": name, **row, "chosen": choice.complete and p.scale == choice.scale}
            )
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
    lines = [
        "",
        "Learning-rate search (final validation loss, mean ± std over the tuning seeds):",
        "",
        "| variant | " + " | ".join(f"lr {scale_label(s)}" for s in scales) + " |",
        "|---|" + "---|" * len(scales),
    ]
    for name, choice in choices.items():
        by_scale = {p.scale: p for p in choice.points}
        cells = [
            _cell(by_scale[s], choice.complete and s == choice.scale) if s in by_scale else ""
            for s in scales
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines

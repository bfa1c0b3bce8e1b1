"""The runs of a sweep: `plan_runs` turns a `Sweep` into one `Run` per (variant, seed), each
with its train/eval command lines and its config checked in-process; per-run state lives in
the run directory (status.json, eval/<split>.json, metrics.jsonl), and a failed subprocess is
classified as 'failed' or 'diverged' from its stderr."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import time

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.common.metrics_file import METRICS_FILE, read_metrics
from transformer.research.sweep import lr_grid
from transformer.research.sweep.lr_grid import scale_label
from transformer.research.sweep.spec import Sweep, load_base_config, set_overrides
from transformer.training import run_config
from transformer.training.early_stopping import STOPPED_MESSAGE

STATUS_FILE = "status.json"


@dataclasses.dataclass
class Run:
    variant: str
    seed: int
    workdir: str
    overrides: dict[str, object]  # sweep overrides + variant overrides + train.seed
    eval_overrides: dict[str, object]
    base: str
    eval_split: str
    num_steps: int | None = None
    config_error: str | None = None
    eval_longer_than: int | str | None = None
    lr_scale: float = 1.0  # a point of the variant's learning-rate grid (lr_grid.py)
    learning_rate: float | None = None  # train.learning_rate as resolved for this run
    eval_score_references: bool = False
    compared: bool = True  # False: a run of the learning-rate search's own seeds only

    @property
    def label(self) -> str:
        lr = "" if self.lr_scale == 1.0 else f" lr={scale_label(self.lr_scale)}"
        tuning = "" if self.compared else " (lr search)"
        return f"variant={self.variant}{lr} seed={self.seed}{tuning}"

    @property
    def role(self) -> str:
        """'compared', or 'tuning' for a run of the search's own seeds (runs.csv)."""
        return "compared" if self.compared else "tuning"

    def train_command(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "transformer.cli.train",
            f"--config={self.base}",
            f"--workdir={self.workdir}",
        ]
        return args + [f"--config.{k}={flag_value(v)}" for k, v in self.overrides.items()]

    def eval_command(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "transformer.cli.evaluate",
            f"--workdir={self.workdir}",
            f"--split={self.eval_split}",
        ]
        if self.eval_longer_than is not None:
            args.append(f"--longer_than={self.eval_longer_than}")
        if self.eval_score_references:
            args.append("--score_references")
        return args + [f"--config.{k}={flag_value(v)}" for k, v in self.eval_overrides.items()]

    @property
    def eval_json(self) -> str:
        return os.path.join(self.workdir, "eval", f"{self.eval_split}.json")


def flag_value(value) -> str:
    """`value` as the text of a --config.section.field=... flag."""
    if value is None:
        raise UserError("None cannot be passed as a --config override; leave the key out")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        raise UserError(f"list/tuple override values are not supported: {value!r}")
    return str(value)


def plan_runs(sweep: Sweep, workdir: str, only: list[str] | None = None) -> list[Run]:
    """The runs the sweep needs now. Grid variants add points as their learning-rate search
    widens, and their compared seeds (those not tuned on) once the search has chosen, so the
    plan grows as runs finish: plan again after executing it until it stops growing."""
    if only:
        missing = [v for v in only if v not in sweep.variants]
        if missing:
            raise UserError(f"--only {missing}: no such variant; valid: {list(sweep.variants)}")
    base_path = sweep.base_file or sweep.base
    names = [name for name in sweep.variants if not only or name in only]
    searches = {name: _search(sweep, workdir, base_path, name) for name in names}
    seeds = {name: sweep.lr_grid.own_seeds(name) + sweep.seeds_of(name) for name in names}
    runs = []
    # Seed-major order, the search's own seeds first (the compared ones wait for its choice):
    # a sweep stopped half-way has every variant's first seeds.
    for index, name in itertools.product(range(max(map(len, seeds.values()))), names):
        if index < len(seeds[name]):
            seed = seeds[name][index]
            for scale in _scales_at(sweep, name, seed, searches[name]):
                runs.append(_plan_run(sweep, workdir, base_path, name, seed, scale))
    return runs


def _scales_at(sweep: Sweep, name: str, seed: int, search) -> list[float]:
    """The scales variant `name` runs at under `seed`: the search's points on its tuning
    seeds, the chosen one on the others (none before the search has chosen)."""
    if name not in sweep.lr_grid:
        return [1.0]
    scales, choice = search
    if sweep.lr_grid.tunes_on(name, seed):
        return scales
    return [choice.scale] if choice.complete else []


def _search(sweep: Sweep, workdir: str, base_path: str, name: str):
    """(the scales tried on the tuning seeds, the Choice): the grid widened while the
    finished points put the best at an edge below the cap."""
    grid = sweep.lr_grid
    if name not in grid:
        return None
    seeds = grid.tuning_seeds[name]
    scales = list(grid[name])
    while True:
        rows = [
            outcome(_plan_run(sweep, workdir, base_path, name, seed, scale))
            for seed, scale in itertools.product(seeds, scales)
        ]
        choice = lr_grid.choose(grid, rows)[name]
        if choice.next_scale is None:
            return scales, choice
        scales = sorted([*scales, choice.next_scale])


def outcome(run: Run) -> dict:
    """What the learning-rate search reads of a run: its status ('done', 'diverged',
    'failed', ... or 'not run') and final validation loss."""
    finished = is_finished(run)
    status = "done" if finished else read_status(run).get("status", "not run")
    losses = [r["loss"] for r in _valid_rows(run.workdir)] if finished else []
    return {
        "variant": run.variant,
        "seed": run.seed,
        "lr_scale": run.lr_scale,
        "learning_rate": run.learning_rate,
        "status": status,
        "final_valid_loss": losses[-1] if losses else None,
        "bleu": None,
    }


def _valid_rows(workdir: str) -> list[dict]:
    try:
        rows = read_metrics(os.path.join(workdir, METRICS_FILE))
    except UserError:
        return []
    return [r for r in rows if _is_valid_loss(r)]


def _is_valid_loss(row: dict) -> bool:
    return row.get("kind") == "eval" and row.get("split", "valid") == "valid" and "loss" in row


def _plan_run(
    sweep: Sweep, workdir: str, base_path: str, name: str, seed: int, scale: float
) -> Run:
    """The run of variant `name` at `seed`, its learning rate times `scale`."""
    variant = sweep.variants[name]
    overrides = {**sweep.overrides, **variant, "train.seed": seed}
    learning_rate = _learning_rate(base_path, overrides)
    where = run_dir(workdir, name, seed, scale)
    if scale != 1.0:
        if learning_rate is not None:
            learning_rate *= scale
            overrides["train.learning_rate"] = learning_rate
    decode = {k: v for k, v in variant.items() if k.startswith("decode.")}
    run = Run(
        variant=name,
        seed=seed,
        workdir=where,
        overrides=overrides,
        eval_overrides={**sweep.eval_overrides, **decode},
        base=base_path,
        eval_split=sweep.eval_split,
        eval_longer_than=sweep.eval_longer_than,
        lr_scale=scale,
        learning_rate=learning_rate,
        eval_score_references=sweep.eval_score_references,
        compared=seed in sweep.seeds_of(name),
    )
    _resolve_run_config(run)
    return run


def run_dir(workdir: str, name: str, seed: int, scale: float) -> str:
    """Where the run of variant `name` at `seed` and learning-rate scale `scale` lives:
    DIR/<variant>/<seed>, DIR/<variant>/lr_x<scale>/<seed> off scale 1."""
    if scale == 1.0:
        return os.path.join(workdir, name, str(seed))
    return os.path.join(workdir, name, f"lr_{scale_label(scale)}", str(seed))


def _learning_rate(base_path: str, overrides: dict) -> float | None:
    """train.learning_rate of the base config with `overrides` (None when they do not
    build: _resolve_run_config then records why)."""
    try:
        return float(set_overrides(load_base_config(base_path), overrides).train.learning_rate)
    except (UserError, TypeError, ValueError, KeyError, AttributeError):
        return None


def _resolve_run_config(run: Run) -> None:
    """Builds the run's config in-process: catches bad values before any subprocess starts."""
    try:
        config = set_overrides(load_base_config(run.base), run.overrides)
        run_config.validate(config)
        for key in run.overrides:  # the values must survive the command line
            flag_value(run.overrides[key])
        run.num_steps = int(config.train.num_steps)
    except (UserError, TypeError, ValueError, KeyError, AttributeError) as e:
        run.config_error = " ".join(str(e).split()) or type(e).__name__


def read_status(run: Run) -> dict:
    try:
        with open(os.path.join(run.workdir, STATUS_FILE)) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def write_status(run: Run, **fields) -> dict:
    """Merges fields into the run's status.json. A write that changes nothing but the time
    is skipped, so resuming a sweep leaves its finished runs' files as they were."""
    os.makedirs(run.workdir, exist_ok=True)
    old = read_status(run)
    status = json.loads(
        json.dumps(
            {**old, **fields, "variant": run.variant, "seed": run.seed, "overrides": run.overrides},
            default=str,
        )
    )
    if old and old == status:  # status holds old["updated"]: equal only if nothing changed
        return old
    status["updated"] = time.time()
    path = os.path.join(run.workdir, STATUS_FILE)
    atomic_write(path, json.dumps(status, indent=2))
    return status


def read_eval(run: Run) -> dict | None:
    try:
        with open(run.eval_json) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_finished(run: Run) -> bool:
    """Evaluated after training ended: at train.num_steps, or earlier by early stopping (its
    evaluation then reads the best checkpoint, not the last)."""
    record = read_eval(run)
    if record is None or run.num_steps is None:
        return False
    return record.get("step") == run.num_steps or stopped_early(run.workdir)


def stopped_early(workdir: str) -> bool:
    """Whether the run's metrics.jsonl records that early stopping ended it."""
    try:
        rows = read_metrics(os.path.join(workdir, METRICS_FILE), kind="info")
    except UserError:
        return False
    return any(r.get("message", "").startswith(STOPPED_MESSAGE) for r in rows)


def classify_failure(returncode: int, stderr_text: str) -> str:
    """'diverged' when the trainer reported a non-finite loss, else 'failed'."""
    if "non-finite loss" in stderr_text.lower():
        return "diverged"
    return "failed"


def error_line(stderr_text: str) -> str:
    """The line of a subprocess's stderr that names its error (at most 500 characters)."""
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("error:") or "Error" in ln.split(":")[0]:
            return ln[:500]
    return lines[-1][:500] if lines else ""


def last_train_step(workdir: str) -> int | None:
    try:
        rows = read_metrics(os.path.join(workdir, METRICS_FILE))
    except UserError:
        return None
    steps = [r["step"] for r in rows if r.get("kind") == "train" and "step" in r]
    return steps[-1] if steps else None

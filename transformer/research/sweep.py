"""Sweeps: train and evaluate named config variants x seeds, then tabulate and plot them.

    transformer-sweep --config configs/sweeps/architecture.py --workdir runs/sweep \
        [--only VARIANT ...] [--dry_run] [--report_only] [--parallel N] [--retry_failed]

A sweep config is a Python file whose `get_config()` returns a dict (or a ConfigDict built with
``allow_dotted_keys=True``) with:

  base            path of a run config file, e.g. 'configs/default.py'
  overrides       {'section.field': value} applied to every run (e.g. a shorter schedule)
  variants        {name: {'section.field': value, ...}}; a bare field name ('norm_position')
                  is accepted when exactly one section has it; `grid(...)` builds products
  seeds           [0, 1, ...]: each (variant, seed) is one run with train.seed = seed
  eval_split      split scored by eval.py after training (default 'test')
  eval_overrides  decode settings for that evaluation, e.g. {'decode.strategy': 'greedy'}
  eval_longer_than  also score the test sentences whose source is longer than this many
                  tokens, or 'train' (longer than data.max_source_len, i.e. than any training
                  example): eval.py --longer_than, a length-generalisation column
  parallel        runs at once (default 1); >1 starts that many subprocesses, one GPU each
                  when GPUs are visible

Each run trains in its own subprocess (`python train.py --config BASE --config.k=v ...`, so
a crash or divergence ends only that run and its memory is released) in
``DIR/<variant>/<seed>`` and is then scored by ``python eval.py --split <eval_split>``. The
sweep skips finished runs (``eval/<split>.json`` exists with step == train.num_steps), resumes
interrupted ones (train.py resumes from the latest checkpoint) and records failed or diverged
runs in ``DIR/<variant>/<seed>/status.json`` without stopping (rerun them with
--retry_failed). Logs of each attempt go to ``train.log`` / ``eval.log`` beside it.

At the end (or with --report_only) it writes ``DIR/results.csv`` and ``DIR/results.md`` (per
variant: BLEU mean and std over seeds, chrF, best validation loss, parameters, training
tokens/s, wall time, failures), ``DIR/runs.csv`` (one row per run), ``DIR/valid_loss.png``
and ``DIR/bleu.png``.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.training import run_config

STATUS_FILE = "status.json"
DEFAULT_POLL_S = 5.0


# --------------------------------------------------------------------------------- config


def grid(*dicts: Mapping[str, Iterable], **axes: Iterable) -> dict[str, dict]:
    """Cross product of override values, as named variants.

    grid(norm_position=['pre', 'post'], activation=['relu', 'gelu']) ->
        {'norm_position=pre,activation=relu': {'norm_position': 'pre', 'activation': 'relu'},
         ...}  (4 variants). Dotted keys go in a positional dict: grid({'train.warmup_steps':
    [0, 200]}); the name then uses the field after the last dot.
    """
    merged: dict[str, list] = {}
    for d in dicts:
        merged.update({k: list(v) for k, v in d.items()})
    merged.update({k: list(v) for k, v in axes.items()})
    if not merged:
        raise ValueError("grid() needs at least one axis")
    keys = list(merged)
    variants = {}
    for values in itertools.product(*(merged[k] for k in keys)):
        chosen = dict(zip(keys, values, strict=True))
        name = ",".join(f"{k.rsplit('.', 1)[-1]}={_short(v)}" for k, v in chosen.items())
        variants[name] = chosen
    return variants


def _short(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass
class Sweep:
    path: str
    base: str
    overrides: dict[str, object]
    variants: dict[str, dict[str, object]]  # full 'section.field' keys
    seeds: list[int]
    eval_split: str
    eval_overrides: dict[str, object]
    parallel: int
    eval_longer_than: int | str | None = None
    base_file: str = ""  # `base` as found on disk (_find_base)


def _plain(value):
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def _flatten(overrides: Mapping, prefix: str = "") -> dict[str, object]:
    """{'model': {'x': 1}} and {'model.x': 1} -> {'model.x': 1}."""
    out = {}
    for key, value in _plain(overrides).items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) or hasattr(value, "to_dict"):
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out


def load_base_config(path: str):
    """The ConfigDict of a run config file (what train.py --config PATH loads)."""
    return run_config.load_config_file(path)


def _resolve_keys(overrides: Mapping, base, where: str) -> dict[str, object]:
    """Bare field names -> 'section.field' (unique section); unknown keys are errors."""
    out = {}
    for key, value in _flatten(overrides).items():
        if "." in key:
            section, _, field = key.partition(".")
            if section not in base or field not in base[section]:
                raise UserError(f"{where}: unknown config key {key!r}; see configs/base.py")
            out[key] = value
            continue
        owners = [s for s in base if key in base[s]]
        if len(owners) != 1:
            what = "unknown" if not owners else f"ambiguous ({', '.join(owners)})"
            raise UserError(f"{where}: config key {key!r} is {what}; write it as 'section.{key}'")
        out[f"{owners[0]}.{key}"] = value
    return out


def load_sweep(path: str) -> Sweep:
    raw = _plain(run_config.load_config_module(path, "sweep config").get_config())
    if not isinstance(raw, Mapping):
        raise UserError(f"{path}: get_config() must return a dict or ConfigDict")
    known = {"base", "overrides", "variants", "seeds", "eval_split", "eval_overrides", "parallel",
             "name", "description", "eval_longer_than"}  # fmt: skip
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserError(f"{path}: unknown sweep field(s) {unknown}; valid: {sorted(known)}")
    if "base" not in raw or "variants" not in raw:
        raise UserError(f"{path}: a sweep config needs 'base' and 'variants'")
    base_path = _find_base(raw["base"], path)
    base = load_base_config(base_path)
    variants = {}
    for name, ov in _plain(raw["variants"]).items():
        if not name or "/" in name or name.startswith("."):
            raise UserError(f"{path}: variant name {name!r} must be a plain directory name")
        variants[name] = _resolve_keys(ov or {}, base, f"variant {name!r}")
    if not variants:
        raise UserError(f"{path}: no variants")
    seeds = [int(s) for s in raw.get("seeds", [0])]
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"{path}: seeds must be a non-empty list of distinct ints, got {seeds}")
    eval_overrides = _resolve_keys(raw.get("eval_overrides", {}) or {}, base, "eval_overrides")
    if any(not k.startswith("decode.") for k in eval_overrides):
        raise UserError(f"{path}: eval_overrides may only set decode.* keys")
    parallel = int(raw.get("parallel", 1))
    if parallel < 1:
        raise UserError(f"{path}: parallel must be >= 1, got {parallel}")
    longer_than = raw.get("eval_longer_than")
    if longer_than is not None and longer_than != "train":
        if not isinstance(longer_than, int) or isinstance(longer_than, bool) or longer_than < 0:
            raise UserError(
                f"{path}: eval_longer_than must be a token count or 'train', got {longer_than!r}"
            )
    return Sweep(
        path=path,
        base=raw["base"],
        overrides=_resolve_keys(raw.get("overrides", {}) or {}, base, "overrides"),
        variants=variants,
        seeds=seeds,
        eval_split=str(raw.get("eval_split", "test")),
        eval_overrides=eval_overrides,
        parallel=parallel,
        eval_longer_than=longer_than,
        base_file=base_path,
    )


# ----------------------------------------------------------------------------------- runs


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

    @property
    def label(self) -> str:
        return f"variant={self.variant} seed={self.seed}"

    def train_command(self) -> list[str]:
        args = [sys.executable, "-m", "transformer.cli.train", f"--config={self.base}",
                f"--workdir={self.workdir}"]  # fmt: skip
        return args + [f"--config.{k}={_flag_value(v)}" for k, v in self.overrides.items()]

    def eval_command(self) -> list[str]:
        args = [sys.executable, "-m", "transformer.cli.evaluate", f"--workdir={self.workdir}",
                f"--split={self.eval_split}"]  # fmt: skip
        if self.eval_longer_than is not None:
            args.append(f"--longer_than={self.eval_longer_than}")
        return args + [f"--config.{k}={_flag_value(v)}" for k, v in self.eval_overrides.items()]

    @property
    def eval_json(self) -> str:
        return os.path.join(self.workdir, "eval", f"{self.eval_split}.json")


def _find_base(base: str, sweep_path: str) -> str:
    """A relative base path is looked up in the working directory, then beside the sweep
    config and in each directory above it (configs/sweeps/x.py names 'configs/default.py')."""
    if os.path.isabs(base) or os.path.exists(base):
        return base
    directory = os.path.dirname(os.path.abspath(sweep_path))
    while True:
        candidate = os.path.join(directory, base)
        if os.path.exists(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return base  # not found: load_base_config names it
        directory = parent


def _flag_value(value) -> str:
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
    if only:
        missing = [v for v in only if v not in sweep.variants]
        if missing:
            raise UserError(f"--only {missing}: no such variant; valid: {list(sweep.variants)}")
    base_path = sweep.base_file or sweep.base
    runs = []
    # Seed-major order: a sweep stopped half-way has every variant's first seed.
    for seed, (name, variant) in itertools.product(sweep.seeds, sweep.variants.items()):
        if only and name not in only:
            continue
        overrides = {**sweep.overrides, **variant, "train.seed": seed}
        decode = {k: v for k, v in variant.items() if k.startswith("decode.")}
        run = Run(
            variant=name,
            seed=seed,
            workdir=os.path.join(workdir, name, str(seed)),
            overrides=overrides,
            eval_overrides={**sweep.eval_overrides, **decode},
            base=base_path,
            eval_split=sweep.eval_split,
            eval_longer_than=sweep.eval_longer_than,
        )
        _resolve_run_config(run)
        runs.append(run)
    return runs


def _resolve_run_config(run: Run) -> None:
    """Builds the run's config in-process: catches bad values before any subprocess starts."""
    try:
        config = load_base_config(run.base)
        for key, value in run.overrides.items():
            section, _, field = key.partition(".")
            config[section][field] = value
        run_config.validate(config)
        for key in run.overrides:  # the values must survive the command line
            _flag_value(run.overrides[key])
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
    os.makedirs(run.workdir, exist_ok=True)
    status = read_status(run)
    status.update(fields, variant=run.variant, seed=run.seed, overrides=run.overrides,
                  updated=time.time())  # fmt: skip
    path = os.path.join(run.workdir, STATUS_FILE)
    atomic_write(path, json.dumps(status, indent=2, default=str))
    return status


def read_eval(run: Run) -> dict | None:
    try:
        with open(run.eval_json) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_finished(run: Run) -> bool:
    record = read_eval(run)
    return record is not None and run.num_steps is not None and record.get("step") == run.num_steps


def classify_failure(returncode: int, stderr_text: str) -> str:
    """'diverged' when the trainer reported a non-finite loss, else 'failed'."""
    if "non-finite loss" in stderr_text.lower():
        return "diverged"
    return "failed"


def _error_line(stderr_text: str) -> str:
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("error:") or "Error" in ln.split(":")[0]:
            return ln[:500]
    return lines[-1][:500] if lines else ""


def last_train_step(workdir: str) -> int | None:
    from transformer.training.logger import read_metrics

    try:
        rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    except UserError:
        return None
    steps = [r["step"] for r in rows if r.get("kind") == "train" and "step" in r]
    return steps[-1] if steps else None


# ------------------------------------------------------------------------------ execution


class _Job:
    """One run moving through train -> eval in subprocesses."""

    def __init__(self, run: Run, index: int, total: int, env: dict, out):
        self.run, self.index, self.total, self.env, self.out = run, index, total, env, out
        self.phase = None
        self.proc = None
        self.log = None
        self.stderr_path = None
        self.started = 0.0
        self.last_step = None
        self.last_print = 0.0

    def say(self, message: str) -> None:
        print(f"[{self.index}/{self.total}] {self.run.label}: {message}", file=self.out, flush=True)

    def start(self, phase: str) -> None:
        run = self.run
        os.makedirs(run.workdir, exist_ok=True)
        cmd = run.train_command() if phase == "train" else run.eval_command()
        self.phase = phase
        log_path = os.path.join(run.workdir, f"{phase}.log")
        self.stderr_path = os.path.join(run.workdir, f".{phase}.stderr")
        self.log = open(log_path, "a")
        self.log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        self.log.flush()
        self.stderr_file = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log,
                                     stderr=self.stderr_file)  # fmt: skip
        self.started = time.time()
        self.last_print = self.started
        if phase == "train":
            write_status(run, status="training", trained=False, num_steps=run.num_steps)
        else:
            write_status(run, status="evaluating")
        if phase == "train":
            step = last_train_step(run.workdir)
            resumed = f" (resuming after step {step})" if step else ""
            self.say(f"training{resumed} (log: {log_path})")
        else:
            self.say(f"evaluating on {run.eval_split}")

    def poll(self, poll_s: float) -> bool:
        """True when the current phase's subprocess has ended."""
        if self.proc.poll() is not None:
            return True
        now = time.time()
        if self.phase == "train" and now - self.last_print >= poll_s:
            self.last_print = now
            step = last_train_step(self.run.workdir)
            if step is not None and step != self.last_step:
                self.last_step = step
                self.say(f"training (step {step}/{self.run.num_steps})")
        return False

    def finish_phase(self) -> str:
        """Closes the phase; returns 'ok', 'failed' or 'diverged' and updates status.json."""
        rc = self.proc.returncode
        elapsed = time.time() - self.started
        self.stderr_file.close()
        with open(self.stderr_path) as f:
            stderr_text = f.read()
        self.log.write(stderr_text)
        self.log.write(f"=== exit status {rc} after {elapsed:.1f} s\n")
        self.log.close()
        os.remove(self.stderr_path)
        run = self.run
        status = read_status(run)
        key = f"{self.phase}_wall_s"
        write_status(run, **{key: status.get(key, 0.0) + elapsed})
        if rc == 0:
            return "ok"
        outcome = classify_failure(rc, stderr_text)
        error = _error_line(stderr_text)
        write_status(run, status=outcome, phase=self.phase, returncode=rc, error=error)
        self.say(f"{outcome.upper()} in {self.phase} (exit {rc}): {error}")
        return outcome

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # train.py checkpoints on SIGTERM and exits
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _visible_gpus() -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, ln in enumerate(out.stdout.splitlines()) if ln.startswith("GPU")]


def _slot_envs(parallel: int) -> list[dict]:
    """Environment per parallel slot: one GPU each when there are enough, else shared."""
    base = dict(os.environ)
    base.setdefault("PYTHONUNBUFFERED", "1")
    if parallel == 1:
        return [base]
    gpus = _visible_gpus()
    envs = []
    for i in range(parallel):
        env = dict(base)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
            sharing = -(-parallel // len(gpus))
            if sharing > 1:  # several processes on one GPU: split its memory
                env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / sharing:.2f}"
        envs.append(env)
    return envs


def execute(runs: list[Run], *, parallel: int = 1, retry_failed: bool = False,
            poll_s: float = DEFAULT_POLL_S, out=None) -> dict[str, int]:  # fmt: skip
    """Runs what is not finished; returns counts of done / skipped / failed / diverged."""
    out = out or sys.stdout
    total = len(runs)
    counts = {"done": 0, "skipped": 0, "failed": 0, "diverged": 0}
    pending = []
    for i, run in enumerate(runs, 1):
        tag = f"[{i}/{total}] {run.label}"
        if run.config_error:
            write_status(run, status="failed", phase="config", error=run.config_error)
            print(f"{tag}: FAILED (invalid config): {run.config_error}", file=out, flush=True)
            counts["failed"] += 1
        elif is_finished(run):
            write_status(run, status="done", bleu=read_eval(run).get("bleu"))
            print(f"{tag}: skipped (finished)", file=out, flush=True)
            counts["skipped"] += 1
        elif (
            read_status(run).get("status") in ("failed", "diverged")
            and not retry_failed
            and (read_status(run).get("overrides") == run.overrides)
        ):
            status = read_status(run)["status"]
            print(f"{tag}: skipped ({status} before; --retry_failed reruns it)", file=out,
                  flush=True)  # fmt: skip
            counts[status] += 1
        else:
            pending.append((i, run))
    envs = _slot_envs(parallel)
    free = list(range(parallel))
    active: list[tuple[_Job, int]] = []
    try:
        while pending or active:
            while pending and free:
                i, run = pending.pop(0)
                slot = free.pop(0)
                job = _Job(run, i, total, envs[slot], out)
                status = read_status(run)
                if status.get("trained") and status.get("overrides") == run.overrides:
                    job.start("eval")
                else:
                    job.start("train")
                active.append((job, slot))
            time.sleep(min(0.5, poll_s))
            for job, slot in list(active):
                if not job.poll(poll_s):
                    continue
                outcome = job.finish_phase()
                if outcome == "ok" and job.phase == "train":
                    write_status(job.run, status="trained", trained=True)
                    job.start("eval")
                    continue
                if outcome == "ok":
                    record = read_eval(job.run) or {}
                    write_status(job.run, status="done", bleu=record.get("bleu"),
                                 chrf=record.get("chrf"), error=None)  # fmt: skip
                    bleu = record.get("bleu", float("nan"))
                    job.say(f"done: {job.run.eval_split} BLEU {bleu:.2f}")
                    counts["done"] += 1
                else:
                    counts[outcome] += 1
                active.remove((job, slot))
                free.append(slot)
    except KeyboardInterrupt:
        for job, _ in active:
            job.kill()
        print("interrupted: rerun the same command to resume", file=out, flush=True)
        raise
    return counts


# -------------------------------------------------------------------------------- report


def _run_summary(run: Run) -> dict:
    from transformer.training.logger import read_metrics

    status = read_status(run)
    record = read_eval(run) if is_finished(run) else None
    try:
        rows = read_metrics(os.path.join(run.workdir, "metrics.jsonl"))
    except UserError:
        rows = []
    evals = [r for r in rows if r.get("kind") == "eval" and r.get("split", "valid") == "valid"]
    curve = [(r["step"], r["loss"]) for r in evals if "loss" in r]
    params = next((r["params"] for r in rows if r.get("kind") == "info" and "params" in r), None)
    tps = [r["tokens_per_s"] for r in rows if r.get("kind") == "train" and "tokens_per_s" in r]
    wall = status.get("train_wall_s")
    if wall is None and record is not None:
        wall = record.get("train_time_s")
    state = "done" if record is not None else status.get("status", "not run")
    return {
        "variant": run.variant,
        "seed": run.seed,
        "status": state,
        "bleu": record.get("bleu") if record else None,
        "chrf": record.get("chrf") if record else None,
        "longer_bleu": (record.get("longer") or {}).get("bleu") if record else None,
        "longer_sentences": (record.get("longer") or {}).get("sentences") if record else None,
        "best_valid_loss": min((loss for _, loss in curve if math.isfinite(loss)), default=None),
        "params": params,
        "tokens_per_s": statistics.median(tps) if tps else None,
        "wall_s": wall,
        "error": status.get("error") if state in ("failed", "diverged") else None,
        "curve": curve,
    }


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _std(values):
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) >= 2 else None


def aggregate(sweep: Sweep, runs: list[Run]) -> tuple[list[dict], list[dict]]:
    per_run = [_run_summary(r) for r in runs]
    table = []
    for name in sweep.variants:
        rs = [r for r in per_run if r["variant"] == name]
        if not rs:
            continue
        done = [r for r in rs if r["status"] == "done"]
        table.append({
            "variant": name,
            "overrides": " ".join(f"{k}={_short(v)}" for k, v in sweep.variants[name].items()),
            "runs": len(rs),
            "done": len(done),
            "bleu_mean": _mean(r["bleu"] for r in done),
            "bleu_std": _std(r["bleu"] for r in done),
            "chrf_mean": _mean(r["chrf"] for r in done),
            "longer_bleu_mean": _mean(r["longer_bleu"] for r in done),
            "longer_bleu_std": _std(r["longer_bleu"] for r in done),
            "longer_sentences": next((r["longer_sentences"] for r in done), None),
            "best_valid_loss": _mean(r["best_valid_loss"] for r in done),
            "params": next((r["params"] for r in rs if r["params"] is not None), None),
            "tokens_per_s": _mean(r["tokens_per_s"] for r in done),
            "wall_s": _mean(r["wall_s"] for r in done),
            "diverged": sum(r["status"] == "diverged" for r in rs),
            "failed": sum(r["status"] == "failed" for r in rs),
        })  # fmt: skip
    return table, per_run


def _fmt(value, spec: str = "{:.2f}") -> str:
    if value is None:
        return ""
    return spec.format(value)


def write_report(sweep: Sweep, runs: list[Run], workdir: str) -> list[dict]:
    table, per_run = aggregate(sweep, runs)
    os.makedirs(workdir, exist_ok=True)
    columns = ["variant", "overrides", "runs", "done", "bleu_mean", "bleu_std", "chrf_mean",
               "longer_bleu_mean", "longer_bleu_std", "longer_sentences", "best_valid_loss",
               "params", "tokens_per_s", "wall_s", "diverged", "failed"]  # fmt: skip
    with open(os.path.join(workdir, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in table:
            writer.writerow({k: "" if row[k] is None else row[k] for k in columns})
    run_columns = ["variant", "seed", "status", "bleu", "chrf", "longer_bleu", "best_valid_loss",
                   "params", "tokens_per_s", "wall_s", "error"]  # fmt: skip
    with open(os.path.join(workdir, "runs.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, run_columns)
        writer.writeheader()
        for row in per_run:
            writer.writerow({k: "" if row[k] is None else row[k] for k in run_columns})
    _write_markdown(sweep, table, per_run, workdir)
    _plot(sweep, table, per_run, workdir)
    return table


def _mean_std(mean, std) -> str:
    text = _fmt(mean)
    if std is not None:
        text += f" ± {std:.2f}"
    return text


def _write_markdown(sweep: Sweep, table, per_run, workdir: str) -> None:
    n_seeds = len(sweep.seeds)
    lines = [
        f"# Sweep results: {os.path.basename(sweep.path)}",
        "",
        f"Base config `{sweep.base}`, {len(sweep.variants)} variant(s) x {n_seeds} seed(s) "
        f"{sweep.seeds}; {sweep.eval_split} BLEU/chrF from eval.py"
        + (
            " with " + ", ".join(f"`{k}={_short(v)}`" for k, v in sweep.eval_overrides.items())
            if sweep.eval_overrides
            else ""
        )
        + ".",
    ]
    if sweep.overrides:
        shown = ", ".join(f"`{k}={_short(v)}`" for k, v in sweep.overrides.items())
        lines += ["", f"Every run: {shown}."]
    longer = sweep.eval_longer_than is not None
    longer_head = ""
    if longer:
        over = sweep.eval_longer_than
        over = "data.max_source_len" if over == "train" else over
        n = next((r["longer_sentences"] for r in table if r["longer_sentences"] is not None), None)
        longer_head = f" BLEU, source > {over} tokens" + (f" ({n} sent.)" if n else "") + " |"
    lines += [
        "",
        "| variant | overrides | BLEU (mean ± std) | chrF |" + longer_head + " best valid loss | "
        "params | train tok/s | wall s/run | done | diverged | failed |",
        "|---|---|---|---|" + ("---|" if longer else "") + "---|---|---|---|---|---|---|",
    ]
    for row in table:
        bleu = _mean_std(row["bleu_mean"], row["bleu_std"])
        longer_cell = ""
        if longer:
            longer_cell = f" {_mean_std(row['longer_bleu_mean'], row['longer_bleu_std'])} |"
        lines.append(
            f"| {row['variant']} | {row['overrides'] or '(base)'} | {bleu} | "
            f"{_fmt(row['chrf_mean'])} |{longer_cell} {_fmt(row['best_valid_loss'], '{:.3f}')} | "
            f"{_fmt(row['params'], '{:,}')} | {_fmt(row['tokens_per_s'], '{:,.0f}')} | "
            f"{_fmt(row['wall_s'], '{:.0f}')} | {row['done']}/{row['runs']} | "
            f"{row['diverged']} | {row['failed']} |"
        )
    problems = [r for r in per_run if r["status"] in ("failed", "diverged")]
    if problems:
        lines += ["", "Failed or diverged runs:", ""]
        for r in problems:
            lines.append(f"- {r['variant']} seed {r['seed']}: {r['status']}: {r['error'] or ''}")
    unfinished = [r for r in per_run if r["status"] not in ("done", "failed", "diverged")]
    if unfinished:
        lines += ["", f"Not finished: {len(unfinished)} run(s) (rerun the sweep to resume)."]
    lines += [
        "",
        "BLEU std is the sample standard deviation over seeds; best valid loss is the lowest "
        "validation loss (NLL) of each run, averaged over seeds; train tok/s is the median of "
        "the logged training rows (source + target tokens), averaged over seeds.",
        "",
        "Plots: `valid_loss.png` (validation loss, mean over seeds), `bleu.png` "
        "(BLEU, error bars = std over seeds). Per-run rows: `runs.csv`.",
        "",
    ]
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write("\n".join(lines))


def readme_block(workdir: str, command: str) -> str:
    """DIR/results.md for a README section: its title demoted to bold, the command first."""
    with open(os.path.join(workdir, "results.md")) as f:
        lines = f.read().splitlines()
    if lines and lines[0].startswith("# "):
        lines[0] = f"**{lines[0][2:]}** (rendered by `{command}`)"
    return "\n".join(lines) + "\n"


def _plot(sweep: Sweep, table, per_run, workdir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    for name in sweep.variants:
        curves = [dict(r["curve"]) for r in per_run if r["variant"] == name and r["curve"]]
        if not curves:
            continue
        steps = sorted(set().union(*curves))
        mean = [np.nanmean([c.get(s, np.nan) for c in curves]) for s in steps]
        ax.plot(steps, mean, marker="o", markersize=3, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (NLL)")
    ax.set_title("Validation loss (mean over seeds)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "valid_loss.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(table) + 2), 5))
    names = [row["variant"] for row in table]
    means = [row["bleu_mean"] if row["bleu_mean"] is not None else np.nan for row in table]
    stds = [row["bleu_std"] or 0.0 for row in table]
    x = np.arange(len(names))
    ax.bar(x, means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{sweep.eval_split} BLEU")
    ax.set_title(f"BLEU per variant ({len(sweep.seeds)} seed(s), error bars = std)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "bleu.png"), dpi=100)
    plt.close(fig)

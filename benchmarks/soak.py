"""A soak of kill -9: a training run killed with SIGKILL at N random moments and resumed
after each must end bit for bit where an uninterrupted run of the same command ends.

The run is `python train.py --config configs/default.py` shrunk to a 1+1-layer model
(SOAK_RUN, dropout on), checkpointing every CHECKPOINT_EVERY steps and validating every
EVAL_EVERY. An uninterrupted reference run starts beside the first soaked process. The
moments are planned from --seed alone: each kill aims at one of three kinds of moment,
in a seeded order that holds each kind about equally often, at a step drawn past the
checkpoint after the resumed one (so the run moves on) and a delay drawn after the
awaited event:

  save   the temporary directory of an Orbax save appears (the asynchronous save is running)
  eval   the train row of a validation step is written and its eval row is not yet
  train  a train row past the drawn step, with no save running and no validation

Where each kill landed is read from the killed run's files, not from the plan: the last step
it logged, a save's temporary directory it created and left behind (its step, and whether
training had logged steps past it: the save was asynchronous), and a validation step whose
train row it wrote without the eval row. The phase is `startup` when it logged no step
(imports, restore, compilation). After the last kill the run resumes to the end; then the
final checkpoints' parameters, optimizer state and data-iterator state, and every train and
eval row of metrics.jsonl (each step once; wall-clock fields aside), are compared with the
reference's, bit for bit.

The verdict is trusted because it catches planted bugs: --plant_bug optimizer zeroes Adam's
first moment of one array in the checkpoint the first resume reads (and writes its manifest
again, so the resume cannot tell); --plant_bug learning_rate makes that resume train at a
learning rate 2**-20 larger. Both must end NOT identical, exit 1.

Command:   python -m benchmarks.soak [--kills 20] [--seed 0] [--out FILE] [--dir DIR]
Planted:   python -m benchmarks.soak --kills 1 --plant_bug optimizer   (exits 1)
Table:     python -m benchmarks.soak --render FILE [--doc docs/reliability.md]
Writes:    one JSON line per kill and a verdict line to --out (default
           benchmarks/results/extra/<machine>_soak.jsonl, <machine> as common.machine_tag;
           with a planted bug <machine>_soak_planted_<bug>.jsonl), and a line per kill to
           stdout. Exit 0: identical; 1: not identical; 2: a process failed (one line).
Expected:  identical, exit 0. The runs are kept under --dir when they differ or fail.
Run time:  about half a minute a kill on 2 CPU cores shared with other work (each resumed
           process imports and compiles anew): --kills 20 in about ten minutes there
           (docs/reliability.md gives the recorded run's time and load).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
from orbax.checkpoint.path import atomicity_types

from benchmarks.common import machine_tag
from transformer.common.errors import UserError, exit_on_user_error
from transformer.common.metrics_file import METRICS_FILE, read_metrics

IMPL = "jax-transformer"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results", "extra")

CHECKPOINT_EVERY = 20  # a tiny save takes ~0.5 s, ~10 steps: saves do not queue up
EVAL_EVERY = 30  # not a multiple of CHECKPOINT_EVERY: most validations run between saves
# configs/default.py shrunk to seconds (as `--config.<key>=<value>` overrides). Dropout is on,
# so every resumed step must also draw the dropout masks the uninterrupted run drew.
SOAK_RUN = {
    "model.d_model": 32,
    "model.num_heads": 4,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "model.max_len": 64,
    "model.dropout_rate": 0.1,
    "data.vocab_size": 200,
    "data.synthetic_train_size": 1500,
    "data.synthetic_eval_size": 40,
    "data.max_source_len": 32,
    "data.max_target_len": 32,
    "train.batch_size": 16,
    "train.warmup_steps": 10,
    "train.schedule": "rsqrt",
    "train.learning_rate": 0.003,
    "train.log_every": 1,  # a train row per step: every step is compared, and seen
    "train.checkpoint_every": CHECKPOINT_EVERY,
    "train.eval_every": EVAL_EVERY,
    "train.eval_bleu_sentences": 8,
    "decode.batch_size": 8,
    "decode.max_len_b": 5,
}

KINDS = ("save", "eval", "train")  # the moments a kill aims at (module docstring)
# Longest wait after the awaited event, per kind: under the ~0.5 s a tiny save runs, and the
# ~0.15 s a warm validation runs (the first in each process compiles for seconds).
MAX_DELAY_S = {"save": 0.25, "eval": 0.1, "train": 0.2}
# Where a kill landed, in the order the table shows them.
PHASES = ("train", "save", "eval", "eval+save", "startup")
WALL_CLOCK_FIELDS = frozenset({"time", "tokens_per_s", "sentences_per_s"})  # differ run to run
TMP_SUFFIX = atomicity_types.TMP_DIR_SUFFIX  # Orbax saves step N into N<suffix>, renamed to N
RESUMED = "resumed from checkpoint at step"  # the info row of a resumed process (loop.py)
POLL_S = 0.003  # how often the run's files are looked at while waiting for a moment
PROCESS_TIMEOUT_S = 900  # one train.py process on a loaded 2-core machine, generously
PLANTED_BUGS = ("optimizer", "learning_rate")
LR_NUDGE = 1 + 2**-20  # --plant_bug learning_rate: about 8 float32 ulps
PLANT_LEAF = "mu"  # --plant_bug optimizer: Adam's first moment of the first array is zeroed
SHOWN_MISMATCHES = 5  # differences printed (the results file lists them all)


def num_steps(kills: int) -> int:
    """Room for `kills` kills, each aimed at most two checkpoints past its resumed step, and
    an uninterrupted end."""
    return CHECKPOINT_EVERY * (2 * kills + 3)


def run_flags(steps: int) -> list[str]:
    overrides = {**SOAK_RUN, "train.num_steps": steps}
    return [f"--config.{key}={value}" for key, value in overrides.items()]


def validated(step: int, steps: int) -> bool:
    """Whether train.py validates after `step` (as training/loop.py decides)."""
    return step % EVAL_EVERY == 0 or step == steps


# ----------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class Aim:
    """One planned kill: the kind of moment, where in the window past the resumed step it
    aims (a fraction in [0, 1)), and the delay after the awaited event."""

    kind: str
    fraction: float
    delay_s: float


def plan(seed: int, kills: int) -> list[Aim]:
    """The kills' aims, from the seed alone: the kinds in turn, shuffled, so each kind comes
    about kills/3 times (every kind once when kills == 3)."""
    rng = np.random.default_rng(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(kills)]
    rng.shuffle(kinds)
    return [Aim(k, float(rng.random()), float(rng.random() * MAX_DELAY_S[k])) for k in kinds]


def target_step(aim: Aim, resumed: int, steps: int) -> int:
    """The step an aim waits for: past the checkpoint after `resumed`, at most two checkpoints
    past it, and a checkpoint short of the end (so the run cannot finish first)."""
    target = resumed + CHECKPOINT_EVERY + 1 + int(aim.fraction * CHECKPOINT_EVERY)
    return max(resumed + 1, min(target, steps - CHECKPOINT_EVERY))


# ------------------------------------------------------------------------ the run's files


class RunFiles:
    """What one train.py process has written so far into its workdir: its metrics rows and
    the Orbax saves it started, told from those of earlier processes by their time."""

    def __init__(self, workdir: str, since: float):
        self.metrics = os.path.join(workdir, METRICS_FILE)
        self.checkpoints = os.path.join(workdir, "checkpoints")
        self.since = since
        self.rows: list[dict] = []  # its train and eval rows
        self.resumed_from: int | None = None  # the checkpoint it said it resumed from
        self._file, self._offset = None, 0  # (inode, size) read so far

    def refresh(self) -> list[dict]:
        """Reads the rows appended since the last call (the whole file again when it was
        rewritten: a resumed process drops the rows after its step)."""
        try:
            stat = os.stat(self.metrics)
        except FileNotFoundError:
            return self.rows
        if stat.st_ino != self._file or stat.st_size < self._offset:
            self._file, self._offset, self.rows = stat.st_ino, 0, []
            self.resumed_from = None
        with open(self.metrics, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]  # a partial last line waits for its end
        self._offset += len(whole)
        for line in whole.splitlines():
            row = json.loads(line)
            if row["time"] >= self.since:
                self._take(row)
        return self.rows

    def _take(self, row: dict) -> None:
        if row["kind"] in ("train", "eval"):
            self.rows.append(row)
        elif row["message"].startswith(RESUMED):
            self.resumed_from = row["step"]

    def last_train_step(self) -> int | None:
        steps = [r["step"] for r in self.rows if r["kind"] == "train"]
        return steps[-1] if steps else None

    def evaluating(self, steps: int) -> int | None:
        """The step being validated: its train row is the last row and a validation follows."""
        last = self.rows[-1] if self.rows else None
        if last and last["kind"] == "train" and validated(last["step"], steps):
            return last["step"]
        return None

    def saving(self) -> int | None:
        """The step of an Orbax save this process started and has not committed: a temporary
        directory made since it started. (One a killed process left behind is older; a new
        save of the same step, after the resumed process removed it, may even reuse its
        inode, so only the time tells them apart.)"""
        try:
            names = os.listdir(self.checkpoints)
        except FileNotFoundError:
            return None
        steps = [int(n.split(".")[0]) for n in names if TMP_SUFFIX in n and self._new(n)]
        return max(steps) if steps else None

    def _new(self, name: str) -> bool:
        try:
            return os.stat(os.path.join(self.checkpoints, name)).st_ctime >= self.since
        except FileNotFoundError:  # committed or removed meanwhile
            return False


def complete_checkpoints(workdir: str) -> list[int]:
    """Steps of the committed checkpoints (Orbax renames a save to its bare step number)."""
    try:
        names = os.listdir(os.path.join(workdir, "checkpoints"))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


# ---------------------------------------------------------------------------- processes


class TrainProcess:
    """One `python train.py` process in a session of its own; output goes to log files."""

    def __init__(self, workdir: str, steps: int, log_dir: str, name: str, extra=()):
        self.workdir = workdir
        self.log = os.path.join(log_dir, f"{name}.log")
        cmd = [sys.executable, "train.py", "--config", "configs/default.py", "--workdir", workdir]
        cmd += run_flags(steps) + list(extra)
        self.started = time.time()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self) -> None:
        """SIGKILL to the process and anything it started (its own session)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise UserError(f"train.py ran past {PROCESS_TIMEOUT_S} s; see {self.log}") from None

    def failure(self, when: str) -> UserError:
        """The one-line error for a process that exited before `when`."""
        with open(self.log, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        last = lines[-1] if lines else "no output"
        return UserError(
            f"train.py exited with status {self.proc.returncode} {when} ({last}); "
            f"its log is {self.log}"
        )


def await_moment(aim: Aim, target: int, proc: TrainProcess, files: RunFiles, steps: int):
    """Returns once the moment `aim` waits for is seen at or past `target`."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while time.monotonic() < deadline:
        files.refresh()
        if _seen(aim.kind, target, files, steps):
            return
        if proc.proc.poll() is not None:
            raise proc.failure(f"before the {aim.kind} moment at step {target} came")
        time.sleep(POLL_S)
    raise UserError(f"no {aim.kind} moment at step {target} within {PROCESS_TIMEOUT_S} s")


def _seen(kind: str, target: int, files: RunFiles, steps: int) -> bool:
    saving, evaluating = files.saving(), files.evaluating(steps)
    if kind == "save":
        return saving is not None and saving >= target
    if kind == "eval":
        return evaluating is not None and evaluating >= target
    last = files.last_train_step()
    return last is not None and last >= target and saving is None and evaluating is None


# -------------------------------------------------------------------------- the landing


@dataclasses.dataclass(frozen=True)
class Landing:
    """Where a kill landed, as the killed process's files show it."""

    phase: str  # one of PHASES
    step: int | None  # the last step it logged (None: it logged none)
    saving_step: int | None  # the step of its save left unfinished
    evaluating_step: int | None  # the step whose validation it did not finish
    newest_checkpoint: int | None  # the newest committed checkpoint after the kill


def landing(files: RunFiles, steps: int) -> Landing:
    files.refresh()
    step, saving, evaluating = files.last_train_step(), files.saving(), files.evaluating(steps)
    newest = (complete_checkpoints(os.path.dirname(files.checkpoints)) or [None])[-1]
    return Landing(phase(step, saving, evaluating), step, saving, evaluating, newest)


def phase(step: int | None, saving: int | None, evaluating: int | None) -> str:
    if step is None:
        return "startup"
    if evaluating is not None:
        return "eval+save" if saving is not None else "eval"
    return "save" if saving is not None else "train"


# ------------------------------------------------------------------------------ the soak


@dataclasses.dataclass
class Soak:
    kills: int
    seed: int
    plant_bug: str | None
    base: str  # where the two workdirs and the logs go
    planted: int = 0  # the checkpoint step the planted bug went in at (0: not yet)
    final_resume: int | None = None  # where the process after the last kill resumed

    @property
    def steps(self) -> int:
        return num_steps(self.kills)

    @property
    def run(self) -> str:
        return os.path.join(self.base, "run")

    @property
    def reference(self) -> str:
        return os.path.join(self.base, "reference")


def soak(s: Soak) -> list[dict]:
    """Runs the reference and the killed run; returns a record per kill."""
    reference = TrainProcess(s.reference, s.steps, s.base, "reference")
    try:
        records = _killed_run(s)
        if reference.finish() != 0:
            raise reference.failure("running uninterrupted")
    finally:
        reference.kill()  # a no-op once it finished
    return records


def _killed_run(s: Soak) -> list[dict]:
    """The run killed at each planned moment and resumed, then resumed to the end."""
    records, resumed = [], 0
    for i, aim in enumerate(plan(s.seed, s.kills)):
        proc = _start(s, i, resumed)
        files = RunFiles(s.run, proc.started)
        try:
            target = target_step(aim, resumed, s.steps)
            await_moment(aim, target, proc, files, s.steps)
            time.sleep(aim.delay_s)
        finally:
            proc.kill()
        landed = landing(files, s.steps)
        records.append(_kill_record(i, aim, target, landed, files.resumed_from))
        print(_kill_line(records[-1]), flush=True)
        resumed = landed.newest_checkpoint or 0
    last = _start(s, s.kills, resumed)
    files = RunFiles(s.run, last.started)
    try:
        if last.finish() != 0:
            raise last.failure("resuming after the last kill")
    finally:
        last.kill()  # a no-op once it finished
    files.refresh()
    s.final_resume = files.resumed_from
    return records


def _start(s: Soak, i: int, resumed: int) -> TrainProcess:
    """The run's process number i (0: the first; i > 0 resumes after kill i). The planted
    bug goes into the first process that resumes from a checkpoint."""
    extra = []
    if s.plant_bug and not s.planted and resumed > 0:
        s.planted = resumed
        if s.plant_bug == "optimizer":
            plant_optimizer_bug(s.run, resumed)
        else:
            lr = SOAK_RUN["train.learning_rate"] * LR_NUDGE
            extra = [f"--config.train.learning_rate={lr!r}"]
    return TrainProcess(s.run, s.steps, s.base, f"run{i}", extra)


def _kill_record(i: int, aim: Aim, target: int, landed: Landing, started: int | None) -> dict:
    return {
        "figure": "soak_kill",
        "value": landed.step,
        "unit": "step",
        "impl": IMPL,
        "kill": i + 1,
        "aimed_at": aim.kind,
        "target_step": target,
        "delay_s": round(aim.delay_s, 4),
        "started_from": 0 if i == 0 else started,  # None: killed before it said
        **dataclasses.asdict(landed),
    }


def _kill_line(r: dict) -> str:
    where = [f"step {r['step']}"] if r["step"] is not None else ["before any step"]
    if r["saving_step"] is not None:
        where.append(f"save of step {r['saving_step']} running")
    if r["evaluating_step"] is not None:
        where.append(f"validation of step {r['evaluating_step']} running")
    return (
        f"kill {r['kill']}: aimed at {r['aimed_at']} from step {r['target_step']}, landed in "
        f"{r['phase']} ({', '.join(where)}); newest checkpoint {r['newest_checkpoint']}"
    )


# ----------------------------------------------------------------------- the comparison


def compare(s: Soak) -> list[str]:
    """What differs between the soaked run and the reference ([] = identical): the names of
    the final checkpoint's arrays that differ, then the data-iterator state, then a phrase
    per kind of metrics row."""
    return compare_checkpoints(s.reference, s.run, s.steps) + compare_rows(
        s.reference, s.run, s.steps
    )


def compare_rows(reference: str, run: str, steps: int) -> list[str]:
    """Train rows for steps 1..steps and eval rows for every validated step, each once and
    equal to the reference's but for WALL_CLOCK_FIELDS."""
    evals = [n for n in range(1, steps + 1) if validated(n, steps)]
    problems = []
    for kind, expected in (("train", list(range(1, steps + 1))), ("eval", evals)):
        ours, theirs = read_metrics(run, kind=kind), read_metrics(reference, kind=kind)
        for name, rows in (("run", ours), ("reference", theirs)):
            if [r["step"] for r in rows] != expected:
                problems.append(f"the {name}'s {kind} rows are not one per step {expected}")
        problems += _differing_rows(kind, ours, theirs)
    return problems


def _differing_rows(kind: str, ours: list[dict], theirs: list[dict]) -> list[str]:
    """['train rows of 75 steps from step 22 (grad_norm, loss)'] for rows of the same step
    whose values differ."""
    by_step = {r["step"]: r for r in theirs}
    differing = {}  # step -> the fields that differ
    for row in ours:
        fields = _differing_fields(row, by_step.get(row["step"], {}))
        if fields:
            differing[row["step"]] = fields
    if not differing:
        return []
    fields = ", ".join(sorted(set().union(*differing.values())))
    return [f"{kind} rows of {len(differing)} steps from step {min(differing)} ({fields})"]


def _differing_fields(a: dict, b: dict) -> list[str]:
    keys = sorted((a.keys() | b.keys()) - WALL_CLOCK_FIELDS)
    return [k for k in keys if repr(a.get(k)) != repr(b.get(k))]  # repr: NaN equals NaN


def compare_checkpoints(reference: str, run: str, step: int) -> list[str]:
    """The final checkpoints' arrays (parameters, optimizer state, step) compared bitwise and
    their data-iterator states: the names of those that differ."""
    ours, ours_data = restore_state(run, step)
    theirs, theirs_data = restore_state(reference, step)
    problems = differing_arrays(ours, theirs)
    if ours_data != theirs_data:
        problems.append("data-iterator state")
    return problems


def differing_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Names of the arrays whose dtype, shape or bytes differ, or that only one side has."""
    names = sorted(a.keys() | b.keys())
    return [n for n in names if n not in a or n not in b or not _same_bits(a[n], b[n])]


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def restore_state(workdir: str, step: int) -> tuple[dict[str, np.ndarray], dict]:
    """({array name: value} of the train state at `step`, the data-iterator state)."""
    import jax

    from transformer.training.checkpoint import Checkpointer

    checkpointer = Checkpointer(workdir, read_only=True)
    try:
        state, data, _ = checkpointer.restore(step, _abstract_state(workdir))
    finally:
        checkpointer.close()
    leaves = jax.tree_util.tree_leaves_with_path(state)
    return {_name(path): np.asarray(leaf) for path, leaf in leaves}, data


def _abstract_state(workdir: str) -> dict:
    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.run_state import abstract_train_state, state_dict

    config = run_config.load(workdir)
    model_cfg = run_config.validate(config).model
    return state_dict(abstract_train_state(model_cfg, make_optimizer(config.train)[0]))


def _name(path) -> str:
    """'opt_state.0.mu.encoder...kernel.value': a leaf's path, dotted."""
    import jax

    return jax.tree_util.keystr(path, simple=True, separator=".")


# ----------------------------------------------------------------------- planted bugs


def plant_optimizer_bug(workdir: str, step: int) -> None:
    """Zeroes Adam's first moment of the first array in checkpoint `step` and saves it again,
    manifest included, as a resume that lost part of the optimizer state would have it."""
    import jax
    import jax.numpy as jnp

    from transformer.training.checkpoint import MANIFEST_KEY, Checkpointer

    if step not in complete_checkpoints(workdir):
        raise UserError(f"--plant_bug optimizer: no checkpoint {step} in {workdir} to change")
    reader = Checkpointer(workdir, read_only=True)
    state, data, meta = reader.restore(step, _abstract_state(workdir))
    reader.close()
    paths = [p for p, _ in jax.tree_util.tree_leaves_with_path(state)]
    planted = next(p for p in paths if PLANT_LEAF in _name(p).split("."))
    state = jax.tree_util.tree_map_with_path(
        lambda p, x: jnp.zeros_like(x) if p == planted else x, state
    )
    shutil.rmtree(os.path.join(workdir, "checkpoints", str(step)))
    writer = Checkpointer(workdir)
    meta = {k: v for k, v in meta.items() if k != MANIFEST_KEY}
    writer.save(step, state, data, meta, None)
    writer.wait()
    writer.close()
    print(f"planted: {_name(planted)} zeroed in checkpoint {step}", flush=True)


# -------------------------------------------------------------------------- the results


def verdict_record(
    s: Soak, records: list[dict], problems: list[str], wall_s: float, load: float
) -> dict:
    """The verdict line; `load`: the 1-minute load average when the soak started."""
    from transformer.common.machine import describe_machine

    phases = collections.Counter(r["phase"] for r in records)
    return {
        "figure": "soak_identical",
        "value": not problems,
        "unit": "-",
        "impl": IMPL,
        "kills": s.kills,
        "seed": s.seed,
        "plant_bug": s.plant_bug,
        "num_steps": s.steps,
        "phases": {p: phases.get(p, 0) for p in PHASES},
        "resumed_from_newest": resumed_from_newest(records, s.final_resume),
        "set_aside": set_aside(s.run),
        "planted_at": s.planted or None,
        "mismatches": problems,
        "num_mismatches": len(problems),
        "command": command_line(s),
        "machine": describe_machine(os.environ["JAX_PLATFORMS"]),  # set by _soak
        "wall_s": round(wall_s, 1),
        "loadavg_1m_start": round(load, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }


def resumed_from_newest(records: list[dict], final_resume: int | None) -> bool:
    """Whether each process after a kill resumed from the newest checkpoint the kill left
    (a process killed before it logged where it resumed is not counted)."""
    left = [r["newest_checkpoint"] or 0 for r in records]
    started = [r["started_from"] for r in records[1:]] + [final_resume]
    return all(s is None or s == n for s, n in zip(started, left, strict=True))


def set_aside(workdir: str) -> list[str]:
    """Checkpoints train.py found unreadable and renamed (a kill must never damage one)."""
    directory = os.path.join(workdir, "checkpoints")
    return sorted(n for n in os.listdir(directory) if ".unreadable" in n)


def command_line(s: Soak) -> str:
    parts = ["python -m benchmarks.soak", f"--kills {s.kills}", f"--seed {s.seed}"]
    if s.plant_bug:
        parts.append(f"--plant_bug {s.plant_bug}")
    return " ".join(parts)


def default_out(plant_bug: str | None) -> str:
    suffix = f"_planted_{plant_bug}" if plant_bug else ""
    return os.path.join(RESULTS_DIR, f"{machine_tag()}_soak{suffix}.jsonl")


def write_records(path: str, records: list[dict]) -> None:
    from transformer.common.fileio import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, "".join(json.dumps(r) + "\n" for r in records))


def render(path: str) -> str:
    """The docs' table of a results file: its command and machine, where the kills landed
    (counted from the kill lines), the verdict."""
    records = _read_records(path)
    verdict = next((r for r in records if r["figure"] == "soak_identical"), None)
    if verdict is None:
        raise UserError(f"{path} holds no soak verdict; run python -m benchmarks.soak")
    kills = [r for r in records if r["figure"] == "soak_kill"]
    count = collections.Counter(r["phase"] for r in kills)
    behind = sum(1 for r in kills if r["phase"] == "save" and r["step"] > r["saving_step"])
    return (
        f"`{verdict['command']}` on {verdict['machine']}: {verdict['wall_s']:.0f} s, load "
        f"average {verdict['loadavg_1m_start']:g} at the start "
        f"(`{os.path.relpath(path, ROOT)}`)\n\n"
        "| kills | in training | in a save (of them, training past it) | in validation | in "
        "validation during a save | in startup | final state, rows and arrays |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {len(kills)} | {count['train']} | {count['save']} ({behind}) | {count['eval']} "
        f"| {count['eval+save']} | {count['startup']} | {_verdict_cell(verdict)} |\n\n"
        f"Where each kill landed, by the last step it logged: "
        f"{', '.join(_landed(r) for r in kills)}.\n"
    )


def _landed(r: dict) -> str:
    """'43 (save of 40)': a kill's last logged step and what was running."""
    running = []
    if r["evaluating_step"] is not None:
        running.append("validation")
    if r["saving_step"] is not None:
        running.append(f"save of {r['saving_step']}")
    if r["step"] is None:
        return "startup"
    return f"{r['step']} ({', '.join(running) or 'training'})"


def _verdict_cell(verdict: dict) -> str:
    if verdict["value"]:
        return f"identical ({verdict['num_steps']} steps)"
    shown = verdict["mismatches"][:SHOWN_MISMATCHES]
    more = ", ..." if verdict["num_mismatches"] > len(shown) else ""
    return f"differ: {verdict['num_mismatches']} ({', '.join(shown)}{more})"


def _read_records(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; run python -m benchmarks.soak first") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path} line {e.lineno} is not JSON; run the soak again") from None


# ------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs during the run")
    parser.add_argument("--seed", type=int, default=0, help="seeds the planned moments")
    parser.add_argument("--out", help="the JSON-lines result (default: see the docstring)")
    parser.add_argument("--dir", help="where the runs go (default: a temporary directory)")
    parser.add_argument("--plant_bug", choices=PLANTED_BUGS, help="a bug the soak must catch")
    parser.add_argument("--render", metavar="FILE", help="print the table of a results file")
    parser.add_argument("--doc", help="with --render: write it into this file's Soak section")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with exit_on_user_error():
        if args.render:
            return _render(args.render, args.doc)
        if args.kills < 1:
            raise UserError(f"--kills={args.kills}: give at least 1")
        return _soak(args)


def _render(path: str, doc: str | None) -> int:
    table = render(path)
    if not doc:
        sys.stdout.write(table)
        return 0
    from transformer.research.report import update_readme

    changed = update_readme(doc, "Soak", table)
    print(f"{doc}: section Soak {'updated' if changed else 'unchanged'}")
    return 0


def _soak(args) -> int:
    from transformer.cli.app import demote_routine_notices

    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the soak's own restores, and train.py's
    demote_routine_notices()  # Orbax's notes on each read-only restore of the comparison
    base = tempfile.mkdtemp(prefix="soak_", dir=args.dir)
    s = Soak(args.kills, args.seed, args.plant_bug, base)
    began, load = time.perf_counter(), os.getloadavg()[0]
    try:
        records = soak(s)
    except UserError as e:
        raise UserError(f"{e}; the runs are kept in {base}") from None
    problems = compare(s)
    records.append(verdict_record(s, records, problems, time.perf_counter() - began, load))
    out = args.out or default_out(args.plant_bug)
    write_records(out, records)
    if problems:
        shown = ", ".join(problems[:SHOWN_MISMATCHES])
        print(f"NOT identical: {len(problems)} differences ({shown}); runs kept in {base}; {out}")
        return 1
    print(f"identical: parameters, optimizer state, data position and metrics rows; {out}")
    shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())

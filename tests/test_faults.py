"""Fault injection on real `python train.py` processes: kill -9 (also mid-save), SIGTERM,
a non-finite loss, an unwritable workdir, a full disk and checkpoints damaged on disk (found
by train.py, eval.py, decode.py, averaging, ensembles, export and transformer-verify).

Every run uses `tests.helpers.tiny_config()` passed as `--config.*` overrides on
configs/default.py, so what is tested is the command line a user runs. Each process start
costs ~10-20 s of imports and XLA compilation on 2 cores; the tests start as few as they can.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests.helpers import ROOT, fast_subset, run, tiny_args
from tests.shared_runs import CHECKPOINTED_RUN
from tests.test_bad_inputs import copy_run
from tests.test_checkpoint_manifest import (
    change_recorded_checksum,
    flip_middle_byte,
    make_pre_manifest,
)
from tests.test_training_concepts import orbax_params
from transformer.common.metrics_file import read_metrics
from transformer.training.checkpoint import Checkpointer

# Short runs that log every step (for step-by-step loss comparison) and checkpoint often.
# The shared run's settings (a train row every step, evaluated at the end without BLEU),
# 50 steps unless a test says otherwise.
FAULT_RUN = {**CHECKPOINTED_RUN, "train__num_steps": 50}
TMP_SUFFIX = ".orbax-checkpoint-tmp"  # Orbax writes <step>.orbax-checkpoint-tmp*, then renames
START_TIMEOUT = 300  # seconds for one train.py process; generous for a loaded 2-core machine


class Train:
    """One `python train.py` process; stdout/stderr go to files (no pipe can fill up)."""

    def __init__(
        self, workdir, args, *, name="train", env=None, extra=(), log_dir=None, launcher=()
    ):
        """launcher: a command prefix the python command runs under (e.g. `unshare ...`)."""
        self.workdir = str(workdir)
        log_dir = log_dir or os.path.dirname(self.workdir)
        n = len([f for f in os.listdir(log_dir) if f.startswith(name)])
        self.stdout_path = os.path.join(log_dir, f"{name}{n}.stdout")
        self.stderr_path = os.path.join(log_dir, f"{name}{n}.stderr")
        full_env = dict(os.environ, **(env or {}))
        full_env.setdefault("JAX_PLATFORMS", "cpu")
        cmd = [
            *launcher,
            sys.executable,
            "train.py",
            "--config",
            "configs/default.py",
            "--workdir",
            self.workdir,
            *args,
            *extra,
        ]
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=out, stderr=err)
        self.started = time.monotonic()

    @property
    def stderr(self) -> str:
        with open(self.stderr_path) as f:
            return f.read()

    @property
    def stdout(self) -> str:
        with open(self.stdout_path) as f:
            return f.read()

    def wait_until(self, predicate, *, poll=0.02, timeout=START_TIMEOUT):
        """Polls predicate() while the process runs; returns its first truthy value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                value = predicate()
                if value:
                    return value
                raise AssertionError(
                    f"train.py exited ({self.proc.returncode}) before the awaited event:\n"
                    f"{self.stderr[-3000:]}"
                )
            time.sleep(poll)
        self.kill()
        raise AssertionError(f"timed out waiting for train.py:\n{self.stderr[-3000:]}")

    def kill(self, sig=signal.SIGKILL, wait=True):
        """Sends `sig`; its exit status once it has ended (with `wait`)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=START_TIMEOUT) if wait else None

    def finish(self, timeout=START_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"train.py did not finish:\n{self.stderr[-3000:]}") from None


def train_rows(workdir) -> list[dict]:
    return read_metrics(os.path.join(workdir, "metrics.jsonl"), kind="train")


def last_train_step(workdir) -> int:
    rows = train_rows(workdir)
    return rows[-1]["step"] if rows else 0


def saving_step(workdir, after: int) -> str | None:
    """The path of an unfinished Orbax save of a step > after, if one exists right now."""
    directory = os.path.join(workdir, "checkpoints")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    for name in names:
        if TMP_SUFFIX in name and name.split(".")[0].isdigit() and int(name.split(".")[0]) > after:
            return os.path.join(directory, name)
    return None


def complete_steps(workdir) -> list[int]:
    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        return checkpointer.all_steps()
    finally:
        checkpointer.close()


def resumed_from(workdir) -> list[int]:
    """Steps named by the 'resumed from checkpoint at step N' info rows, in order."""
    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"), kind="info")
    return [r["step"] for r in rows if r["message"].startswith("resumed from checkpoint")]


def restore(workdir, step: int) -> dict:
    """The checkpointed train state at `step` as numpy arrays, on this process's device."""
    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.run_state import abstract_train_state

    config = run_config.load(str(workdir))
    state = abstract_train_state(run_config.validate(config).model, make_optimizer(config.train)[0])
    # Shapes only, no sharding: Checkpointer.restore puts them on this process's device
    # (as eval.py does), whatever layout wrote the checkpoint.
    template = {"step": state.step, "params": state.params, "opt_state": state.opt_state}
    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        restored, _, _ = checkpointer.restore(step, template)
    finally:
        checkpointer.close()
    return jax.tree.map(np.asarray, restored)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_one_line_error(rc: int, stderr: str, pattern: str, *, background_logs=False) -> str:
    """Exit status 2 and one `error: ...` line matching pattern, as the last line of stderr.

    background_logs: Orbax's and TensorStore's writer threads log their own failures
    (absl ERROR lines with tracebacks, 'Event loop is closed') around the main thread's
    error line; then only tracebacks through this project's code are ruled out."""
    assert rc == 2, (rc, stderr[-3000:])
    if background_logs:
        assert not re.search(r'File ".*(train\.py|/transformer/)', stderr), stderr[-3000:]
    else:
        assert "Traceback" not in stderr, stderr[-3000:]
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    assert re.search(pattern, lines[0]), lines[0]
    if not background_logs:  # writer threads may still log while the process exits
        assert stderr.strip().splitlines()[-1] == lines[0], stderr[-3000:]
    return lines[0]


# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_kill9_midsave_and_sigterm_resume_like_an_uninterrupted_run(tmp_path):
    """One run is killed with SIGKILL while Orbax is writing a checkpoint, then stopped with
    SIGTERM; each restart resumes from the last complete checkpoint, and the finished run's
    per-step losses and final train state are bitwise those of an uninterrupted run (CPU XLA
    is deterministic; step, optimizer state, RNG and data-iterator position are restored)."""
    # A save takes ~1 s (Orbax's fixed costs) and a step ~0.07 s: checkpoint every 20 steps
    # so the save of step 20 is complete long before the one of step 40 starts.
    args = tiny_args(**{**FAULT_RUN, "train__num_steps": 60, "train__checkpoint_every": 20})
    reference = Train(tmp_path / "reference", args, name="reference")  # runs alongside
    run = str(tmp_path / "run")
    checkpoints = os.path.join(run, "checkpoints")
    resumes = []

    # 1. SIGKILL while the checkpoint of step 40 is being written (its temporary directory
    #    exists), with the one of step 20 complete: a kill between complete checkpoints and
    #    in the middle of a save at once.
    first = Train(run, args)
    partial = first.wait_until(lambda: saving_step(run, after=20), poll=0.002)
    first.kill()
    assert os.path.exists(partial), "the save finished before the kill landed"
    partial_step = int(os.path.basename(partial).split(".")[0])
    steps = complete_steps(run)
    assert partial_step == 40 and steps == [20], (partial, steps)  # the partial save is unlisted

    # 2. SIGTERM: a checkpoint at the current step, exit status 0.
    resumes.append(max(steps))
    second = Train(run, args)
    second.wait_until(lambda: last_train_step(run) >= partial_step + 3)
    # Frozen while the signal arrives, so it stops at the next step however loaded the machine.
    second.kill(signal.SIGSTOP, wait=False)
    second.kill(signal.SIGTERM, wait=False)
    assert second.kill(signal.SIGCONT) == 0, second.stderr[-3000:]
    stopped = re.search(r"stopped by signal at step (\d+)", second.stderr)
    assert stopped, second.stderr[-3000:]
    stopped_at = int(stopped.group(1))
    assert partial_step + 3 <= stopped_at < 60
    assert complete_steps(run)[-1] == stopped_at
    assert last_train_step(run) == stopped_at
    assert resumed_from(run) == resumes  # metrics rows after each resumed step were dropped

    # 3. The rerun resumes at the SIGTERM checkpoint and finishes.
    resumes.append(stopped_at)
    third = Train(run, args)
    assert third.finish() == 0, third.stderr[-3000:]
    assert reference.finish() == 0, reference.stderr[-3000:]
    assert resumed_from(run) == resumes

    ref_rows, run_rows = train_rows(reference.workdir), train_rows(run)
    assert [r["step"] for r in run_rows] == list(range(1, 61))  # no step twice, none missing
    assert [r["loss"] for r in run_rows] == [r["loss"] for r in ref_rows]  # bitwise
    assert [r["grad_norm"] for r in run_rows] == [r["grad_norm"] for r in ref_rows]
    a, b = restore(reference.workdir, 60), restore(run, 60)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)  # params, Adam moments and step, bitwise
    leftovers = [n for n in os.listdir(checkpoints) if TMP_SUFFIX in n]
    assert not leftovers, leftovers  # the killed save's temporary directory was cleaned up


@pytest.mark.slow
def test_kill9_and_resume_stop_early_at_the_uninterrupted_runs_step(tmp_path):
    """Early stopping's counter and best value travel in the checkpoints: a run killed with
    SIGKILL after its step-10 checkpoint and resumed stops at step 30, where an uninterrupted
    run stops (loss must fall by 10 nats to count, so only the first validation is a best;
    patience 2). A resume that forgot the counter would stop at step 40 or 50."""
    early = dict(
        FAULT_RUN,
        train__num_steps=100,
        train__eval_every=10,
        train__checkpoint_every=10,
        train__eval_bleu_sentences=8,  # slower validations: the kill lands before step 30
        train__early_stopping_patience=2,
        train__early_stopping_metric="loss",
        train__early_stopping_min_delta=10.0,
    )
    args = tiny_args(**early)
    reference = Train(tmp_path / "reference", args, name="reference")  # runs alongside
    run = str(tmp_path / "run")
    first = Train(run, args)
    checkpoints = os.path.join(run, "checkpoints")
    first.wait_until(lambda: os.path.isdir(os.path.join(checkpoints, "10")), poll=0.002)
    first.kill()
    killed_at = max(complete_steps(run))
    assert killed_at < 30, f"the kill landed after the run stopped ({killed_at})"
    second = Train(run, args)
    assert second.finish() == 0, second.stderr[-3000:]
    assert reference.finish() == 0, reference.stderr[-3000:]
    assert resumed_from(run) == [killed_at]
    for workdir in (reference.workdir, run):
        info = read_metrics(os.path.join(workdir, "metrics.jsonl"), kind="info")
        stops = [r["message"] for r in info if r["message"].startswith("early stopping at")]
        assert len(stops) == 1 and stops[0].startswith("early stopping at step 30:"), stops
        assert last_train_step(workdir) == 30 and complete_steps(workdir)[-1] == 30


@pytest.mark.slow
def test_kill9_before_the_first_checkpoint_starts_over_without_its_rows(tmp_path):
    """A run killed before its first checkpoint starts from step 0 again: metrics.jsonl
    then holds each step's row once, as the uninterrupted run's, not the killed start's
    steps twice."""
    args = tiny_args(**{**FAULT_RUN, "train__num_steps": 12})
    reference = Train(tmp_path / "reference", args, name="reference")  # runs alongside
    run = str(tmp_path / "run")
    first = Train(run, args)
    first.wait_until(lambda: last_train_step(run) >= 3, poll=0.002)
    first.kill()
    assert complete_steps(run) == [] and last_train_step(run) >= 3
    second = Train(run, args)
    assert second.finish() == 0, second.stderr[-3000:]
    assert reference.finish() == 0, reference.stderr[-3000:]
    rows, ref_rows = train_rows(run), train_rows(reference.workdir)
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r["loss"] for r in rows] == [r["loss"] for r in ref_rows]


# Random draws a resumed run must repeat, both in one run: subword sampling (data.spm_alpha)
# draws a pair's segmentation from the seed, the epoch and the pair alone; Philox dropout
# masks (train.dropout_bits) from the step's key alone. Either drawn otherwise changes the
# losses after the resume.
RANDOM_DRAWS = {
    "data__spm_alpha": 0.1,
    "train__dropout_bits": "philox",
    "model__dropout_rate": 0.1,
}


@pytest.mark.slow
def test_kill9_resume_with_random_draws_is_the_uninterrupted_run(tmp_path):
    """A run killed with SIGKILL after its step-10 checkpoint and resumed has an
    uninterrupted run's per-step losses and final train state, bitwise, with the
    RANDOM_DRAWS. (A sampler seeded from the clock or from what the process drew before
    fails this.)"""
    args = tiny_args(**{**FAULT_RUN, "train__num_steps": 40, **RANDOM_DRAWS})
    reference = Train(tmp_path / "reference", args, name="reference")  # runs alongside
    run = str(tmp_path / "run")
    first = Train(run, args)
    first.wait_until(lambda: os.path.isdir(os.path.join(run, "checkpoints", "10")), poll=0.002)
    first.kill()
    killed_at = max(complete_steps(run))
    assert killed_at < 40, f"the kill landed after the run finished ({killed_at})"
    second = Train(run, args)
    assert second.finish() == 0, second.stderr[-3000:]
    assert reference.finish() == 0, reference.stderr[-3000:]
    assert resumed_from(run) == [killed_at]
    ref_rows, run_rows = train_rows(reference.workdir), train_rows(run)
    assert [r["step"] for r in run_rows] == list(range(1, 41))
    assert [r["loss"] for r in run_rows] == [r["loss"] for r in ref_rows]  # bitwise
    a, b = restore(reference.workdir, 40), restore(run, 40)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)  # params, Adam moments and step, bitwise


@pytest.mark.slow
def test_non_finite_loss_stops_with_one_line_and_a_good_checkpoint(tmp_path):
    """A learning rate of 1e30 (set on a resumed run) makes the loss NaN/inf within two
    steps: the run stops with exit 2 and one line naming the step and the last good
    checkpoint, which restores with finite values."""
    workdir = str(tmp_path / "run")
    good = Train(workdir, tiny_args(**{**FAULT_RUN, "train__num_steps": 10}))
    assert good.finish() == 0, good.stderr[-3000:]
    assert complete_steps(workdir) == [10]

    bad = Train(
        workdir, tiny_args(**{**FAULT_RUN, "train__num_steps": 20, "train__learning_rate": 1e30})
    )
    rc = bad.finish()
    line = assert_one_line_error(
        rc,
        bad.stderr,
        r"^error: non-finite loss \((nan|inf|-inf)\) at step (\d+); the last good checkpoint "
        r"is step (\d+) in (\S+);",
    )
    match = re.search(r"at step (\d+); the last good checkpoint is step (\d+) in (\S+);", line)
    bad_step, good_step, directory = int(match.group(1)), int(match.group(2)), match.group(3)
    assert bad_step in (11, 12) and good_step == 10, line  # lr 1e30 applies from step 11
    # configs/default.py is Pre-LN already: Pre-LN is not suggested to it
    assert line.endswith("; lower train.learning_rate or add warmup, then rerun to resume"), line
    assert directory == os.path.join(os.path.abspath(workdir), "checkpoints")
    assert complete_steps(workdir) == [10]
    state = restore(workdir, good_step)
    assert int(state["step"]) == 10
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(state["params"]))


def test_workdir_under_a_file_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = Train(tmp_path / "a_file" / "run", tiny_args(**FAULT_RUN), log_dir=tmp_path)
    assert_one_line_error(proc.finish(), proc.stderr, r"cannot create workdir .*a_file/run")


def _mount_tmpfs(path, size: str, *, read_only=False) -> bool:
    """Mounts a small tmpfs at path (needs root and mount permission in this container)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    options = f"size={size}" + (",ro" if read_only else "")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    return proc.returncode == 0


def _umount(path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_unwritable_workdir_parent_is_a_one_line_error(tmp_path):
    """chmod 555 on the parent; root ignores permission bits, so as root a read-only
    tmpfs stands in for the parent (EROFS instead of EACCES: the same code path)."""
    parent = tmp_path / "parent"
    parent.mkdir()
    mounted = False
    if os.geteuid() == 0:
        mounted = _mount_tmpfs(parent, "1m", read_only=True)
        if not mounted:
            pytest.skip("running as root (chmod is ignored) and cannot mount a read-only tmpfs")
    else:
        parent.chmod(0o555)
    try:
        proc = Train(parent / "run", tiny_args(**FAULT_RUN), log_dir=tmp_path)
        assert_one_line_error(
            proc.finish(), proc.stderr, r"cannot create workdir .*parent/run \(.*\); choose"
        )
    finally:
        if mounted:
            _umount(parent)
        else:
            parent.chmod(0o755)


@pytest.mark.slow
def test_full_disk_during_a_save_is_a_one_line_error(tmp_path):
    """<workdir>/checkpoints on a tmpfs that holds one checkpoint (~0.6 MB) but not two:
    the second save fails with ENOSPC inside Orbax's asynchronous writer; the run stops with
    one line (exit 2), and the first checkpoint is intact and restorable."""
    workdir = tmp_path / "run"
    checkpoints = workdir / "checkpoints"
    checkpoints.mkdir(parents=True)
    if not _mount_tmpfs(checkpoints, "900k"):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        proc = Train(workdir, tiny_args(**{**FAULT_RUN, "train__num_steps": 30}))
        rc = proc.finish()
        assert_one_line_error(
            rc,
            proc.stderr,
            r"saving checkpoint 20 in .*/checkpoints failed \(No space left on device\); "
            r"earlier checkpoints are intact",
            background_logs=True,
        )
        steps = complete_steps(workdir)
        assert steps and steps[0] == 10, steps
        state = restore(workdir, 10)
        assert int(state["step"]) == 10
        assert all(np.isfinite(x).all() for x in jax.tree.leaves(state["params"]))
    finally:
        _umount(checkpoints)


# ------------------------------------------------------------ checkpoints damaged on disk


@pytest.fixture
def trained_run(checkpointed_run):
    """A finished train.py run: checkpoints at steps 10 and 20, a train row every step."""
    return checkpointed_run[0]


def array_files(workdir, step: int) -> list[str]:
    """Checkpoint `step`'s OCDBT data files (the array chunks), largest first."""
    pattern = os.path.join(workdir, "checkpoints", str(step), "state", "ocdbt.process_*", "d")
    files = [os.path.join(d, name) for d in glob.glob(pattern) for name in os.listdir(d)]
    assert files, f"no array files under {pattern}"
    return sorted(files, key=os.path.getsize, reverse=True)


def _truncate(path):
    os.truncate(path, os.path.getsize(path) // 3)


def _garble(path):
    with open(path, "r+b") as f:
        f.write(np.random.default_rng(0).bytes(os.path.getsize(path)))


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _damage(change, run, step, name=None) -> str:
    """change(path) on checkpoint `step`'s file `name` (default: its largest array file);
    returns that file's path inside the step directory, as the errors name it."""
    step_dir = os.path.join(run, "checkpoints", str(step))
    path = os.path.join(step_dir, name) if name else array_files(run, step)[0]
    change(path)
    return os.path.relpath(path, step_dir)


# How a finished checkpoint gets damaged on disk after its save (each only its largest array
# file, or one metadata file): one byte flipped in the middle (same size), a file cut short,
# deleted, overwritten with noise. Each returns the damaged file's path in the step.
DAMAGE = {
    "array_file_byte_flipped": lambda run, step: _damage(flip_middle_byte, run, step),
    "array_file_truncated": lambda run, step: _damage(_truncate, run, step),
    "array_file_deleted": lambda run, step: _damage(os.remove, run, step),
    "array_file_garbled": lambda run, step: _damage(_garble, run, step),
    "array_metadata_deleted": lambda run, step: _damage(os.remove, run, step, "state/_METADATA"),
    "run_metadata_garbled": lambda run, step: _damage(
        lambda path: _write(path, "{"), run, step, "meta/metadata"
    ),
}
RESUME_ARGS = tiny_args(**{**FAULT_RUN, "train__num_steps": 30, "train__keep_checkpoints": 2})
WARNING = re.compile(
    r"warning: checkpoint 20 is unreadable \((?P<why>.+)\), moved to (?P<moved>\S+); "
    r"the run continues from step 10"
)


@pytest.mark.parametrize("damage", fast_subset(DAMAGE, ["array_file_byte_flipped"]))
def test_a_damaged_latest_checkpoint_resumes_from_the_one_before(trained_run, tmp_path, damage):
    """Checkpoint 20 of a finished run damaged on disk: train.py to step 30 warns in one line
    that 20 is unreadable, naming the damaged file, and moved aside, resumes from 10
    (recomputing step 20 bitwise as the undamaged run did), saves a new 20 and 30 past it, and
    retention (keep 2) ignores the damaged directory. A flipped byte is found by the
    checkpoint's manifest: the file keeps its size and may well decode."""
    workdir = copy_run(trained_run, tmp_path)
    name = DAMAGE[damage](workdir, 20)
    damaged = sorted(os.listdir(os.path.join(workdir, "checkpoints", "20")))

    proc = Train(workdir, RESUME_ARGS)
    assert proc.finish() == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and WARNING.fullmatch(warnings[0]), warnings
    assert WARNING.fullmatch(warnings[0]).group("why").startswith(f"{name} "), warnings
    moved = WARNING.fullmatch(warnings[0]).group("moved")
    assert moved == os.path.join(os.path.abspath(workdir), "checkpoints", "20.unreadable")
    assert sorted(os.listdir(moved)) == damaged  # kept as it was, for inspection

    assert resumed_from(workdir) == [10]
    assert complete_steps(workdir) == [20, 30]  # 10 retired by keep=2; 20.unreadable unlisted
    rows = train_rows(workdir)
    assert [r["step"] for r in rows] == list(range(1, 31))
    before = {r["step"]: r["loss"] for r in train_rows(trained_run)}
    assert [r["loss"] for r in rows[:20]] == [before[s] for s in range(1, 21)]  # bitwise
    again, saved = orbax_params(workdir, 20), orbax_params(trained_run, 20)
    assert again.keys() == saved.keys()
    for name in saved:
        np.testing.assert_array_equal(again[name], saved[name], err_msg=name)


def test_every_checkpoint_unreadable_is_a_one_line_error(trained_run, tmp_path):
    """No readable checkpoint: train.py does not start over from step 0 on its own (that would
    hide the damage and log a second run into the workdir); one line names the checkpoint
    directory and the fix, and nothing in the workdir changes."""
    workdir = copy_run(trained_run, tmp_path)
    for step in (10, 20):
        _truncate(array_files(workdir, step)[0])
    checkpoints = os.path.join(os.path.abspath(workdir), "checkpoints")
    metrics = open(os.path.join(workdir, "metrics.jsonl"), "rb").read()

    proc = Train(workdir, RESUME_ARGS)
    assert_one_line_error(
        proc.finish(),
        proc.stderr,
        rf"^error: every checkpoint in {re.escape(checkpoints)} is unreadable \(steps \[10, 20\]; "
        r"step 20: .+\); nothing was changed: to train from step 0 use a new --workdir \(or "
        rf"delete {re.escape(workdir)}\), or restore the files from a backup$",
    )
    assert sorted(os.listdir(checkpoints)) == ["10", "20"]
    assert open(os.path.join(workdir, "metrics.jsonl"), "rb").read() == metrics


def with_decode_files(args: list[str], tmp_path) -> list[str]:
    """args, with an input file of one line and an output path added when they run decode.py."""
    if args[0] != "decode.py":
        return args
    (tmp_path / "in.txt").write_text("the dog sleeps\n")
    return [*args, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")]


@pytest.mark.parametrize("script", fast_subset(["eval.py", "decode.py"], ["eval.py"]))
def test_eval_and_decode_name_an_unreadable_checkpoint(trained_run, tmp_path, script):
    """eval.py/decode.py on a run whose latest checkpoint is damaged (every array file cut to
    a third, so the parameters are hit wherever Orbax put them) stop with one line naming it
    and the flag that picks another; that flag then works."""
    workdir = copy_run(trained_run, tmp_path)
    for path in array_files(workdir, 20):
        _truncate(path)
    args = with_decode_files([script, "--workdir", workdir], tmp_path)
    proc = run(args)
    checkpoints = re.escape(os.path.join(os.path.abspath(workdir), "checkpoints"))
    assert_one_line_error(
        proc.returncode,
        proc.stderr,
        rf"^error: checkpoint 20 in {checkpoints} is unreadable \(.+\); pick another with "
        r"--checkpoint=STEP, one of \[10\]$",
    )
    if script == "eval.py":
        proc = run([*args, "--checkpoint=10"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.load(open(os.path.join(workdir, "eval", "test.json")))["step"] == 10


# Commands that restore parameters, each on a copy of the trained run (checkpoints 10 and 20)
# with one byte flipped in the middle of the largest array file of the checkpoint it reads:
# the arguments ({damaged}: that copy, {intact}: another), the damaged step and the fix the
# error offers. Averaging the two cannot leave step 10 out, so it offers fewer members.
PICK_ANOTHER = "pick another with --checkpoint=STEP, one of [10]"
READERS = {
    "eval": (["eval.py", "--workdir", "{damaged}"], 20, PICK_ANOTHER),
    "decode": (["decode.py", "--workdir", "{damaged}"], 20, PICK_ANOTHER),
    "average": (
        ["eval.py", "--workdir", "{damaged}", "--average_last=2"],
        10,
        "no 2 checkpoints in a row leave it out: lower --average_last",
    ),
    "ensemble": (
        ["decode.py", "--workdir", "{intact}", "--ensemble", "{damaged}:20"],
        20,
        "pick another with --ensemble {damaged}:STEP, one of [10]",
    ),
}


@pytest.mark.parametrize("reader", fast_subset(READERS, ["eval"]))
def test_eval_decode_averaging_and_ensembles_name_a_flipped_byte(trained_run, tmp_path, reader):
    """One flipped byte (the file's size unchanged) stops eval.py, decode.py, checkpoint
    averaging and an ensemble member with one line naming the step and the file, exit 2."""
    template, step, fix = READERS[reader]
    (tmp_path / "damaged").mkdir()
    (tmp_path / "intact").mkdir()
    damaged = copy_run(trained_run, tmp_path / "damaged")
    intact = copy_run(trained_run, tmp_path / "intact")
    name = DAMAGE["array_file_byte_flipped"](damaged, step)
    args = with_decode_files([a.format(damaged=damaged, intact=intact) for a in template], tmp_path)
    proc = run(args)
    checkpoints = re.escape(os.path.join(os.path.abspath(damaged), "checkpoints"))
    assert_one_line_error(
        proc.returncode,
        proc.stderr,
        rf"^error: checkpoint {step} in {checkpoints} is unreadable \({re.escape(name)} does "
        rf"not match its checksum\); {re.escape(fix.format(damaged=damaged))}$",
    )


def test_export_names_a_flipped_byte(trained_run, tmp_path):
    """transformer-interop export-marian reads the parameters through load_run_weights: the
    same one-line error (the CLI prints it and exits 2)."""
    from transformer.interop.runs import load_run_weights
    from transformer.training.checkpoint import UnreadableCheckpoint

    workdir = copy_run(trained_run, tmp_path)
    name = DAMAGE["array_file_byte_flipped"](workdir, 20)
    with pytest.raises(UnreadableCheckpoint, match=r"^checkpoint 20 in .* is unreadable") as e:
        load_run_weights(workdir, "latest")
    assert e.value.reason == f"{name} does not match its checksum"


NO_MANIFEST_LINE = "no manifest (saved before checksums were recorded; not verified)"
# transformer-verify on a copy of the trained run damaged so: (damage(run) -> the file it
# names, the exit status, the lines printed with {name} the file).
VERIFY_CASES = {
    "intact": (lambda run: "", 0, ["step 10: OK", "step 20: OK"]),
    "byte_flipped": (
        lambda run: DAMAGE["array_file_byte_flipped"](run, 20),
        1,
        ["step 10: OK", "step 20: damaged ({name} does not match its checksum)"],
    ),
    "manifest_changed": (
        lambda run: change_recorded_checksum(os.path.join(run, "checkpoints", "10")),
        1,
        ["step 10: damaged (checksums.json does not match its own checksum)", "step 20: OK"],
    ),
    "manifest_deleted": (
        lambda run: os.remove(os.path.join(run, "checkpoints", "20", "checksums.json")),
        1,
        ["step 10: OK", "step 20: damaged (checksums.json is missing)"],
    ),
    "saved_before_manifests": (
        lambda run: make_pre_manifest(os.path.join(run, "checkpoints", "20")),
        0,
        ["step 10: OK", f"step 20: {NO_MANIFEST_LINE}"],
    ),
}


@pytest.mark.parametrize("case", VERIFY_CASES)
def test_transformer_verify_names_each_checkpoints_state(trained_run, tmp_path, case):
    damage, status, lines = VERIFY_CASES[case]
    workdir = copy_run(trained_run, tmp_path)
    name = damage(workdir)
    proc = run(["-m", "transformer.cli.verify", workdir])
    assert proc.returncode == status, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [line.format(name=name) for line in lines]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_transformer_verify_on_a_directory_without_checkpoints_is_a_one_line_error(tmp_path):
    proc = run(["-m", "transformer.cli.verify", str(tmp_path)])
    assert_one_line_error(proc.returncode, proc.stderr, r"^error: no checkpoints in ")


def test_a_run_saved_before_manifests_still_evaluates(trained_run, tmp_path):
    """Checkpoints without a manifest (saved before manifests were written) restore as
    before: eval.py exits 0 and says once that the files were not checked."""
    workdir = copy_run(trained_run, tmp_path)
    for step in (10, 20):
        make_pre_manifest(os.path.join(workdir, "checkpoints", str(step)))
    proc = run(["eval.py", "--workdir", workdir, "--average_last=2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note: checkpoint")]
    assert len(notes) == 1 and "saved before checksums were recorded" in notes[0], notes
    assert json.load(open(os.path.join(workdir, "eval", "test.json")))["step"] == 20


def test_orphaned_reads_of_a_damaged_checkpoint_are_dropped_and_nothing_else():
    """The errors a failed restore leaves behind (asyncio's 'Future exception was never
    retrieved' records of TensorStore reads, as a CI run printed them after the one-line
    error) are dropped; any other error still reaches the log."""
    import logging

    from transformer.training import checkpoint

    cut_short = ValueError(
        'OUT_OF_RANGE: Error reading "params.encoder_layers.0.self_attention.key.kernel.value'
        '/0.0" in OCDBT database at local file "/tmp/run/checkpoints/20/state/": Requested '
        "byte range [42751, 46555) is not valid for value of size 22104"
    )
    chunk = ValueError("Encountered error while reading array index (0, 0) for params.x")
    closed = RuntimeError("Event loop is closed")
    other = ValueError("OUT_OF_RANGE: a bug of ours")

    def record(e):
        return logging.LogRecord(
            "asyncio",
            logging.ERROR,
            "x",
            1,
            "never retrieved",
            (),
            (
                type(e),
                e,
                None,
            ),
        )

    for dropped in (cut_short, chunk, closed):
        assert not checkpoint._not_an_orphaned_read(record(dropped)), dropped
    assert checkpoint._not_an_orphaned_read(record(other))
    assert checkpoint._not_an_orphaned_read(record(RuntimeError("Event loop is running")))

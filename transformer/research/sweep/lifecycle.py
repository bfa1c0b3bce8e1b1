"""One run's lifecycle, the part every executor shares: `runs_to_start` settles the runs that
need no subprocess (invalid config, finished, failed before), and a `RunJob` moves one run
through train -> eval, each phase a subprocess with its log, its status.json writes and its
failure classification. The local executor (execution.py) keeps several jobs going in one
process; the Ray executor (ray_execution.py) runs one job per Ray task."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from transformer.common.metrics_file import METRICS_FILE
from transformer.research.sweep.runs import (
    Run,
    classify_failure,
    error_line,
    is_finished,
    last_train_step,
    read_eval,
    read_status,
    write_status,
)

INTERRUPTED = "interrupted: rerun the same command to resume"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CHECKPOINTS = "checkpoints"  # train.py's Orbax directory in the run directory


def new_counts() -> dict[str, int]:
    """An executor's result: how many runs ended done / skipped / failed / diverged."""
    return {"done": 0, "skipped": 0, "failed": 0, "diverged": 0}


def runs_to_start(runs: list[Run], retry_failed: bool, counts: dict, report) -> list[tuple]:
    """[(1-based index, run)] of the runs to start; the others are counted and reported."""
    total = len(runs)
    pending = []
    for i, run in enumerate(runs, 1):
        tag = f"[{i}/{total}] {run.label}"
        status = read_status(run)
        if run.config_error:
            write_status(run, status="failed", phase="config", error=run.config_error)
            report(f"{tag}: FAILED (invalid config): {run.config_error}")
            counts["failed"] += 1
        elif is_finished(run):
            write_status(run, status="done", bleu=read_eval(run).get("bleu"))
            report(f"{tag}: skipped (finished)")
            counts["skipped"] += 1
        elif _failed_before(run, status) and not retry_failed:
            report(f"{tag}: skipped ({status['status']} before; --retry_failed reruns it)")
            counts[status["status"]] += 1
        else:
            pending.append((i, run))
    return pending


def was_trained(run: Run) -> bool:
    """Whether its training ended with the overrides it has now (it goes on with eval)."""
    status = read_status(run)
    return bool(status.get("trained")) and status.get("overrides") == run.overrides


def _failed_before(run: Run, status: dict) -> bool:
    """Recorded as failed or diverged with the overrides it has now (changed ones rerun)."""
    return (
        status.get("status") in ("failed", "diverged") and status.get("overrides") == run.overrides
    )


class RunJob:
    """One run moving through train -> eval in subprocesses. `report` takes each progress
    line; `note` (where the job runs) goes into each phase's log."""

    def __init__(
        self,
        run: Run,
        index: int,
        total: int,
        env: dict,
        report: Callable[[str], None],
        note: str | None = None,
    ):
        self.run, self.index, self.total, self.env = run, index, total, env
        self.report, self.note = report, note
        self.phase = None
        self.proc = None
        self.log = None
        self.stderr_path = None
        self.stderr_file = None
        self.started = 0.0
        self.last_step = None
        self.last_print = 0.0
        self.stale_metrics = None  # metrics.jsonl as an earlier attempt left it (_start)

    def say(self, message: str) -> None:
        self.report(f"[{self.index}/{self.total}] {self.run.label}: {message}")

    def begin(self) -> None:
        """Starts at evaluation when these overrides were already trained, else at training."""
        self._start("eval" if was_trained(self.run) else "train")

    def step(self, poll_s: float) -> str | None:
        """Checks the current phase: the run's outcome ('done', 'failed' or 'diverged') once
        it has ended, else None (still running, or training ended and evaluation started)."""
        if not self._poll(poll_s):
            return None
        return self._advance()

    def terminate(self) -> None:
        """Asks the phase's subprocess to stop: train.py checkpoints on SIGTERM and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def kill(self) -> None:
        """Stops the phase's subprocess: SIGTERM, then SIGKILL after 60 s."""
        self.terminate()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _start(self, phase: str) -> None:
        run = self.run
        os.makedirs(run.workdir, exist_ok=True)
        # Read before train.py starts, which resumes from this checkpoint.
        resume = checkpoint_step(run.workdir) if phase == "train" else None
        if resume is not None:
            # Until train.py has resumed, metrics.jsonl may hold the interrupted attempt's
            # steps after the checkpoint; resuming rewrites it (a new file) without them.
            self.stale_metrics = _file_id(os.path.join(run.workdir, METRICS_FILE))
        # Built here, so argv[0] is this process's interpreter (a Ray worker's on its node).
        cmd = run.train_command() if phase == "train" else run.eval_command()
        self.phase = phase
        log_path = os.path.join(run.workdir, f"{phase}.log")
        self.stderr_path = os.path.join(run.workdir, f".{phase}.stderr")
        self.log = open(log_path, "a")
        self.log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        if self.note:
            self.log.write(f"=== on {self.note}\n")
        self.log.flush()
        self.stderr_file = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=self.log, stderr=self.stderr_file, preexec_fn=_preexec()
        )
        self.started = time.time()
        self.last_print = self.started
        self._announce(log_path, resume)

    def _announce(self, log_path: str, resume: int | None) -> None:
        """Records and says the phase that started: training (from which checkpoint) or
        evaluation."""
        if self.phase == "train":
            write_status(self.run, status="training", trained=False, num_steps=self.run.num_steps)
            resumed = "" if resume is None else f" (resuming from its checkpoint at step {resume})"
            self.say(f"training{resumed} (log: {log_path})")
        else:
            write_status(self.run, status="evaluating")
            self.say(f"evaluating on {self.run.eval_split}")

    def _poll(self, poll_s: float) -> bool:
        """True when the current phase's subprocess has ended; reports training progress."""
        if self.proc.poll() is not None:
            if self.phase == "train":  # its last steps may have run since the previous poll
                self._report_step()
            return True
        now = time.time()
        if self.phase == "train" and now - self.last_print >= poll_s:
            self.last_print = now
            self._report_step()
        return False

    def _report_step(self) -> None:
        """Says the latest logged training step, once per new step."""
        metrics = os.path.join(self.run.workdir, METRICS_FILE)
        if self.stale_metrics is not None and _file_id(metrics) == self.stale_metrics:
            return
        step = last_train_step(self.run.workdir)
        if step is not None and step != self.last_step:
            self.last_step = step
            self.say(f"training (step {step}/{self.run.num_steps})")

    def _advance(self) -> str | None:
        """After a phase's subprocess ended: the run's outcome, or None when training
        succeeded and evaluation was started."""
        outcome = self._finish_phase()
        if outcome == "ok" and self.phase == "train":
            write_status(self.run, status="trained", trained=True)
            self._start("eval")
            return None
        if outcome != "ok":
            return outcome
        record = read_eval(self.run) or {}
        bleu, chrf = record.get("bleu"), record.get("chrf")
        write_status(self.run, status="done", bleu=bleu, chrf=chrf, error=None)
        self.say(f"done: {self.run.eval_split} BLEU {record.get('bleu', float('nan')):.2f}")
        return "done"

    def _finish_phase(self) -> str:
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
        key = f"{self.phase}_wall_s"
        write_status(self.run, **{key: read_status(self.run).get(key, 0.0) + elapsed})
        if rc == 0:
            return "ok"
        outcome = classify_failure(rc, stderr_text)
        error = error_line(stderr_text)
        write_status(self.run, status=outcome, phase=self.phase, returncode=rc, error=error)
        self.say(f"{outcome.upper()} in {self.phase} (exit {rc}): {error}")
        return outcome


def checkpoint_step(workdir: str) -> int | None:
    """The step of the run's newest complete checkpoint, where train.py resumes (the log may
    have gone further). Orbax writes a checkpoint under a temporary name and renames it to its
    step when complete; damaged ones set aside are `<step>.unreadable`: both are left out."""
    try:
        names = os.listdir(os.path.join(workdir, CHECKPOINTS))
    except OSError:
        return None
    return max((int(n) for n in names if n.isdigit()), default=None)


def _file_id(path: str) -> tuple | None:
    """Which file `path` is (device and inode), None when there is none: a file replaced by
    an atomic rewrite is another file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _preexec():
    """What the phase's subprocess runs before exec: on Linux, ask for SIGTERM when the
    process that started it dies, so a killed sweep or Ray worker leaves no orphan training
    (train.py checkpoints on SIGTERM). prctl is looked up here, in the parent: the child of
    a threaded parent (a Ray worker) should do no more than call it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

"""Running a sweep's runs locally: `execute` skips finished runs and runs recorded as failed,
then moves each remaining run through train -> eval (a `RunJob` of lifecycle.py, each phase
in its own subprocess), at most `parallel` at a time, one GPU slot each when GPUs are
visible; outcomes go to each run's status.json and logs to its train.log / eval.log."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from transformer.research.sweep.lifecycle import RunJob, new_counts, runs_to_start
from transformer.research.sweep.runs import Run

DEFAULT_POLL_S = 5.0


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


def printer(out):
    """The `report` of a RunJob that prints each line to `out` as it comes."""
    return lambda line: print(line, file=out, flush=True)


def execute(
    runs: list[Run],
    *,
    parallel: int = 1,
    retry_failed: bool = False,
    poll_s: float = DEFAULT_POLL_S,
    out=None,
) -> dict[str, int]:
    """Runs what is not finished; returns counts of done / skipped / failed / diverged."""
    out = out or sys.stdout
    counts = new_counts()
    pending = runs_to_start(runs, retry_failed, counts, printer(out))
    _run_jobs(pending, len(runs), parallel, poll_s, counts, out)
    return counts


def _run_jobs(
    pending: list[tuple], total: int, parallel: int, poll_s: float, counts: dict, out
) -> None:
    """Keeps up to `parallel` jobs going until every pending run has ended."""
    envs = _slot_envs(parallel)
    free = list(range(parallel))
    active: list[tuple[RunJob, int]] = []
    try:
        while pending or active:
            while pending and free:
                i, run = pending.pop(0)
                slot = free.pop(0)
                job = RunJob(run, i, total, envs[slot], printer(out))
                job.begin()
                active.append((job, slot))
            time.sleep(min(0.5, poll_s))
            for job, slot in list(active):
                outcome = job.step(poll_s)
                if outcome is None:
                    continue
                counts[outcome] += 1
                active.remove((job, slot))
                free.append(slot)
    except KeyboardInterrupt:
        # Every job is asked to stop before any is waited for: each train.py checkpoints at
        # the same time. The caller says how to resume (the CLI: one line, exit status 130).
        for job, _ in active:
            job.terminate()
        for job, _ in active:
            job.kill()
        raise

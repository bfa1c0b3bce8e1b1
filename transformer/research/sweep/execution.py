"""Running a sweep's runs: `execute` skips finished runs and runs recorded as failed, then
moves each remaining run through train -> eval, each phase in its own subprocess (`_Job`), at
most `parallel` at a time, one GPU slot each when GPUs are visible; outcomes go to each
run's status.json and logs to its train.log / eval.log."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

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

DEFAULT_POLL_S = 5.0


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
        error = error_line(stderr_text)
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
    counts = {"done": 0, "skipped": 0, "failed": 0, "diverged": 0}
    pending = _runs_to_start(runs, retry_failed, counts, out)
    _run_jobs(pending, len(runs), parallel, poll_s, counts, out)
    return counts


def _runs_to_start(runs: list[Run], retry_failed: bool, counts: dict, out) -> list[tuple]:
    """[(1-based index, run)] of the runs to start; the others are counted and reported."""
    total = len(runs)
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
    return pending


def _run_jobs(pending: list[tuple], total: int, parallel: int, poll_s: float, counts: dict,
              out) -> None:  # fmt: skip
    """Keeps up to `parallel` jobs going until every pending run has ended."""
    envs = _slot_envs(parallel)
    free = list(range(parallel))
    active: list[tuple[_Job, int]] = []
    try:
        while pending or active:
            while pending and free:
                i, run = pending.pop(0)
                slot = free.pop(0)
                active.append((_start_job(run, i, total, envs[slot], out), slot))
            time.sleep(min(0.5, poll_s))
            for job, slot in list(active):
                if not job.poll(poll_s):
                    continue
                outcome = _end_phase(job)
                if outcome is None:  # training ended and evaluation started
                    continue
                counts[outcome] += 1
                active.remove((job, slot))
                free.append(slot)
    except KeyboardInterrupt:
        for job, _ in active:
            job.kill()
        print("interrupted: rerun the same command to resume", file=out, flush=True)
        raise


def _start_job(run: Run, index: int, total: int, env: dict, out) -> _Job:
    """A job for `run`, started at evaluation when these overrides were already trained."""
    job = _Job(run, index, total, env, out)
    status = read_status(run)
    if status.get("trained") and status.get("overrides") == run.overrides:
        job.start("eval")
    else:
        job.start("train")
    return job


def _end_phase(job: _Job) -> str | None:
    """After a phase's subprocess ended: the run's outcome ('done', 'failed' or 'diverged'),
    or None when training succeeded and evaluation was started."""
    outcome = job.finish_phase()
    if outcome == "ok" and job.phase == "train":
        write_status(job.run, status="trained", trained=True)
        job.start("eval")
        return None
    if outcome != "ok":
        return outcome
    record = read_eval(job.run) or {}
    write_status(job.run, status="done", bleu=record.get("bleu"), chrf=record.get("chrf"),
                 error=None)  # fmt: skip
    bleu = record.get("bleu", float("nan"))
    job.say(f"done: {job.run.eval_split} BLEU {bleu:.2f}")
    return "done"

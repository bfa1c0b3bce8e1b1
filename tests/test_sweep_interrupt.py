"""Ctrl-C and resume with the local executor: one line on stderr and exit status 130, the run
left checkpointed; a resumed run's line names the checkpoint step training resumes from (the
one train.py reads), not the last step the log reached."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.test_sweep_ray import (
    LONGER,
    PRE,
    _finish,
    _only_sweep_lines,
    _start_sweep,
    _status,
    _sweep_command,
    _write_sweep,
    interrupt_mid_training,
)
from transformer.common.fileio import atomic_write
from transformer.common.metrics_file import read_metrics, row_line
from transformer.research import sweep as sw
from transformer.research.sweep.lifecycle import RunJob, checkpoint_step

INTERRUPTED_LINE = "interrupted: rerun the same command to resume\n"


def _train_rows(steps):
    return [{"kind": "train", "step": s, "loss": 1.0} for s in steps]


def test_the_resume_line_names_the_checkpoint_step_and_stale_log_steps_are_not_reported(
    tmp_path,
):
    config = _write_sweep(tmp_path / "sweep_cfg.py", PRE, steps=LONGER)
    (run,) = sw.plan_runs(sw.load_sweep(config), str(tmp_path / "w"))
    checkpoints = os.path.join(run.workdir, "checkpoints")
    # Complete checkpoints 10 and 20; 30 half-written (Orbax's temporary name); 25 set aside
    # as unreadable. The killed attempt had logged up to step 35.
    for name in ("10", "20", "30.orbax-checkpoint-tmp", "25.unreadable"):
        os.makedirs(os.path.join(checkpoints, name))
    metrics = os.path.join(run.workdir, "metrics.jsonl")
    atomic_write(metrics, "".join(map(row_line, _train_rows(range(5, 40, 5)))))
    assert checkpoint_step(run.workdir) == 20
    assert checkpoint_step(str(tmp_path / "nowhere")) is None

    run.train_command = lambda: [sys.executable, "-c", "import time; time.sleep(60)"]
    lines = []
    job = RunJob(run, 1, 1, dict(os.environ), lines.append)
    job.begin()
    try:
        log = os.path.join(run.workdir, "train.log")
        tag = "[1/1] variant=pre seed=0"
        assert lines == [f"{tag}: training (resuming from its checkpoint at step 20) (log: {log})"]
        assert job.step(poll_s=0) is None
        assert lines[1:] == []  # step 35 is the killed attempt's, not this one's
        # train.py resumes: it rewrites metrics.jsonl without the steps after 20, then logs.
        resumed = {"kind": "info", "message": "resumed from checkpoint at step 20", "step": 20}
        rows = [*_train_rows(range(5, 25, 5)), resumed, *_train_rows([25])]
        atomic_write(metrics, "".join(map(row_line, rows)))
        assert job.step(poll_s=0) is None
        assert lines[1:] == [f"{tag}: training (step 25/40)"]
    finally:
        job.kill()


@pytest.mark.slow
def test_ctrl_c_ends_a_local_sweep_in_one_line_leaving_its_run_checkpointed(tmp_path):
    config = _write_sweep(tmp_path / "sweep_cfg.py", PRE, steps=LONGER)
    workdir = str(tmp_path / "w")
    run_dir = os.path.join(workdir, "pre", "0")
    sweep = _start_sweep(_sweep_command(config, workdir))
    interrupt_mid_training(sweep, run_dir)  # Ctrl-C in a terminal: the sweep and its train.py
    out, err = _finish(sweep)
    assert sweep.returncode == 130
    assert err == INTERRUPTED_LINE
    _only_sweep_lines(out)
    # Left to resume (tests/test_sweep_ray.py reruns one): recorded as training, with the
    # checkpoint train.py saved where the signal stopped it.
    assert _status(workdir, "pre")["status"] == "training"
    stop = re.compile(r"stopped by signal \d+ at step (\d+); checkpoint saved")
    stops = [stop.fullmatch(r["message"]) for r in read_metrics(run_dir, kind="info")]
    assert [int(m[1]) for m in stops if m] == [checkpoint_step(run_dir)]
    assert checkpoint_step(run_dir) < LONGER["train.num_steps"]

"""Multi-process data-parallel training: two `train.py` processes on 127.0.0.1 (CPU, gloo
collectives) train like one process with the same global batch, and their checkpoints
restore in another layout.

The reference is one process with two (forced) CPU devices: the same SPMD program, where each
device reduces its half of the global batch and the two partial sums are added (a + b == b + a
in floating point), so the runs agree bitwise. One process with ONE device sums the batch in
another order and agrees only to float32 rounding (and not at all on the attention key biases,
whose gradient is rounding noise; see docs/reliability.md, "Numerics across layouts").
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import jax
import numpy as np
import pytest

from tests.test_checkpoint_manifest import flip_middle_byte
from tests.test_faults import (
    TMP_SUFFIX,
    Train,
    complete_steps,
    restore,
    resumed_from,
    tiny_args,
    train_rows,
)

MP_RUN = dict(
    train__num_steps=20,
    train__log_every=1,
    train__checkpoint_every=10,
    train__eval_every=1000,  # evaluates only at the last step
    train__eval_bleu_sentences=0,
)
# Added to the suite's XLA_FLAGS (conftest): every process compiles the same way, so the
# bitwise comparisons compare layouts, not compiler settings.
TWO_CPU_DEVICES = {
    "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
}
TIMEOUT = 420  # seconds per process on a loaded 2-core machine


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_processes(workdir, args, n=2, launchers=None):
    """n train.py processes of one run; launchers: {process index: command prefix}."""
    port = free_port()
    return [
        Train(
            workdir,
            args,
            name=f"process{i}",
            extra=[
                f"--coordinator_address=127.0.0.1:{port}",
                f"--num_processes={n}",
                f"--process_id={i}",
            ],
            launcher=(launchers or {}).get(i, ()),
        )
        for i in range(n)
    ]


def finish_all(procs):
    """Waits for every process; if one fails, the others (stuck in collectives) are killed."""
    try:
        for p in procs:
            rc = p.finish(timeout=TIMEOUT)
            assert rc == 0, f"process exited {rc}:\n{p.stderr[-3000:]}"
    finally:
        for p in procs:
            p.kill()


@pytest.mark.slow
def test_two_processes_train_like_one_and_checkpoints_restore_in_either_layout(tmp_path):
    multi = str(tmp_path / "two_processes")
    procs = start_processes(multi, tiny_args(**MP_RUN))
    # One process, two CPU devices: the same mesh and global batch; 30 steps, so steps 21-30
    # also serve as the reference for the continuation below.
    reference = Train(
        tmp_path / "one_process",
        tiny_args(**{**MP_RUN, "train__num_steps": 30}),
        name="reference",
        env=TWO_CPU_DEVICES,
    )
    try:
        finish_all(procs)
        assert reference.finish(timeout=TIMEOUT) == 0, reference.stderr[-3000:]
    finally:
        reference.kill()

    # Same losses and train state as one process, bitwise.
    multi_rows, ref_rows = train_rows(multi), train_rows(reference.workdir)
    assert [r["step"] for r in multi_rows] == list(range(1, 21))  # logged once, by process 0
    assert [r["loss"] for r in multi_rows] == [r["loss"] for r in ref_rows[:20]]
    assert [r["grad_norm"] for r in multi_rows] == [r["grad_norm"] for r in ref_rows[:20]]

    # Each checkpoint written once, jointly: one directory per step, holding both processes'
    # shares (Orbax's multi-process protocol), and no unfinished temporary directories.
    directory = os.path.join(multi, "checkpoints")
    assert sorted(os.listdir(directory)) == ["10", "20"]
    state_dir = os.path.join(directory, "20", "state")
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state_dir))
    assert complete_steps(multi) == [10, 20]
    # Restored here, in one process with one device: bitwise the single-process state.
    a, b = restore(multi, 20), restore(reference.workdir, 20)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)

    # Either way round: a one-process run resumes the two-process checkpoint, and two
    # processes resume the one-process checkpoint (without its prepared TFDS data and token
    # cache, so process 0 rebuilds them while process 1 waits); both continue to step 30
    # exactly like the uninterrupted one-process run. (The one-process run keeps two devices:
    # the data pipeline ties its saved iterator state to the device count.)
    single = str(tmp_path / "continued_by_one")
    shutil.copytree(multi, single)
    again = str(tmp_path / "continued_by_two")
    shutil.copytree(reference.workdir, again)
    for name in ("checkpoints/30", "tfds", "data_cache"):
        shutil.rmtree(os.path.join(again, name))
    args = tiny_args(**{**MP_RUN, "train__num_steps": 30})
    continued = Train(single, args, name="continued", env=TWO_CPU_DEVICES)
    procs = start_processes(again, args)
    try:
        finish_all(procs)
        assert continued.finish(timeout=TIMEOUT) == 0, continued.stderr[-3000:]
    finally:
        continued.kill()
    final = restore(reference.workdir, 30)
    for workdir in (single, again):
        assert resumed_from(workdir) == [20]
        rows = train_rows(workdir)
        assert [r["step"] for r in rows] == list(range(1, 31))
        assert [r["loss"] for r in rows] == [r["loss"] for r in ref_rows]
        for x, y in zip(jax.tree.leaves(restore(workdir, 30)), jax.tree.leaves(final), strict=True):
            np.testing.assert_array_equal(x, y)
        assert not [n for n in os.listdir(os.path.join(workdir, "checkpoints")) if TMP_SUFFIX in n]


def seen_by_one_process(path: str, damaged: str) -> list[str]:
    """A command prefix: the command runs in a mount namespace of its own, where `path` holds
    the bytes of `damaged` (a bind mount); every other process still reads the real file.
    This is how hosts come to disagree on a checkpoint: a local disk, cache or copy of it."""
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        damaged,
        path,
    ]


def can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
def test_damage_seen_by_one_process_makes_every_process_resume_from_one_older_step(tmp_path):
    """Checkpoint 20's largest array file of process 1's shard flipped in process 1's view
    only (process 0 reads it intact): both processes resume from step 10, one warning names
    process 1 and the step, and steps 11-20 recompute bitwise what they were. Deciding alone,
    process 0 would resume from 20 and process 1 from 10."""
    if not can_unshare():
        pytest.skip("needs root and unshare to give one process its own view of a file")
    run = str(tmp_path / "run")
    finish_all(start_processes(run, tiny_args(**MP_RUN)))  # checkpoints 10 and 20
    original = train_rows(run)
    step_dir = os.path.join(run, "checkpoints", "20")
    shard = os.path.join(step_dir, "state", "ocdbt.process_1", "d")
    victim = max((os.path.join(shard, n) for n in os.listdir(shard)), key=os.path.getsize)
    damaged = str(tmp_path / "damaged")
    shutil.copyfile(victim, damaged)
    flip_middle_byte(damaged)

    args = tiny_args(**{**MP_RUN, "train__num_steps": 30})
    procs = start_processes(run, args, launchers={1: seen_by_one_process(victim, damaged)})
    finish_all(procs)
    warnings = [line for line in procs[0].stdout.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: checkpoint 20 is unreadable on process 1 "
        f"({os.path.relpath(victim, step_dir)} does not match its checksum), moved to "
        f"{step_dir}.unreadable; all 2 processes continue from step 10"
    ], procs[0].stdout[-3000:]
    for p in procs:
        assert "Traceback" not in p.stderr and "error:" not in p.stderr, p.stderr[-3000:]
    assert resumed_from(run) == [10]
    rows = train_rows(run)
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert [r["loss"] for r in rows[:20]] == [r["loss"] for r in original]  # bitwise
    # The set-aside step 20 is intact as this process (and process 0) reads it: the step 20
    # both processes recomputed from step 10 equals it, array for array.
    intact = str(tmp_path / "intact")
    os.makedirs(os.path.join(intact, "checkpoints"))
    shutil.copy(os.path.join(run, "config.json"), intact)
    shutil.copytree(step_dir + ".unreadable", os.path.join(intact, "checkpoints", "20"))
    a, b = restore(intact, 20), restore(run, 20)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_report_survives_its_trip_between_processes_as_bytes():
    """agreement's reports travel as fixed-size int rows: text comes back as it went, cut at
    REPORT_BYTES (a character split by the cut is replaced, not an error). In one process no
    collective runs: the report comes back as process 0's."""
    from transformer.training import agreement

    text = "state/ocdbt.process_1/d/8be9 does not match its checksum (Übergröße)"
    assert agreement._decode(agreement._encode(text)) == text
    cut = "ä" * agreement.REPORT_BYTES  # 2 bytes each: the cut falls after whole characters
    assert agreement._decode(agreement._encode(cut)) == "ä" * (agreement.REPORT_BYTES // 2)
    odd = "x" + cut  # now the cut splits an 'ä'
    assert agreement._decode(agreement._encode(odd)).endswith("ä\ufffd")
    assert agreement._encode(None).tolist() == [0] * (1 + agreement.REPORT_BYTES)
    assert agreement.first_report(None) is None
    assert agreement.first_report("damaged") == (0, "damaged")
    assert agreement.process_zeros([10, 20]) == [10, 20]

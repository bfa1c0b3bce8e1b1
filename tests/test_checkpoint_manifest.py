"""Checkpoint manifests (transformer/training/checkpoint_manifest.py) in process: what each
kind of planted damage is reported as, on plain files and on Checkpointer saves of a toy
train state; that the manifest is written in Orbax's save thread before the step is
committed; that a checkpoint saved before manifests restores with one note; the
non-finite-loss message's checkpoint and advice; the cost benchmark's dry run.

The same damage to real runs through train.py, eval.py, decode.py and transformer-verify is
tested in tests/test_faults.py.
"""

from __future__ import annotations

import json
import os
import threading
import types

import numpy as np
import pytest

from transformer.training import checkpoint_manifest as manifest
from transformer.training.checkpoint import MANIFEST_KEY, Checkpointer, UnreadableCheckpoint

BIG = "state/d/big"


def flip_middle_byte(path: str) -> None:
    """One byte in the middle of the file inverted; the size stays."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def make_pre_manifest(step_dir: str) -> None:
    """Turns a checkpoint into one saved before manifests: no checksums.json, and run
    metadata that does not say it was saved with one."""
    os.remove(os.path.join(step_dir, manifest.MANIFEST))
    meta_path = os.path.join(step_dir, "meta", "metadata")
    with open(meta_path) as f:
        meta = json.load(f)
    del meta[MANIFEST_KEY]
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def change_recorded_checksum(step_dir: str) -> None:
    """One hex digit of a file's recorded checksum changed: valid JSON of the same size."""
    path = os.path.join(step_dir, manifest.MANIFEST)
    with open(path) as f:
        body = json.load(f)
    name = sorted(body["files"])[0]
    crc = body["files"][name][1]
    body["files"][name][1] = ("1" if crc[0] == "0" else "0") + crc[1:]
    with open(path, "w") as f:
        json.dump(body, f, indent=1, sort_keys=True)


# ------------------------------------------------------------------- plain files


@pytest.fixture
def step_dir(tmp_path):
    """A step directory with a manifest: a 64 KiB data file, two small ones, and the two
    files Orbax writes after the manifest."""
    files = {
        BIG: np.random.default_rng(0).bytes(64 << 10),
        "state/_METADATA": b'{"tree": {}}',
        "meta/metadata": b'{"step": 20}',
    }
    for name, data in files.items():
        os.makedirs(tmp_path / os.path.dirname(name), exist_ok=True)
        (tmp_path / name).write_bytes(data)
    manifest.write(str(tmp_path))
    (tmp_path / "_CHECKPOINT_METADATA").write_text("{}")  # Orbax writes these after it
    (tmp_path / "commit_success.txt").write_text("done")
    return str(tmp_path)


def _append(path):
    with open(path, "a") as f:
        f.write("x")


DAMAGE = {  # name -> (damage(step_dir), the verdict's detail)
    "byte_flipped": (
        lambda d: flip_middle_byte(os.path.join(d, BIG)),
        f"{BIG} does not match its checksum",
    ),
    "truncated": (
        lambda d: os.truncate(os.path.join(d, BIG), 1000),
        f"{BIG} has 1000 bytes, 65536 when saved",
    ),
    "deleted": (lambda d: os.remove(os.path.join(d, BIG)), f"{BIG} is missing"),
    "two_files": (
        lambda d: [flip_middle_byte(os.path.join(d, n)) for n in ("meta/metadata", BIG)],
        "meta/metadata does not match its checksum (and 1 more files)",
    ),
    "manifest_checksum_changed": (
        change_recorded_checksum,
        "checksums.json does not match its own checksum",
    ),
    "manifest_garbled": (
        lambda d: _append(os.path.join(d, manifest.MANIFEST)),
        "checksums.json is not a valid manifest",
    ),
}


def test_an_intact_step_verifies_and_orbaxs_late_files_are_not_covered(step_dir):
    with open(os.path.join(step_dir, manifest.MANIFEST)) as f:
        listed = json.load(f)["files"]
    assert sorted(listed) == sorted([BIG, "meta/metadata", "state/_METADATA"])
    _append(os.path.join(step_dir, "_CHECKPOINT_METADATA"))  # Orbax rewrites it at commit
    assert manifest.verify(step_dir) == manifest.Verdict(manifest.OK)


@pytest.mark.parametrize("damage", DAMAGE)
def test_planted_damage_is_named(step_dir, damage):
    plant, detail = DAMAGE[damage]
    plant(step_dir)
    verdict = manifest.verify(step_dir)
    assert verdict == manifest.Verdict(manifest.DAMAGED, detail)
    assert str(verdict) == f"damaged ({detail})"


def test_a_step_without_manifest_has_nothing_to_check(step_dir):
    os.remove(os.path.join(step_dir, manifest.MANIFEST))
    assert manifest.verify(step_dir).status == manifest.NO_MANIFEST


# -------------------------------------------------------- Checkpointer saves


def toy_state():
    import jax.numpy as jnp

    weights = jnp.arange(128 * 128, dtype=jnp.float32).reshape(128, 128) / 1000
    return {"step": jnp.int32(1), "params": {"w": weights, "b": jnp.ones((128,))}}


def save_steps(workdir, steps=(10, 20)) -> Checkpointer:
    checkpoints = Checkpointer(str(workdir), keep=len(steps))
    for step in steps:
        checkpoints.save(step, toy_state(), {"position": step}, {"step": step}, None)
    checkpoints.wait()
    return checkpoints


def largest_array_file(workdir, step: int) -> str:
    """Checkpoint `step`'s largest OCDBT data file."""
    root = os.path.join(str(workdir), "checkpoints", str(step), "state")
    files = [
        os.path.join(r, f)
        for r, _, names in os.walk(root)
        for f in names
        if os.path.basename(r) == "d"
    ]
    return max(files, key=os.path.getsize)


def abstract_toy_state():
    import jax

    return jax.eval_shape(toy_state)


def test_the_manifest_is_written_in_the_save_thread_before_the_commit(tmp_path, monkeypatch):
    """Orbax's save thread writes it into the step's temporary directory, whose rename
    commits the step: the final directory does not exist yet when it is written."""
    calls = []
    write = manifest.write

    def spy(step_dir):
        final = step_dir.removesuffix(".orbax-checkpoint-tmp")
        calls.append((os.path.basename(step_dir), threading.current_thread().name, final))
        assert not os.path.exists(final), "the step was committed before its manifest"
        write(step_dir)

    monkeypatch.setattr(manifest, "write", spy)
    checkpoints = save_steps(tmp_path)
    assert [(name, thread) for name, thread, _ in calls] == [
        ("10.orbax-checkpoint-tmp", "async_save"),
        ("20.orbax-checkpoint-tmp", "async_save"),
    ]
    assert [str(checkpoints.verify(s)) for s in (10, 20)] == ["OK", "OK"]
    checkpoints.close()


def test_a_flipped_byte_stops_restores_naming_step_and_file(tmp_path):
    """Restoring the whole state or the parameters alone (eval, decode, averaging,
    ensembles, export) raises one UnreadableCheckpoint naming the step and the file; the
    other checkpoint restores."""
    save_steps(tmp_path).close()
    path = largest_array_file(tmp_path, 20)
    flip_middle_byte(path)
    name = os.path.relpath(path, os.path.join(str(tmp_path), "checkpoints", "20"))
    reader = Checkpointer(str(tmp_path), read_only=True)
    abstract = abstract_toy_state()
    for restore in (
        lambda: reader.restore(20, abstract),
        lambda: reader.restore_params(20, abstract["params"]),
    ):
        with pytest.raises(UnreadableCheckpoint) as caught:
            restore()
        assert str(caught.value) == (
            f"checkpoint 20 in {reader.directory} is unreadable ({name} does not match its "
            "checksum); pick another with --checkpoint=STEP, one of [10]"
        )
    params, _ = reader.restore_params(10, abstract["params"])
    np.testing.assert_array_equal(params["w"], toy_state()["params"]["w"])
    reader.close()


def test_a_missing_or_damaged_manifest_is_damage(tmp_path):
    """A checkpoint whose metadata says it was saved with a manifest but has none is
    damaged, not taken for one saved before manifests; a manifest changed is damaged too."""
    save_steps(tmp_path).close()
    steps_dir = os.path.join(str(tmp_path), "checkpoints")
    os.remove(os.path.join(steps_dir, "10", manifest.MANIFEST))
    change_recorded_checksum(os.path.join(steps_dir, "20"))
    reader = Checkpointer(str(tmp_path), read_only=True)
    assert str(reader.verify(10)) == "damaged (checksums.json is missing)"
    assert str(reader.verify(20)) == "damaged (checksums.json does not match its own checksum)"
    with pytest.raises(UnreadableCheckpoint, match=r"checkpoint 10 .*checksums.json is missing"):
        reader.restore(10, abstract_toy_state())
    reader.close()


def test_a_checkpoint_saved_before_manifests_restores_with_one_note(tmp_path, capsys):
    save_steps(tmp_path).close()
    for step in (10, 20):
        make_pre_manifest(os.path.join(str(tmp_path), "checkpoints", str(step)))
    reader = Checkpointer(str(tmp_path), read_only=True)
    assert reader.verify(20).status == manifest.NO_MANIFEST
    for step in (10, 20):  # averaging two of them notes it once
        params, _ = reader.restore_params(step, abstract_toy_state()["params"])
        np.testing.assert_array_equal(params["w"], toy_state()["params"]["w"])
    reader.close()
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: checkpoint 10 in {reader.directory} was saved before checksums were "
        "recorded; its files are restored without a check"
    ]


# ------------------------------------------------------- the non-finite-loss message


def non_finite_message(checkpoints, norm_position: str) -> str:
    from transformer.training import loop

    run = types.SimpleNamespace(
        checkpoints=checkpoints, model_cfg=types.SimpleNamespace(norm_position=norm_position)
    )
    with pytest.raises(loop.NonFiniteLoss) as caught:
        loop._check_finite((21, {"loss": np.float32("nan")}), run)
    return str(caught.value)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_the_non_finite_loss_message_suggests_pre_ln_to_post_ln_runs_only(tmp_path, norm_position):
    checkpoints = save_steps(tmp_path)
    message = non_finite_message(checkpoints, norm_position)
    checkpoints.close()
    remedies = {
        "pre": "lower train.learning_rate or add warmup",
        "post": "lower train.learning_rate, add warmup or use model.norm_position='pre'",
    }
    assert message == (
        f"non-finite loss (nan) at step 21; the last good checkpoint is step 20 in "
        f"{checkpoints.directory}; {remedies[norm_position]}, then rerun to resume"
    )


def test_the_non_finite_loss_message_calls_good_only_a_checkpoint_that_verifies(tmp_path):
    checkpoints = save_steps(tmp_path)
    path = largest_array_file(tmp_path, 20)
    flip_middle_byte(path)
    name = os.path.relpath(path, os.path.join(checkpoints.directory, "20"))
    assert (
        f"; the last good checkpoint is step 10 in {checkpoints.directory}; the newer step 20 "
        f"is damaged ({name} does not match its checksum); "
    ) in non_finite_message(checkpoints, "pre")
    flip_middle_byte(largest_array_file(tmp_path, 10))
    assert f"; no checkpoint in {checkpoints.directory} is intact: step 20 is damaged (" in (
        non_finite_message(checkpoints, "pre")
    )
    make_pre_manifest(os.path.join(checkpoints.directory, "20"))
    assert f"; the last checkpoint is step 20 in {checkpoints.directory}, saved before " in (
        non_finite_message(checkpoints, "pre")
    )
    checkpoints.close()


# ------------------------------------------------------------------ the benchmark


def test_the_cost_benchmark_dry_run(capsys):
    from benchmarks import checkpoint_checksums

    assert checkpoint_checksums.main(["--dry_run", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    figures = {r["figure"] for r in records}
    assert figures == {
        "crc32_throughput",
        "sha256_throughput",
        "blake2b_throughput",
        "save_blocking_s",
        "save_s",
        "manifest_write_s",
        "restore_s",
        "manifest_verify_s",
        "checkpoint_mb",
    }
    assert all(r["value"] > 0 for r in records), records


def test_an_average_is_offered_only_windows_that_leave_the_damaged_step_out():
    """Windows of 2 over checkpoints 10..40 with 20 damaged: those ending at 20 and 30 hold
    it, the one ending at 10 is short, so only 40 is offered; windows of 4 hold it always."""
    from transformer.evaluation.restore import _windows_without

    steps = [10, 20, 30, 40]
    assert _windows_without(steps, 20, 2) == [40]
    assert _windows_without(steps, 20, 1) == [10, 30, 40]
    assert _windows_without(steps, 20, 4) == []

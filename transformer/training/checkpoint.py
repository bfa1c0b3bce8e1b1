"""Orbax checkpoints of the train state, data-iterator state and run metadata.

Saves are asynchronous and atomic: Orbax writes into a temporary directory and renames it
when complete, so a save killed half-way never spoils an earlier checkpoint. Retention keeps
the `keep` most recent checkpoints plus the best one by its validation score (BLEU, or minus
the loss when early stopping ranks by loss: training/early_stopping.py), which is also what
`best` resolves to.

Every save writes a manifest of its files' sizes and checksums into the step before Orbax
commits it (training/checkpoint_manifest.py, from Orbax's save thread), and every restore
checks it first. A complete checkpoint whose files are damaged later (truncated, deleted,
garbled or with bytes flipped on disk) raises `UnreadableCheckpoint` naming the file; train.py
then resumes from an older one and `set_aside` renames the damaged one to `<step>.unreadable`.
A checkpoint saved before manifests were written restores unchecked, with a note. In a
multi-process run the processes pick that older one together (`agreed_steps`,
`agreed_damage`: training/agreement.py), so damage only one process sees moves them all.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import checkpoint_managers as policies
from orbax.checkpoint.path import atomicity_types

from transformer.common.errors import UserError
from transformer.training import agreement
from transformer.training import checkpoint_manifest as manifest

UNREADABLE_SUFFIX = ".unreadable"  # a damaged checkpoint set aside: <step>.unreadable
# Key of the run metadata saved with each checkpoint that says it was saved with a manifest:
# a checkpoint saying so whose manifest is gone is damaged, not one from before manifests.
MANIFEST_KEY = "manifest"


class UnreadableCheckpoint(UserError):
    """A complete (listed) checkpoint whose files cannot be read or fail their manifest:
    truncated, deleted, garbled or changed after its save. `step` names it, `reason` says
    which file and how; `pick` is the flag that picks another of `others`. In a multi-process
    run's agreed verdict, `process` is the process that found the damage."""

    def __init__(
        self,
        directory: str,
        step: int,
        reason: str,
        others: list[int],
        pick: str = "--checkpoint=STEP",
        process: int | None = None,
    ):
        self.directory, self.step, self.reason, self.others = directory, step, reason, others
        self.process = process
        choice = (
            f"pick another with {pick}, one of {others}"
            if others
            else "it is the only checkpoint: restore its files from a backup or retrain"
        )
        super().__init__(f"checkpoint {step} in {directory} is unreadable ({reason}); {choice}")


class Checkpointer:
    def __init__(self, workdir: str, *, keep: int = 3, read_only: bool = False):
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self._saving = None  # step of the asynchronous save in flight
        self._checked: set[int] = set()  # steps whose files were checked by this instance
        self._noted_unchecked = False  # the note on a checkpoint without manifest was printed
        if read_only and not os.path.isdir(self.directory):
            raise UserError(
                f"no checkpoints in {self.directory}; train first with "
                f"python train.py --config CONFIG --workdir {workdir}"
            )
        policy = policies.AnyPreservationPolicy(
            [
                policies.LatestN(n=max(keep, 1)),
                policies.BestN(get_metric_fn=_score, n=1, keep_checkpoints_without_metrics=False),
            ]
        )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=policy,
            best_fn=_score,  # what best_step() ranks by (the policy alone does not set it)
            best_mode="max",
            create=not read_only,
            enable_async_checkpointing=True,
            read_only=read_only,
            # Runs in the save thread after every file is written, before the step's commit.
            async_options=ocp.AsyncOptions(post_finalization_callback=self._write_manifest),
        )
        try:
            self.manager = ocp.CheckpointManager(
                self.directory, options=options, item_names=("state", "data", "meta")
            )
        except (PermissionError, OSError) as e:
            raise UserError(
                f"cannot use checkpoint directory {self.directory} ({e.strerror or e}); "
                f"choose a writable --workdir"
            ) from None

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def best_step(self) -> int | None:
        return self.manager.best_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def agreed_steps(self) -> list[int]:
        """all_steps() as process 0 lists them, on every process: the candidates every process
        of a run tries, in the same order, whatever its own listing shows (collective)."""
        return agreement.process_zeros(self.all_steps())

    def agreed_damage(self, step: int) -> UnreadableCheckpoint | None:
        """Checkpoint `step`'s files checked by every process against the manifest, and the
        verdicts gathered (collective): the damage the lowest-numbered process that found any
        found, the same on every process, or None when they all found the files intact.
        Nothing is restored before all agree: Orbax's restore ends in a barrier that a
        process failing alone would never reach."""
        import jax

        found = agreement.first_report(self._local_damage(step))
        if found is None:
            return None
        process, reason = found
        others = [s for s in self.all_steps() if s != step]
        several = jax.process_count() > 1
        return UnreadableCheckpoint(
            self.directory, step, reason, others, process=process if several else None
        )

    def _local_damage(self, step: int) -> str | None:
        """Why this process cannot use checkpoint `step` (None: its files are intact)."""
        if not os.path.isdir(self._step_dir(step)):  # listed by process 0 but not seen here
            return f"{self._step_dir(step)} is missing"
        try:
            self._check_files(step)
        except UnreadableCheckpoint as e:
            return e.reason
        return None

    def save(self, step: int, state: Any, data_state: dict, meta: dict, score: float | None):
        """score: the step's validation score (higher is better; None: not validated)."""
        metrics = None if score is None else {"score": float(score)}
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data_state),
            meta=ocp.args.JsonSave({**meta, MANIFEST_KEY: manifest.MANIFEST}),
        )
        # A failed asynchronous save surfaces only when the next save or wait() joins it;
        # join it here first so the error names the step whose save failed.
        self.wait()
        self._saving = step  # before the save thread starts: _write_manifest reads it
        self._checked.discard(step)
        try:
            self.manager.save(step, args=args, metrics=metrics, force=True)
        except _SAVE_ERRORS as e:
            raise UserError(_save_error(self.directory, step, e)) from None

    def _write_manifest(self) -> None:
        """The manifest of the step being saved, written into its temporary directory (Orbax's
        save thread calls this on the primary process once every process's files are written
        and finalized, just before the rename that commits the step)."""
        final = self._step_dir(self._saving)
        pending = final + atomicity_types.TMP_DIR_SUFFIX
        # Where Orbax commits with a marker file instead of a rename, it writes in place.
        manifest.write(pending if os.path.isdir(pending) else final)

    def wait(self):
        """Blocks until the pending asynchronous save is complete (errors surface here)."""
        try:
            self.manager.wait_until_finished()
        except _SAVE_ERRORS as e:
            raise UserError(_save_error(self.directory, self._saving, e)) from None
        self._saving = None

    def resolve_step(self, which: str | int | None) -> int:
        """'latest' | 'best' | a step number -> an existing step, or a one-line error."""
        steps = self.all_steps()
        if not steps:
            raise UserError(f"no checkpoint in {self.directory}; train first (train.py)")
        if which in (None, "latest"):
            return steps[-1]
        if which == "best":
            best = self.best_step()
            if best is None:
                raise UserError(
                    f"no checkpoint in {self.directory} has a validation score yet; "
                    f"use --checkpoint=latest"
                )
            return best
        try:
            step = int(which)
        except ValueError:
            raise UserError(f"--checkpoint={which!r}: use latest, best or a step number") from None
        if step not in steps:
            raise UserError(f"no checkpoint at step {step} in {self.directory}; have {steps}")
        return step

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict, dict]:
        """Restores (state, data_state, meta) at `step` into the structure of abstract_state."""
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(_with_default_sharding(abstract_state)),
            data=ocp.args.JsonRestore(),
            meta=ocp.args.JsonRestore(),
        )
        restored = self._restore_checked(step, abstract_state, args)
        return restored.state, restored.data, restored.meta

    def meta(self, step: int) -> dict:
        """The run metadata of checkpoint `step` alone (no array is read, but the files are
        checked against the manifest first, once per step: a restore of the step follows)."""
        self._check_files(step)
        return self._read_meta(step)

    def _read_meta(self, step: int) -> dict:
        args = ocp.args.Composite(meta=ocp.args.JsonRestore())
        try:
            return self.manager.restore(step, args=args).meta or {}
        except Exception as e:  # noqa: BLE001 - a missing or garbled JSON file
            raise self._unreadable(step, e) from None

    def verify(self, step: int) -> manifest.Verdict:
        """Checkpoint `step`'s files against its manifest: OK, DAMAGED naming the file, or
        NO_MANIFEST for a checkpoint saved before manifests were written."""
        verdict = manifest.verify(self._step_dir(step))
        if verdict.status != manifest.NO_MANIFEST:
            return verdict
        try:
            saved_with_one = MANIFEST_KEY in self._read_meta(step)
        except UnreadableCheckpoint as e:  # no manifest, and the metadata cannot tell
            return manifest.Verdict(manifest.DAMAGED, e.reason)
        return manifest.damaged_manifest("is missing") if saved_with_one else verdict

    def _check_files(self, step: int) -> None:
        """Raises UnreadableCheckpoint naming the file when checkpoint `step` fails its
        manifest; a checkpoint without one passes, noted once per Checkpointer."""
        if step in self._checked:
            return
        verdict = self.verify(step)
        if verdict.status == manifest.DAMAGED:
            others = [s for s in self.all_steps() if s != step]
            raise UnreadableCheckpoint(self.directory, step, verdict.detail, others)
        if verdict.status == manifest.NO_MANIFEST:
            self._note_unchecked(step)
        self._checked.add(step)

    def _note_unchecked(self, step: int) -> None:
        import jax

        if self._noted_unchecked or jax.process_index() != 0:
            return
        self._noted_unchecked = True
        print(
            f"note: checkpoint {step} in {self.directory} was saved before checksums were "
            "recorded; its files are restored without a check",
            file=sys.stderr,
            flush=True,
        )

    def restore_params(self, step: int, abstract_params: Any) -> tuple[Any, dict]:
        """Restores only the parameters at `step` (and the run metadata): a partial restore
        that never reads the optimizer state, about twice the parameters' size under Adam
        (the manifest check hashes it with the rest: array files mix both). Returns (params,
        meta)."""
        target = {"params": _with_default_sharding(abstract_params)}
        args = ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                item=target,
                restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True,
            ),
            meta=ocp.args.JsonRestore(),
        )
        restored = self._restore_checked(step, target, args)
        return restored.state["params"], restored.meta

    def _restore_checked(self, step: int, abstract_state: Any, args):
        """manager.restore(step, args) once the checkpoint's files match its manifest and its
        metadata lists exactly the arrays and shapes abstract_state asks for. A mismatch of
        shapes is one UserError naming the arrays (the config is at fault); a file that fails
        the manifest, or a failure to read then, is an UnreadableCheckpoint (the files are)."""
        # The files are checked first, so damage is named by its file even where the shapes
        # or reads would fail too. Shapes are compared from the metadata before reading: a
        # restore that fails on them leaves Orbax's asyncio reads failing in the background,
        # which print tracebacks at exit.
        self._check_files(step)
        _drop_orphaned_read_errors()  # a damaged checkpoint leaves such reads too
        what = _shape_differences(self._stored_shapes(step), abstract_state)
        if what:
            self.close()
            raise UserError(
                f"checkpoint {self.directory}/{step} does not match the model config ({what}); "
                "use the config the run was trained with"
            )
        try:
            return self.manager.restore(step, args=args)
        except Exception as e:  # noqa: BLE001 - every array asked for is listed: reading failed
            raise self._unreadable(step, e) from None

    def _stored_shapes(self, step: int) -> dict[str, tuple]:
        """{array name: shape} from checkpoint `step`'s metadata; an UnreadableCheckpoint when
        the metadata is missing or garbled."""
        import jax

        state_dir = epath.Path(self.directory) / str(step) / "state"
        try:
            # The item's handler reads only the item's own metadata; a Checkpointer would also
            # look for step-level metadata in `state_dir` and log a warning that it is absent.
            metadata = ocp.StandardCheckpointHandler().metadata(state_dir)
        except Exception as e:  # noqa: BLE001 - missing, truncated or garbled metadata files
            raise self._unreadable(step, e) from None
        leaves = jax.tree.leaves(getattr(metadata, "tree", None))
        return {m.name: tuple(m.shape) for m in leaves if hasattr(m, "name")}

    def _step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def _unreadable(self, step: int, e: Exception) -> UnreadableCheckpoint:
        others = [s for s in self.all_steps() if s != step]
        return UnreadableCheckpoint(self.directory, step, _read_reason(e), others)

    def set_aside(self, step: int) -> str | None:
        """Renames unreadable checkpoint `step` to `<step>.unreadable` (`.unreadable.2`, ...
        when taken): kept for inspection under a name Orbax does not list, so it is neither
        restored, `latest`, counted by retention, nor in the way of a new save of `step`.
        Returns the new path (on process 0, which renames; None on the others)."""
        import jax

        target = None
        self._checked.discard(step)
        if jax.process_index() == 0:
            source = self._step_dir(step)
            target = _unused_path(source + UNREADABLE_SUFFIX)
            try:
                os.rename(source, target)
            except OSError as e:
                raise UserError(
                    f"cannot move unreadable checkpoint {source} aside ({e.strerror}); move or "
                    f"delete it yourself, then rerun"
                ) from None
        if jax.process_count() > 1:  # every process lists the steps only after the rename
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
        self.manager.reload()
        return target

    def close(self):
        self.manager.close()


def _score(metrics: dict) -> float:
    """A checkpoint's ranking score; checkpoints written before scores were recorded carry
    their validation BLEU."""
    return metrics["score"] if "score" in metrics else metrics["bleu"]


def _leaf_name(path) -> str:
    """'params.encoder_layers.0.ff.wi.kernel.value': Orbax's name for a pytree leaf."""
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    return ".".join(parts)


def _shape_differences(stored: dict[str, tuple], abstract_state: Any) -> str:
    """How the stored arrays (name -> shape) differ from abstract_state's under the same
    top-level keys, as one short phrase ('' when they are the same arrays and shapes)."""
    import jax

    wanted = {
        _leaf_name(path): tuple(leaf.shape)
        for path, leaf in jax.tree_util.tree_leaves_with_path(abstract_state)
    }
    items = {name.split(".")[0] for name in wanted}  # a partial restore asks for "params" only
    names = sorted(n for n in wanted.keys() | stored.keys() if n.split(".")[0] in items)
    # The optimizer's moments mirror the parameters: name the parameters when they differ.
    params = [n for n in names if n.startswith("params.")]
    return _describe_differences(params, stored, wanted) or _describe_differences(
        names, stored, wanted
    )


def _describe_differences(names: list[str], stored: dict, wanted: dict, limit: int = 3) -> str:
    differ = [n for n in names if n in wanted and n in stored and wanted[n] != stored[n]]
    parts = [
        f"{n.removeprefix('params.')}: checkpoint {stored[n]}, config {wanted[n]}"
        for n in differ[:limit]
    ]
    if len(differ) > limit:
        parts.append(f"{len(differ) - limit} more shapes differ")
    only_stored = [n for n in names if n not in wanted]
    only_wanted = [n for n in names if n not in stored]
    if only_stored:
        parts.append(f"{len(only_stored)} arrays only in the checkpoint, e.g. {only_stored[0]}")
    if only_wanted:
        parts.append(f"{len(only_wanted)} arrays only in the config, e.g. {only_wanted[0]}")
    return "; ".join(parts)


def _read_reason(e: BaseException) -> str:
    """'OUT_OF_RANGE reading params.x.kernel.value', 'Expecting value: ...': why reading a
    checkpoint failed, from the innermost error (Orbax wraps TensorStore's in its own)."""
    while e.__cause__ is not None:
        e = e.__cause__
    reason = _io_reason(e)
    array = re.search(r'(?:reading|Metadata at) "([^"/]+)', str(e))
    return (
        f"{reason} reading {array.group(1)}" if array and array.group(1) not in reason else reason
    )


def _drop_orphaned_read_errors() -> None:
    """Keeps the leftovers of a failed restore off stderr (installed before restoring).

    When one read of a checkpoint fails, Orbax closes its asyncio loop while TensorStore still
    completes the other reads in its own threads: each then fails into the closed loop, and
    Python reports it as an 'unraisable' exception, the read's own error when its coroutine is
    collected, and asyncio logs 'exception was never retrieved', each with a traceback, after
    the one line that already said the checkpoint is unreadable (or in the middle of the
    training run that went on from an older one). Only these errors are dropped.
    """
    previous = sys.unraisablehook
    if getattr(previous, "drops_orphaned_reads", False):
        return

    def hook(unraisable):
        if not _is_orphaned_read_error(unraisable.exc_value):
            previous(unraisable)

    hook.drops_orphaned_reads = True
    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_not_an_orphaned_read)


def _not_an_orphaned_read(record: logging.LogRecord) -> bool:
    return not (record.exc_info and _is_orphaned_read_error(record.exc_info[1]))


# How TensorStore words a failed read of a checkpoint's array: the failing chunk, or the
# OCDBT database file it lies in ('OUT_OF_RANGE: Error reading "params..." in OCDBT
# database at local file ...' when the file is cut short).
_READ_ERROR_MARKS = ("Encountered error while reading array index", "in OCDBT database at ")


def _is_orphaned_read_error(e: BaseException | None) -> bool:
    text = str(e)
    closed_loop = isinstance(e, RuntimeError) and text == "Event loop is closed"
    return closed_loop or any(mark in text for mark in _READ_ERROR_MARKS)


def _unused_path(path: str) -> str:
    """path, or path.2, path.3, ...: the first that does not exist."""
    candidate, n = path, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{path}.{n}"
    return candidate


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


# Orbax writes through TensorStore, whose I/O errors are ValueErrors carrying an absl status
# and the OS error code ('RESOURCE_EXHAUSTED: ... No space left on device [os_error_code=28]'),
# not OSErrors; both must end as the one-line UserError, not a traceback.
_SAVE_ERRORS = (OSError, ValueError)


def _save_error(directory: str, step, e: Exception) -> str:
    reason = _io_reason(e)
    return (
        f"saving checkpoint {step} in {directory} failed ({reason}); earlier checkpoints are "
        f"intact; free disk space or choose a writable --workdir, then rerun to resume"
    )


def _io_reason(e: Exception) -> str:
    """'No space left on device', 'Permission denied', ... from an OSError or a TensorStore
    error; otherwise the status code or first line of the message."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = " ".join(str(e).split())
    code = re.search(r"os_error_code='?(\d+)", text)
    if code:
        return os.strerror(int(code.group(1)))
    status = re.match(r"([A-Z_]{4,}):", text)
    return status.group(1) if status else _first_line(e)


def _with_default_sharding(tree: Any) -> Any:
    """Gives shape-only leaves (jax.eval_shape output) this process's first device.

    Without a sharding Orbax restores with the sharding saved in the checkpoint, which names
    the devices of the run that wrote it: a checkpoint written by several processes or devices
    then fails to load elsewhere ("Topology mismatch"), e.g. in eval.py on one machine.
    """
    import jax

    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def leaf(x):
        if isinstance(x, jax.ShapeDtypeStruct) and x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device)
        return x

    return jax.tree.map(leaf, tree)

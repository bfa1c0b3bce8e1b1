"""Restoring a trained run: the start of eval.py and decode.py.

A run directory holds everything needed: `config.json` (the resolved config), `vocab/`
(SentencePiece models) and `checkpoints/` (Orbax). Parameters come from one checkpoint or
the average of the last N (checkpoint averaging, as in the 2017 paper); only the parameters
are read, never the optimizer state.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx

from transformer.common.errors import UserError
from transformer.data import make_datasets
from transformer.inference.translator import Translator
from transformer.training import run_config
from transformer.training.checkpoint import Checkpointer, UnreadableCheckpoint
from transformer.training.run_state import build_model, check_tokenizers


@dataclasses.dataclass
class RestoredRun:
    workdir: str
    config: object
    model_cfg: object
    graphdef: object
    params: object
    step: int
    averaged_steps: list[int]
    data: object
    translator: Translator
    members: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # (workdir, step)


def restore_run(
    workdir: str, *, checkpoint: str = "auto", average_last: int = 1, overrides=()
) -> RestoredRun:
    """Loads config, tokenizers and (averaged) parameters of a trained run. checkpoint:
    latest, best, a step, or auto: best when the run stops early, else latest."""
    config = run_config.load(workdir)
    run_config.apply_overrides(config, list(overrides))
    settings = run_config.validate(config)
    model_cfg = settings.model
    checkpoints = Checkpointer(workdir, read_only=True)
    step = checkpoints.resolve_step(_default_checkpoint(config, checkpoint))
    if average_last < 1:
        raise UserError(f"--average_last={average_last} must be >= 1")
    available = [s for s in checkpoints.all_steps() if s <= step]
    steps = available[-average_last:]
    if len(steps) < average_last:
        raise UserError(
            f"--average_last={average_last} but only {len(available)} checkpoint(s) up to step "
            f"{step} exist ({available}); lower --average_last"
        )
    # Graph structure and parameter shapes only: building the model abstractly allocates
    # nothing, and no optimizer is needed (its state is never read).
    graphdef, abstract_params = nnx.split(
        nnx.eval_shape(lambda: build_model(model_cfg, 0)), nnx.Param
    )
    params, metas = _average_params(checkpoints, steps, abstract_params)
    checkpoints.close()
    data = make_datasets(config, workdir)
    pieces = max(data.source_tokenizer.vocab_size, data.target_tokenizer.vocab_size)
    if pieces > model_cfg.vocab_size:
        raise UserError(
            f"the vocabulary in {workdir}/vocab has {pieces} pieces but the checkpoint's "
            f"model.vocab_size={model_cfg.vocab_size}; the tokenizer does not belong to this "
            "run: restore the run's vocab/ directory"
        )
    for s, meta in metas.items():
        check_tokenizers(meta, data, f"{workdir}/checkpoints/{s}")
    translator = Translator(
        graphdef, model_cfg, settings.decode, data.source_tokenizer, data.target_tokenizer
    )
    return RestoredRun(workdir, config, model_cfg, graphdef, params, step, steps, data, translator)


def _default_checkpoint(config, which: str) -> str:
    """'auto': the best checkpoint of a run trained with early stopping (the one it stopped
    for), else the latest."""
    if which != "auto":
        return which
    return "best" if config.train.get("early_stopping_patience", 0) > 0 else "latest"


def _restore_member(checkpoints: Checkpointer, steps: list[int], step: int, abstract_params):
    """One checkpoint of an average; a damaged one names the newest steps whose windows of
    len(steps) leave it out (a window of one is an ordinary pick of another checkpoint)."""
    try:
        return checkpoints.restore_params(step, abstract_params)
    except UnreadableCheckpoint as e:
        if len(steps) == 1:
            raise
        clear = _windows_without(checkpoints.all_steps(), e.step, len(steps))
        if not clear:
            raise UserError(
                f"checkpoint {e.step} in {e.directory} is unreadable ({e.reason}); no "
                f"{len(steps)} checkpoints in a row leave it out: lower --average_last"
            ) from None
        pick = f"--checkpoint=STEP as the newest of the {len(steps)} averaged"
        raise UnreadableCheckpoint(e.directory, e.step, e.reason, clear, pick=pick) from None


def _windows_without(all_steps: list[int], damaged: int, size: int) -> list[int]:
    """The steps t whose averaging window (the `size` checkpoints up to t) is full and leaves
    out `damaged`."""
    windows = {t: [s for s in all_steps if s <= t][-size:] for t in all_steps}
    return [t for t, w in windows.items() if len(w) == size and damaged not in w]


def _average_params(checkpoints: Checkpointer, steps: list[int], abstract_params):
    """The mean of the parameters of `steps`, restored one checkpoint at a time into one
    float64 running sum; returns (float32 params, {step: checkpoint metadata})."""
    total, metas = None, {}
    for step in steps:
        params, metas[step] = _restore_member(checkpoints, steps, step, abstract_params)
        params = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
        total = params if total is None else jax.tree.map(np.add, total, params)
        del params
    return jax.tree.map(lambda x: (x / len(steps)).astype(np.float32), total), metas

"""The training loop: data, model, compiled step, periodic evaluation, checkpoints, logs.

`train_and_evaluate(config, workdir)` is the whole of `train.py`, in named stages: prepare
the workdir, load the data (and save the config with the vocabulary size it resolves),
restore or initialise the train state, compile the steps, then the loop itself with its
periodic evaluation and checkpoints. Rerunning it on the same workdir resumes exactly from the
latest readable checkpoint: step, optimizer state, LR schedule position, RNG and data-iterator
position. SIGTERM / SIGINT checkpoint and stop at the next step.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.common.fileio import make_workdir
from transformer.data import DataBundle, load_split, make_datasets
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.config import ModelConfig
from transformer.model.flops import forward_flops
from transformer.model.normalization import PLACEMENTS
from transformer.model.transformer import count_params
from transformer.scoring import metrics as metrics_lib
from transformer.training import checkpoint_manifest, run_config
from transformer.training.checkpoint import UNREADABLE_SUFFIX, Checkpointer, UnreadableCheckpoint
from transformer.training.early_stopping import STOPPED_MESSAGE, EarlyStopping
from transformer.training.logger import MetricsLogger
from transformer.training.optim import make_optimizer
from transformer.training.parallel import Parallel
from transformer.training.run_state import (
    WEIGHTS_ONLY,
    build_train_model,
    check_tokenizers,
    state_dict,
    tokenizer_fingerprints,
)
from transformer.training.steps import TrainState, init_state, make_eval_step, make_train_step


class NonFiniteLoss(UserError):
    pass


@dataclasses.dataclass
class TrainResult:
    step: int
    last_loss: float | None
    stopped_by_signal: bool
    valid: dict | None
    stopped_early: bool = False


@dataclasses.dataclass
class _Run:
    """What the stages after loading the data share: the run's config, data and writers."""

    config: Any  # the validated ml_collections.ConfigDict
    workdir: str
    model_cfg: ModelConfig  # with the resolved vocab_size
    decode: DecodeSettings  # for validation BLEU
    parallel: Parallel
    data: DataBundle
    checkpoints: Checkpointer
    logger: MetricsLogger
    train_iter: Any  # grain.DatasetIterator: its get_state/set_state go into checkpoints
    stopping: EarlyStopping  # its counter and best value go into checkpoints too


@dataclasses.dataclass
class _Steps:
    """The compiled steps on global batches, and the translator for validation BLEU."""

    train_step: Callable  # (state, batch, rng) -> (state, metrics)
    eval_step: Callable  # (params, batch) -> {"nll_sum", "tokens"}
    translator: Translator
    base_rng: jax.Array  # the train step folds in the step number


class _StopFlag:
    """SIGTERM / SIGINT ask the loop to checkpoint and exit cleanly at the next step."""

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, _frame):
        self.signal = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def train_and_evaluate(config, workdir: str) -> TrainResult:
    """Trains the run in `workdir` up to train.num_steps, resuming from its latest checkpoint."""
    settings = run_config.validate(config)
    is_main = jax.process_index() == 0
    _prepare_workdir(config, workdir)
    t = config.train
    parallel = Parallel(t.parallelism, t.fsdp)
    data = _load_data(config, workdir, parallel, is_main)
    model_cfg = _save_config(config, workdir, settings.model, data, is_main)

    optimizer, schedule = make_optimizer(t)
    model = build_train_model(model_cfg, t)
    graphdef, state = init_state(model, optimizer)
    run = _Run(
        config,
        workdir,
        model_cfg,
        settings.decode,
        parallel,
        data,
        checkpoints=Checkpointer(workdir, keep=t.keep_checkpoints),
        logger=MetricsLogger(workdir, enabled=is_main, total_steps=t.num_steps),
        train_iter=data.train_iterator(),
        stopping=EarlyStopping.from_config(t),
    )
    state, start = _restore_or_init(run, model, state)
    del model
    if is_main:  # what this start runs: code, libraries, machine, data
        start_entry = provenance.entry(start, data.fingerprint(), jax.default_backend())
        provenance.record(workdir, start_entry)

    state = parallel.place_state(state)
    steps = _compile_steps(run, graphdef, optimizer, schedule, state)
    result = _train_loop(run, steps, state, start)
    run.checkpoints.wait()
    run.checkpoints.close()
    run.logger.close()
    return result


# -------------------------------------------------------------------- workdir and data


def _prepare_workdir(config, workdir: str) -> None:
    """`workdir` exists, is writable and holds no run of another model."""
    make_workdir(workdir)
    run_config.check_same_model(config, workdir)


def _load_data(config, workdir: str, parallel: Parallel, is_main: bool) -> DataBundle:
    if jax.process_count() == 1:
        return _make_datasets(config, workdir, parallel)
    # Process 0 prepares the workdir's shared files first (corpus, TFDS dataset, vocabulary,
    # token cache); the others wait, then read them. Concurrent TFDS preparation in one
    # directory races (FileExistsError when the second process renames its copy into place).
    from jax.experimental import multihost_utils

    data = None
    if is_main:
        data = _make_datasets(config, workdir, parallel)
        data.train_stats  # noqa: B018 - the train split (and TFDS build) loads lazily
    multihost_utils.sync_global_devices("transformer.training.loop: data prepared")
    if data is None:
        data = _make_datasets(config, workdir, parallel)
    return data


def _make_datasets(config, workdir: str, parallel: Parallel) -> DataBundle:
    return make_datasets(
        config,
        workdir,
        row_multiple=parallel.num_devices,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
    )


def _save_config(
    config, workdir: str, model_cfg: ModelConfig, data: DataBundle, is_main: bool
) -> ModelConfig:
    """Resolves the model's vocab_size from the tokenizers, checks the workdir's model again
    with it and saves config.json; returns the model config with that vocab_size."""
    # A missing validation split fails now, not at the first evaluation (reading it is cheap;
    # tokenizing waits for the evaluation).
    load_split(config.data, data.split_name("valid"), workdir)
    vocab_size = run_config.resolve_vocab_size(config, data.source_tokenizer, data.target_tokenizer)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=vocab_size)
    run_config.check_same_model(config, workdir)  # now with the resolved vocab_size too
    if is_main:
        run_config.save(config, workdir)
    return model_cfg


# ------------------------------------------------------------------------- train state


def _restore_or_init(run: _Run, model, state: TrainState) -> tuple[TrainState, int]:
    """(state, first step): the newest readable checkpoint's, or the fresh `state` from step
    0 when there is no checkpoint. Every process of a run tries the same steps (process 0's
    listing) and resumes from the same one."""
    steps = run.checkpoints.agreed_steps()
    if not steps:
        # Rows of a start killed before its first checkpoint: those steps run again.
        run.logger.truncate_after(0)
        _log_new_run(run, model)
        return state, 0
    return _restore_newest_readable(run, state, steps)


def _restore_newest_readable(run: _Run, state: TrainState, steps: list[int]):
    """(state, step) of the newest of `steps` whose files can be read. Newer ones that cannot
    (truncated, deleted or garbled after their save) are set aside with a warning each, so the
    run goes on from the older one and saves past them. None readable is an error, not a
    fresh start: that would hide the damage and train a second run into the same workdir.

    In a multi-process run the processes decide together: a step is skipped when any process
    finds its files damaged, so all resume from the same step, never from different ones."""
    skipped = []
    for step in reversed(steps):
        bad = run.checkpoints.agreed_damage(step)  # the same verdict on every process
        if bad is None:
            try:
                restored = _restore(run, state, step)
            except UnreadableCheckpoint as e:
                bad = _unreadable_after_check(e)
        if bad is not None:
            skipped.append(bad)
            continue
        for unreadable in skipped:
            _set_aside(run, unreadable, step)
        return restored, step
    first = skipped[0]
    raise UserError(
        f"every checkpoint in {run.checkpoints.directory} is unreadable (steps {steps}; step "
        f"{first.step}{_on_process(first)}: {first.reason}); nothing was changed: to train "
        f"from step 0 use a new --workdir (or delete {run.workdir}), or restore the files "
        "from a backup"
    )


def _unreadable_after_check(e: UnreadableCheckpoint) -> UnreadableCheckpoint:
    """A checkpoint whose files passed the check but whose restore failed (one saved before
    manifests were written, or a read error): in one process the next older one is tried;
    in several, this process alone knows, and the others already wait in the barrier that
    ends Orbax's restore, so it stops with one line."""
    if jax.process_count() == 1:
        return e
    raise UserError(
        f"checkpoint {e.step} in {e.directory} passed its check on every process but process "
        f"{jax.process_index()} could not read it ({e.reason}); move it aside (rename it to "
        f"{e.step}{UNREADABLE_SUFFIX}) or restore its files from a backup, then rerun"
    )


def _on_process(bad: UnreadableCheckpoint) -> str:
    """' on process 1' where a multi-process run's verdict names the process; else ''."""
    return "" if bad.process is None else f" on process {bad.process}"


def _set_aside(run: _Run, bad: UnreadableCheckpoint, resumed: int) -> None:
    """Renames unreadable checkpoint bad.step out of Orbax's sight; one warning line says so,
    and in a multi-process run which process found the damage."""
    moved = run.checkpoints.set_aside(bad.step)
    count = jax.process_count()
    who = "the run continues" if count == 1 else f"all {count} processes continue"
    run.logger.log_text(
        f"warning: checkpoint {bad.step} is unreadable{_on_process(bad)} ({bad.reason}), "
        f"moved to {moved}; {who} from step {resumed}",
        step=resumed,
        unreadable_step=bad.step,
    )


def _restore(run: _Run, state: TrainState, step: int) -> TrainState:
    """The train state and data-iterator position of checkpoint `step`; metrics.jsonl rows
    after it are dropped (they will be written again)."""
    if WEIGHTS_ONLY in run.checkpoints.meta(step):
        return _start_from_weights(run, state, step)
    target = state_dict(state)
    if run.parallel.kind == "mesh":
        # Restore straight into the training layout (each process reads its own shards).
        # Restoring into this process's single-device arrays and then moving them onto a
        # mesh that spans several processes fails: jax.device_put of committed arrays
        # across hosts is unsupported on CPU ("does not support cross-host transfers").
        target = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            target,
            run.parallel.state_shardings(target),
        )
    restored, data_state, meta = run.checkpoints.restore(step, target)
    check_tokenizers(meta, run.data, f"{run.workdir}/checkpoints/{step}")
    state = TrainState(**restored)
    run.train_iter.set_state(data_state)
    run.stopping.load(meta.get("early_stopping"))
    run.logger.truncate_after(step)
    run.logger.log_text(f"resumed from checkpoint at step {step}", step=step)
    return state


def _start_from_weights(run: _Run, state: TrainState, step: int) -> TrainState:
    """Checkpoint `step` holds parameters alone (run_state.WEIGHTS_ONLY: imported weights):
    training goes on from them with `state`'s fresh optimizer state and data stream."""
    # A reader of its own: restoring the parameters alone through run.checkpoints would bind
    # its "state" item to another Orbax handler than its saves use, and they would fail.
    reader = Checkpointer(run.workdir, read_only=True)
    params, meta = reader.restore_params(step, state.params)
    reader.close()
    check_tokenizers(meta, run.data, f"{run.workdir}/checkpoints/{step}")
    run.logger.truncate_after(step)
    run.logger.log_text(
        f"training from the parameters of checkpoint {step} ({meta[WEIGHTS_ONLY]}) with a "
        "fresh optimizer state and data stream",
        step=step,
    )
    return state._replace(step=jax.numpy.asarray(step, state.step.dtype), params=params)


def _log_new_run(run: _Run, model) -> None:
    """The model's size and cost, and how much of the training data the length limits kept."""
    n_params = count_params(model)
    stats = run.data.train_stats
    shape = run.data.layout.shapes()[-1]  # ((rows, source len), (rows, target len))
    flops_per_token = forward_flops(run.model_cfg, 1, shape[0][1], shape[1][1]) / shape[1][1]
    run.logger.log_text(
        f"model: {n_params:,} parameters, {flops_per_token / 1e6:.1f} MFLOPs forward per "
        f"target token at {shape[0][1]}+{shape[1][1]} tokens",
        params=n_params,
        flops_per_token=flops_per_token,
    )
    run.logger.log_text(
        f"data: {stats.num_kept:,} of {stats.num_pairs:,} training pairs kept "
        f"({stats.num_dropped_long:,} longer than the length limits, "
        f"{stats.num_dropped_empty + stats.num_empty_lines_skipped:,} empty)",
        **dataclasses.asdict(stats),
    )


def _compile_steps(run: _Run, graphdef, optimizer, schedule, state: TrainState) -> _Steps:
    """The train and eval steps compiled for `state`'s placement, and the translator."""
    t = run.config.train
    train_step = run.parallel.compile_train_step(
        lambda axis: make_train_step(graphdef, optimizer, schedule, t, axis_name=axis), state
    )
    eval_step = run.parallel.compile_eval_step(
        lambda axis: make_eval_step(graphdef, axis_name=axis), state.params
    )
    translator = Translator(
        graphdef, run.model_cfg, run.decode, run.data.source_tokenizer, run.data.target_tokenizer
    )
    return _Steps(train_step, eval_step, translator, jax.random.key(t.seed))


# -------------------------------------------------------------------------------- loop


def _train_loop(run: _Run, steps: _Steps, state: TrainState, start: int) -> TrainResult:
    """Steps `start`..num_steps with train rows every log_every steps, validation every
    eval_every and a checkpoint every checkpoint_every (and at the end, on a signal, and
    with early stopping at each new best validation and when it ends the run)."""
    t = run.config.train
    step = start
    last_loss = None
    last_valid = None
    pending = None  # (step, metrics) of the previous step, checked one step late
    window_tokens, window_start = 0, time.perf_counter()
    if run.stopping.exhausted:  # resumed a run that had already stopped early
        run.logger.log_text(f"stopped early before step {step}: {run.stopping.describe()}")
        return TrainResult(step, None, False, None, stopped_early=True)
    with _StopFlag() as stop:
        while step < t.num_steps and stop.signal is None and not run.stopping.exhausted:
            batch = next(run.train_iter)
            window_tokens += int(np.count_nonzero(batch["src_segments"]))
            window_tokens += int(np.count_nonzero(batch["tgt_segments"]))
            state, step_metrics = steps.train_step(
                state, run.parallel.shard_batch(batch), steps.base_rng
            )
            if pending is not None:
                last_loss = _check_finite(pending, run)
            step += 1
            pending = (step, step_metrics)
            boundary = step % t.checkpoint_every == 0 or step == t.num_steps
            if step % t.log_every == 0 or boundary:
                last_loss = _check_finite(pending, run)
                pending = None
                _log_train(run.logger, step, step_metrics, window_tokens, window_start)
                window_tokens, window_start = 0, time.perf_counter()
            validated = step % t.eval_every == 0 or step == t.num_steps
            if validated:
                last_valid = _validate(run, steps, state, step)
                run.stopping.update(step, last_valid)
                window_start = time.perf_counter()  # evaluation time is not training time
            new_best = validated and run.stopping.on and run.stopping.best_step == step
            if boundary or new_best or run.stopping.exhausted:
                if pending is not None:
                    last_loss = _check_finite(pending, run)
                    pending = None
                _save(run, state, step, last_valid if validated else None)
        if run.stopping.exhausted:
            run.logger.log_text(f"{STOPPED_MESSAGE} {step}: {run.stopping.describe()}")
        if stop.signal is not None and step > start:
            if pending is not None:
                last_loss = _check_finite(pending, run)
            if run.checkpoints.latest_step() != step:
                _save(run, state, step, None)
            run.logger.log_text(f"stopped by signal {stop.signal} at step {step}; checkpoint saved")
    return TrainResult(
        step, last_loss, stop.signal is not None, last_valid, stopped_early=run.stopping.exhausted
    )


def _log_train(logger: MetricsLogger, step: int, step_metrics, tokens: int, since: float):
    """One train row: the step's metrics and the token rate since `since` (perf_counter)."""
    values = jax.device_get(step_metrics)  # waits for the step, so the rate includes it
    elapsed = time.perf_counter() - since
    values = {k: float(v) for k, v in values.items()}
    values["perplexity"] = math.exp(min(values["nll"], 50.0))
    values["tokens_per_s"] = tokens / max(elapsed, 1e-9)
    logger.log_train(step, values)


def _save(run: _Run, state: TrainState, step: int, validation: dict | None) -> None:
    """Checkpoint `step`, ranked by its validation's score when it was validated (with early
    stopping, only when that validation was a new best, so `best` is the one it kept)."""
    meta = {
        "step": step,
        "time": time.time(),
        "tokenizers": tokenizer_fingerprints(run.data),
        "early_stopping": run.stopping.state(),
    }
    state = state_dict(run.parallel.logical_state(state))
    ranked = validation is not None and (not run.stopping.on or run.stopping.best_step == step)
    score = run.stopping.score(validation) if ranked else None
    run.checkpoints.save(step, state, run.train_iter.get_state(), meta, score)


def _check_finite(pending, run: _Run) -> float:
    step, step_metrics = pending
    loss = float(jax.device_get(step_metrics["loss"]))
    if not math.isfinite(loss):
        raise NonFiniteLoss(
            f"non-finite loss ({loss}) at step {step}; {_last_good_checkpoint(run.checkpoints)}; "
            f"{_divergence_remedies(run.model_cfg)}, then rerun to resume"
        )
    return loss


def _last_good_checkpoint(checkpoints: Checkpointer) -> str:
    """Where a rerun resumes, as a phrase: the newest checkpoint whose files match their
    manifest, and the newest damaged one after it (a rerun sets it aside). One saved before
    manifests were written is named, not called good."""
    checkpoints.wait()
    directory, damaged = checkpoints.directory, None
    for step in reversed(checkpoints.all_steps()):
        verdict = checkpoints.verify(step)
        if verdict.status == checkpoint_manifest.DAMAGED:
            damaged = damaged or f"step {step} is damaged ({verdict.detail})"
            continue
        if verdict.status == checkpoint_manifest.OK:
            where = f"the last good checkpoint is step {step} in {directory}"
        else:
            where = (
                f"the last checkpoint is step {step} in {directory}, saved before checksums "
                "were recorded (not verified)"
            )
        return f"{where}; the newer {damaged}" if damaged else where
    if damaged:
        return f"no checkpoint in {directory} is intact: {damaged}"
    return "no checkpoint was saved yet"


def _divergence_remedies(model_cfg: ModelConfig) -> str:
    """What to change: the learning rate and warmup, and what the run's norm placement adds
    (Pre-LN to a Post-LN run)."""
    extra = PLACEMENTS[model_cfg.norm_position].divergence_remedy
    if extra:
        return f"lower train.learning_rate, add warmup or {extra}"
    return "lower train.learning_rate or add warmup"


def _validate(run: _Run, steps: _Steps, state: TrainState, step: int) -> dict:
    """Validation loss over the whole split and BLEU on its first sentences, logged."""
    parallel, t = run.parallel, run.config.train
    split = run.data.eval_split("valid", batch_size=_eval_rows(run.config, parallel))
    totals = {"nll_sum": 0.0, "tokens": 0.0}
    for batch in split:
        sums = jax.device_get(steps.eval_step(state.params, parallel.shard_batch(batch)))
        for key in totals:
            totals[key] += float(sums[key])
    nll = totals["nll_sum"] / max(totals["tokens"], 1.0)
    result = {"loss": nll, "perplexity": math.exp(min(nll, 50.0)), "tokens": totals["tokens"]}
    n = min(int(t.eval_bleu_sentences), len(split.sources))
    if n > 0:
        params = parallel.logical_state(state).params
        began = time.perf_counter()
        translations = steps.translator.translate(params, list(split.sources[:n]))
        elapsed = time.perf_counter() - began
        scores = metrics_lib.score(translations.best, list(split.targets[:n]))
        result.update(
            bleu=scores.bleu,
            chrf=scores.chrf,
            bleu_sentences=n,
            sentences_per_s=n / max(elapsed, 1e-9),
        )
    run.logger.log_eval(step, result)
    return result


def _eval_rows(config, parallel) -> int:
    rows = int(config.decode.batch_size)
    divisor = parallel.num_devices * jax.process_count()
    return max(divisor, rows // divisor * divisor)

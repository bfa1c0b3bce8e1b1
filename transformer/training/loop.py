"""The training loop: data, model, compiled step, periodic evaluation, checkpoints, logs.

`train_and_evaluate(config, workdir)` is the whole of `train.py`. Rerunning it on the same
workdir resumes exactly from the latest checkpoint: step, optimizer state, LR schedule
position, RNG and data-iterator position.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time

import jax
import numpy as np
from flax import nnx

from transformer.common.errors import UserError
from transformer.data import load_split, make_datasets
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.flops import forward_flops
from transformer.model.transformer import Transformer, count_params
from transformer.scoring import metrics as metrics_lib
from transformer.training import run_config
from transformer.training.checkpoint import Checkpointer
from transformer.training.logger import MetricsLogger
from transformer.training.optim import make_optimizer
from transformer.training.parallel import Parallel
from transformer.training.steps import TrainState, init_state, make_eval_step, make_train_step


class NonFiniteLoss(UserError):
    pass


@dataclasses.dataclass
class TrainResult:
    step: int
    last_loss: float | None
    stopped_by_signal: bool
    valid: dict | None


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


def build_model(model_cfg, seed: int) -> Transformer:
    return Transformer(model_cfg, rngs=nnx.Rngs(params=seed))


def abstract_train_state(model_cfg, optimizer):
    """Shapes and dtypes of the train state, without allocating it."""

    def make():
        return init_state(build_model(model_cfg, 0), optimizer)[1]

    return jax.eval_shape(make)


def tokenizer_fingerprints(data) -> dict:
    """Hashes of the run's vocabularies, stored in each checkpoint's metadata."""
    return {side: getattr(data, f"{side}_tokenizer").fingerprint for side in ("source", "target")}


def check_tokenizers(meta: dict, data, checkpoint: str) -> None:
    """The run's tokenizers must be the ones its checkpoint was trained with: a vocabulary of
    the same size but other pieces would load and silently translate garbage."""
    saved = (meta or {}).get("tokenizers")
    if not saved:
        return  # a checkpoint written before fingerprints were recorded
    for side, fingerprint in tokenizer_fingerprints(data).items():
        if saved.get(side) != fingerprint:
            tok = getattr(data, f"{side}_tokenizer")
            raise UserError(
                f"the {side} tokenizer {tok.path or ''} (fingerprint {fingerprint}) is not the "
                f"one {checkpoint} was trained with ({saved.get(side)}); restore the run's "
                "vocab/ directory or the original data.vocab_path"
            )


def train_and_evaluate(config, workdir: str) -> TrainResult:
    model_cfg = run_config.validate(config)
    is_main = jax.process_index() == 0
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create workdir {workdir} ({e.strerror}); choose another") from None
    if not os.access(workdir, os.W_OK):
        raise UserError(f"workdir {workdir} is not writable; choose a writable --workdir")
    run_config.check_same_model(config, workdir)
    t = config.train
    parallel = Parallel(t.parallelism, t.fsdp)

    def load_data():
        return make_datasets(
            config, workdir, row_multiple=parallel.num_devices,
            shard_index=jax.process_index(), shard_count=jax.process_count(),
        )  # fmt: skip

    if jax.process_count() > 1:
        # Process 0 prepares the workdir's shared files first (corpus, TFDS dataset, vocabulary,
        # token cache); the others wait, then read them. Concurrent TFDS preparation in one
        # directory races (FileExistsError when the second process renames its copy into place).
        from jax.experimental import multihost_utils

        data = None
        if is_main:
            data = load_data()
            data.train_stats  # noqa: B018 - the train split (and TFDS build) loads lazily
        multihost_utils.sync_global_devices("transformer.training.loop: data prepared")
        if data is None:
            data = load_data()
    else:
        data = load_data()
    # A missing validation split fails now, not at the first evaluation (reading it is cheap;
    # tokenizing waits for the evaluation).
    load_split(config.data, data.split_name("valid"), workdir)
    vocab_size = run_config.resolve_vocab_size(config, data.source_tokenizer, data.target_tokenizer)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=vocab_size)
    run_config.check_same_model(config, workdir)  # now with the resolved vocab_size too
    if is_main:
        run_config.save(config, workdir)

    optimizer, schedule = make_optimizer(t)
    model = build_model(model_cfg, t.seed)
    graphdef, state = init_state(model, optimizer)
    checkpoints = Checkpointer(workdir, keep=t.keep_checkpoints)
    logger = MetricsLogger(workdir, enabled=is_main, total_steps=t.num_steps)
    train_iter = data.train_iterator()

    start = checkpoints.latest_step()
    if start is not None:
        target = _as_dict(state)
        if parallel.kind == "mesh":
            # Restore straight into the training layout (each process reads its own shards).
            # Restoring into this process's single-device arrays and then moving them onto a
            # mesh that spans several processes fails: jax.device_put of committed arrays
            # across hosts is unsupported on CPU ("does not support cross-host transfers").
            target = jax.tree.map(
                lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                target, parallel.state_shardings(target),
            )  # fmt: skip
        restored, data_state, meta = checkpoints.restore(start, target)
        check_tokenizers(meta, data, f"{workdir}/checkpoints/{start}")
        state = TrainState(**restored)
        train_iter.set_state(data_state)
        logger.truncate_after(start)
        logger.log_text(f"resumed from checkpoint at step {start}", step=start)
    else:
        start = 0
        n_params = count_params(model)
        stats = data.train_stats
        shape = data.layout.shapes()[-1]
        flops_per_token = forward_flops(model_cfg, 1, shape[0][1], shape[1][1]) / shape[1][1]
        logger.log_text(
            f"model: {n_params:,} parameters, {flops_per_token / 1e6:.1f} MFLOPs forward per "
            f"target token at {shape[0][1]}+{shape[1][1]} tokens",
            params=n_params, flops_per_token=flops_per_token,
        )  # fmt: skip
        logger.log_text(
            f"data: {stats.num_kept:,} of {stats.num_pairs:,} training pairs kept "
            f"({stats.num_dropped_long:,} longer than the length limits, "
            f"{stats.num_dropped_empty + stats.num_empty_lines_skipped:,} empty)",
            **dataclasses.asdict(stats),
        )
    del model

    state = parallel.place_state(state)
    train_step = parallel.compile_train_step(
        lambda axis: make_train_step(graphdef, optimizer, schedule, t, axis_name=axis), state
    )
    eval_step = parallel.compile_eval_step(
        lambda axis: make_eval_step(graphdef, axis_name=axis), state.params
    )
    translator = Translator(
        graphdef, model_cfg, DecodeSettings.from_config(config.decode),
        data.source_tokenizer, data.target_tokenizer,
    )  # fmt: skip
    base_rng = jax.random.key(t.seed)

    def evaluate(step: int) -> dict:
        result = _evaluate(config, data, parallel, eval_step, translator, state, t)
        logger.log_eval(step, result)
        return result

    def save(step: int, bleu: float | None):
        meta = {"step": step, "time": time.time(), "tokenizers": tokenizer_fingerprints(data)}
        checkpoints.save(
            step, _as_dict(parallel.logical_state(state)), train_iter.get_state(), meta, bleu
        )

    step = start
    last_loss = None
    last_valid = None
    pending = None  # (step, metrics) of the previous step, checked one step late
    window_tokens, window_start = 0, time.perf_counter()
    with _StopFlag() as stop:
        while step < t.num_steps and stop.signal is None:
            batch = next(train_iter)
            window_tokens += int(np.count_nonzero(batch["src_segments"]))
            window_tokens += int(np.count_nonzero(batch["tgt_segments"]))
            state, step_metrics = train_step(state, parallel.shard_batch(batch), base_rng)
            if pending is not None:
                last_loss = _check_finite(pending, checkpoints)
            step += 1
            pending = (step, step_metrics)
            boundary = step % t.checkpoint_every == 0 or step == t.num_steps
            if step % t.log_every == 0 or boundary:
                last_loss = _check_finite(pending, checkpoints)
                pending = None
                values = jax.device_get(step_metrics)
                elapsed = time.perf_counter() - window_start
                values = {k: float(v) for k, v in values.items()}
                values["perplexity"] = math.exp(min(values["nll"], 50.0))
                values["tokens_per_s"] = window_tokens / max(elapsed, 1e-9)
                logger.log_train(step, values)
                window_tokens, window_start = 0, time.perf_counter()
            bleu = None
            if step % t.eval_every == 0 or step == t.num_steps:
                last_valid = evaluate(step)
                bleu = last_valid.get("bleu")
                window_start = time.perf_counter()  # evaluation time is not training time
            if boundary:
                save(step, bleu)
        if stop.signal is not None and step > start:
            if pending is not None:
                last_loss = _check_finite(pending, checkpoints)
            if checkpoints.latest_step() != step:
                save(step, None)
            logger.log_text(f"stopped by signal {stop.signal} at step {step}; checkpoint saved")
    checkpoints.wait()
    checkpoints.close()
    logger.close()
    return TrainResult(step, last_loss, stop.signal is not None, last_valid)


def _as_dict(state: TrainState) -> dict:
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state}


def _check_finite(pending, checkpoints: Checkpointer) -> float:
    step, step_metrics = pending
    loss = float(jax.device_get(step_metrics["loss"]))
    if not math.isfinite(loss):
        checkpoints.wait()
        last = checkpoints.latest_step()
        where = (
            f"the last good checkpoint is step {last} in {checkpoints.directory}"
            if last is not None
            else "no checkpoint was saved yet"
        )
        raise NonFiniteLoss(
            f"non-finite loss ({loss}) at step {step}; {where}; lower train.learning_rate, "
            f"add warmup or use norm_position='pre', then rerun to resume"
        )
    return loss


def _evaluate(config, data, parallel, eval_step, translator, state, t) -> dict:
    """Validation loss over the whole split and BLEU on its first sentences."""
    split = data.eval_split("valid", batch_size=_eval_rows(config, parallel))
    totals = {"nll_sum": 0.0, "tokens": 0.0}
    for batch in split:
        sums = jax.device_get(eval_step(state.params, parallel.shard_batch(batch)))
        for key in totals:
            totals[key] += float(sums[key])
    nll = totals["nll_sum"] / max(totals["tokens"], 1.0)
    result = {"loss": nll, "perplexity": math.exp(min(nll, 50.0)), "tokens": totals["tokens"]}
    n = min(int(t.eval_bleu_sentences), len(split.sources))
    if n > 0:
        params = parallel.logical_state(state).params
        start = time.perf_counter()
        translations = translator.translate(params, list(split.sources[:n]))
        elapsed = time.perf_counter() - start
        scores = metrics_lib.score(translations.best, list(split.targets[:n]))
        result.update(bleu=scores.bleu, chrf=scores.chrf, bleu_sentences=n,
                      sentences_per_s=n / max(elapsed, 1e-9))  # fmt: skip
    return result


def _eval_rows(config, parallel) -> int:
    rows = int(config.decode.batch_size)
    divisor = parallel.num_devices * jax.process_count()
    return max(divisor, rows // divisor * divisor)

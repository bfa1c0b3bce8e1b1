"""Pure train / eval step functions of (state, batch, rng) over `nnx.split` model state.

A batch is a dict of int32 arrays: `src`, `tgt` [B, S] / [B, T] (targets end with EOS, 0 is
padding), `src_segments`, `tgt_segments` (packed-sentence ids, 0 on padding) and
`src_positions`, `tgt_positions` (restarting at each segment). Decoder inputs are the targets
shifted right per segment.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from transformer.common.special_ids import BOS_ID
from transformer.model.masks import shift_right
from transformer.training.loss import cross_entropy

# The name scope of the optimizer's update in the compiled step (what profiles attribute to it).
OPTIMIZER_SCOPE = "optimizer_update"


class TrainState(NamedTuple):
    """Everything a step changes; a pytree, so it can be donated, sharded and checkpointed."""

    step: jax.Array  # int32 scalar
    params: Any  # nnx.State of the model's Params
    opt_state: Any


def _forward(graphdef, params, batch, rng, *, train: bool, scheduled_sampling_rate=0.0):
    model = nnx.merge(graphdef, params)
    tgt_in = shift_right(batch["tgt"], batch["tgt_segments"], BOS_ID)
    kwargs = dict(
        src_segments=batch["src_segments"],
        tgt_segments=batch["tgt_segments"],
        src_positions=batch["src_positions"],
        tgt_positions=batch["tgt_positions"],
    )
    if train and scheduled_sampling_rate > 0:
        tgt_in = _scheduled_inputs(model, batch, tgt_in, rng, scheduled_sampling_rate, kwargs)
    dropout_rng = jax.random.fold_in(rng, 1)
    return model(batch["src"], tgt_in, deterministic=not train, dropout_rng=dropout_rng, **kwargs)


def _scheduled_inputs(model, batch, tgt_in, rng, rate, kwargs):
    """Scheduled sampling (two-pass, Mihaylova & Liu 2019): each decoder input except a
    sentence's BOS is replaced, with probability `rate`, by the model's own prediction from a
    teacher-forced pass without dropout or gradient."""
    predicted = jnp.argmax(jax.lax.stop_gradient(model(batch["src"], tgt_in, **kwargs)), -1)
    predicted_in = shift_right(predicted.astype(jnp.int32), batch["tgt_segments"], BOS_ID)
    use_model = jax.random.bernoulli(jax.random.fold_in(rng, 2), rate, tgt_in.shape)
    use_model &= tgt_in != BOS_ID
    return jnp.where(use_model & (batch["tgt_segments"] != 0), predicted_in, tgt_in)


def loss_sums(graphdef, params, batch, rng, *, train, label_smoothing, scheduled_sampling_rate=0.0):
    """(smoothed loss sum, (nll sum, real-token count)) of one batch."""
    logits = _forward(
        graphdef, params, batch, rng, train=train, scheduled_sampling_rate=scheduled_sampling_rate
    )
    weights = (batch["tgt_segments"] != 0).astype(jnp.float32)
    loss, nll = cross_entropy(logits, batch["tgt"], weights, label_smoothing)
    return loss, (nll, jnp.sum(weights))


def sentence_log_probs(graphdef, params, batch) -> tuple[jax.Array, jax.Array]:
    """Teacher-forced, dropout-free: ([rows] log-probability of each row's target, EOS
    included, [rows] its token count) for batches of one sentence per row."""
    logits = _forward(graphdef, params, batch, jax.random.key(0), train=False)  # [B, T, V]
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(log_probs, batch["tgt"][..., None], axis=-1)[..., 0]  # [B, T]
    weights = (batch["tgt_segments"] != 0).astype(jnp.float32)
    return jnp.sum(picked * weights, axis=-1), jnp.sum(weights, axis=-1)


def make_train_step(graphdef, optimizer, schedule, train_config, *, axis_name: str | None = None):
    """Builds train_step(state, batch, rng) -> (state, metrics).

    The loss is averaged over the real target tokens of the whole global batch: gradients of
    loss sums are accumulated over `grad_accum_steps` micro-batches (and summed across devices
    under pmap) before dividing by the token count, so accumulation and any device count give
    the same update as one large batch.
    """
    accum = int(train_config.grad_accum_steps)
    label_smoothing = float(train_config.label_smoothing)
    ss_rate = float(train_config.scheduled_sampling_rate)
    grad_fn = jax.value_and_grad(loss_sums, argnums=1, has_aux=True)

    def micro_grads(params, micro_batch, rng):
        (loss, (nll, count)), grads = grad_fn(
            graphdef,
            params,
            micro_batch,
            rng,
            train=True,
            label_smoothing=label_smoothing,
            scheduled_sampling_rate=ss_rate,
        )
        return grads, jnp.stack([loss, nll, count])

    def train_step(state: TrainState, batch, rng):
        rng = jax.random.fold_in(rng, state.step)
        if accum == 1:
            grads, sums = micro_grads(state.params, batch, rng)
        else:
            micro = jax.tree.map(lambda x: x.reshape(accum, -1, *x.shape[1:]), batch)

            def body(carry, inputs):
                i, micro_batch = inputs
                grads, sums = micro_grads(state.params, micro_batch, jax.random.fold_in(rng, i))
                return jax.tree.map(jnp.add, carry, (grads, sums)), None

            zeros = (jax.tree.map(jnp.zeros_like, state.params), jnp.zeros(3, jnp.float32))
            (grads, sums), _ = jax.lax.scan(body, zeros, (jnp.arange(accum), micro))
        if axis_name is not None:
            grads, sums = jax.lax.psum((grads, sums), axis_name)
        count = jnp.maximum(sums[2], 1.0)
        with jax.named_scope(OPTIMIZER_SCOPE):  # names its ops in profiles
            grads = jax.tree.map(lambda g: g / count, grads)
            updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
        metrics = {
            "loss": sums[0] / count,
            "nll": sums[1] / count,
            "tokens": sums[2],
            "grad_norm": optax.tree.norm(grads),
            "learning_rate": schedule(state.step),
        }
        new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
        return new_state, metrics

    return train_step


def make_eval_step(graphdef, *, axis_name: str | None = None):
    """Builds eval_step(params, batch) -> sums {'nll_sum' (plain NLL, no label smoothing),
    'tokens' (real target tokens)}."""

    def eval_step(params, batch):
        _, (nll, count) = loss_sums(
            graphdef, params, batch, jax.random.key(0), train=False, label_smoothing=0.0
        )
        sums = {"nll_sum": nll, "tokens": count}
        if axis_name is not None:
            sums = jax.lax.psum(sums, axis_name)
        return sums

    return eval_step


def init_state(model: nnx.Module, optimizer) -> tuple[Any, TrainState]:
    graphdef, params = nnx.split(model, nnx.Param)
    state = TrainState(
        step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params)
    )
    return graphdef, state

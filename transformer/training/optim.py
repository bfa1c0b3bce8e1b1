"""Learning-rate schedules and the AdamW optimizer built from the `train` config section."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from transformer.common.errors import UserError

SCHEDULES = ("rsqrt", "cosine", "constant")


def check_schedule(schedule: str) -> None:
    """train.schedule's one check (run_config.validate calls it before any work)."""
    if schedule not in SCHEDULES:
        raise UserError(f"unknown train.schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")


def learning_rate_schedule(
    peak: float, schedule: str, warmup_steps: int, num_steps: int
) -> optax.Schedule:
    """Linear warmup to `peak` over warmup_steps, then:

    rsqrt: peak * sqrt(warmup / step) (the 2017 paper's inverse square root decay);
    cosine: half-cosine from peak to 0 at num_steps;
    constant: peak.
    """
    check_schedule(schedule)
    warmup = max(int(warmup_steps), 0)

    def lr(step):
        step = jnp.asarray(step, jnp.float32) + 1.0  # the update at step 0 uses lr(1)
        ramp = jnp.minimum(1.0, step / max(warmup, 1)) if warmup else 1.0
        if schedule == "rsqrt":
            decay = jnp.sqrt(max(warmup, 1) / jnp.maximum(step, max(warmup, 1)))
        elif schedule == "cosine":
            progress = jnp.clip((step - warmup) / max(num_steps - warmup, 1), 0.0, 1.0)
            decay = 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        else:
            decay = 1.0
        return peak * ramp * decay

    return lr


def _decay_mask(params):
    """Weight decay applies to matrices only, not to biases, norm scales or 1-D tables."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(train_config) -> tuple[optax.GradientTransformation, optax.Schedule]:
    schedule = learning_rate_schedule(
        train_config.learning_rate,
        train_config.schedule,
        train_config.warmup_steps,
        train_config.num_steps,
    )
    parts = []
    if train_config.grad_clip_norm and train_config.grad_clip_norm > 0:
        parts.append(optax.clip_by_global_norm(train_config.grad_clip_norm))
    parts.append(
        optax.adamw(
            schedule,
            b1=train_config.adam_b1,
            b2=train_config.adam_b2,
            eps=train_config.adam_eps,
            weight_decay=train_config.weight_decay,
            mask=_decay_mask,
        )
    )
    return optax.chain(*parts), schedule

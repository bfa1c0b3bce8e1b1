"""Positional schemes as objects: one class per scheme, chosen once from `model.position`.

A scheme instance serves one stack's self-attention (the encoder's, or the decoder's, which is
causal) and owns what the scheme contributes there: its parameters, a vector added to the
token embeddings (`embed`), an attention bias (`bias`), a rotation of queries and keys
(`rotation`) and a length limit (`max_length`). The network calls these hooks on every
scheme and never compares a scheme's name; the hooks a scheme does not override contribute
nothing, and a scheme that contributes nothing adds nothing to the traced program.

Adding a scheme is one class: subclass `PositionScheme`, override the hooks it needs (and
`check` for the configs it cannot serve) and decorate it with `@register("name")`; then
`model.position="name"` builds it, in training, in cached decoding and in every search
(tests/test_position_schemes.py defines one in the test file alone; a scheme in the user's
own module reaches every command through `plugins.modules`, docs/extending.md). The formulas
live in `transformer.model.position`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.common.registry import Registry
from transformer.model.position import (
    alibi_bias,
    apply_rope,
    relative_position_bucket,
    sinusoids,
)

if TYPE_CHECKING:
    from transformer.model.config import ModelConfig

Rotation = Callable[[jax.Array], jax.Array]  # queries or keys [B, T, H, D] -> rotated

SCHEMES = Registry("position")  # model.position -> its PositionScheme class
register = SCHEMES.register  # class decorator: the scheme becomes model.position="name"


class PositionScheme(nnx.Module):
    """One stack's positional scheme; the base class contributes nothing."""

    name: ClassVar[str] = ""

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        """causal: the decoder's self-attention (keys never follow their query)."""

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        """Raises ValueError, naming the fix, for a config this scheme cannot serve."""

    @property
    def max_length(self) -> int | None:
        """The longest sequence the scheme can place (None: any)."""
        return None

    def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        """x [B, T, d] float32 (scaled token embeddings) at positions [B, T] -> [B, T, d]."""
        return x

    def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array | None:
        """Attention bias [B, H, Tq, Tk] (float32) for queries and keys at these positions."""
        return None

    def rotation(self, positions: jax.Array) -> Rotation | None:
        """The rotation applied to queries and keys at positions [B, T] before they meet."""
        return None


@register("sinusoidal")
class Sinusoidal(PositionScheme):
    """The fixed sin/cos vectors of Vaswani et al. added to the embeddings, at any length."""

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        self.d_model = cfg.d_model

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        if cfg.d_model % 2:
            raise ValueError(f"position='sinusoidal' needs an even d_model, got {cfg.d_model}")

    def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        return x + sinusoids(positions, self.d_model)


@register("learned")
class Learned(PositionScheme):
    """A trained vector per position [max_len, d] added to the embeddings; one table per stack."""

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        init = nnx.initializers.normal(stddev=0.02)
        self.table = nnx.Param(init(rngs.params(), (cfg.max_len, cfg.d_model), jnp.float32))

    @property
    def max_length(self) -> int:
        return self.table.shape[0]

    def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        return x + jnp.take(self.table[...], positions, axis=0)


@register("rope")
class Rotary(PositionScheme):
    """RoPE (Su et al.): queries and keys rotated by angles proportional to their position."""

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        self.base = cfg.rope_base

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        if cfg.head_dim % 2:
            raise ValueError(
                f"position='rope' needs an even head dimension, got d_model/num_heads="
                f"{cfg.head_dim}; change d_model or num_heads"
            )

    def rotation(self, positions: jax.Array) -> Rotation:
        return functools.partial(apply_rope, positions=positions, base=self.base)


@register("alibi")
class ALiBi(PositionScheme):
    """ALiBi (Press et al.): a per-head bias linear in the query-key distance, no parameters."""

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        self.num_heads = cfg.num_heads

    def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        return alibi_bias(q_positions, k_positions, self.num_heads)


@register("relative")
class T5Relative(PositionScheme):
    """T5's learned bias per (bucketed relative position, head), shared by a stack's layers;
    the encoder's buckets cover both directions, the decoder's the past only."""

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        self.bidirectional = not causal
        self.num_buckets = cfg.relative_buckets
        self.max_distance = cfg.relative_max_distance
        init = nnx.initializers.normal(stddev=cfg.num_heads**-0.5)
        shape = (cfg.relative_buckets, cfg.num_heads)
        self.embedding = nnx.Param(init(rngs.params(), shape, jnp.float32))

    def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        relative = k_positions[:, None, :] - q_positions[:, :, None]  # [B, Tq, Tk]
        buckets = relative_position_bucket(
            relative,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        bias = self.embedding[...][buckets]  # [B, Tq, Tk, H]
        return jnp.transpose(bias, (0, 3, 1, 2))


@register("none")
class NoPositions(PositionScheme):
    """No positional information: the encoder is permutation-equivariant."""

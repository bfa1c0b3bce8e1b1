"""Normalisations and their placement as objects, chosen once from `model.norm_type` and
`model.norm_position`.

A `Normalization` normalises the residual stream's features (its parameters are its own);
a `NormPlacement` says where a sublayer's normalisation sits relative to its residual
connection and whether each stack ends with one. The network calls them and never compares
their names. Adding one is one class, decorated with `@NORMS.register("name")` or
`@PLACEMENTS.register("name")`, in the package or in a user's module named in
`plugins.modules` (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.common.registry import Registry

if TYPE_CHECKING:
    from transformer.model.config import ModelConfig

NORMS = Registry("norm_type")  # model.norm_type -> its Normalization class
PLACEMENTS = Registry("norm_position")  # model.norm_position -> its NormPlacement class

Fn = Callable[[jax.Array], jax.Array]


class Normalization(nnx.Module):
    """x [..., d] (any float dtype) -> float32 [..., d]."""

    name: ClassVar[str] = ""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        """rngs: for a normalisation whose parameters start random (the built-in ones do not)."""

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        """Raises ValueError, naming the fix, for a config this normalisation cannot serve."""

    def __call__(self, x: jax.Array) -> jax.Array:
        raise NotImplementedError


def _rms_normalized(x32: jax.Array, eps: float) -> jax.Array:
    """x32 [..., d] divided by its root mean square over d."""
    return x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)


@NORMS.register("layernorm")
class LayerNorm(Normalization):
    """(x - mean) / std * scale + bias over the features, in float32."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.eps = cfg.norm_eps
        self.scale = nnx.Param(jnp.ones((cfg.d_model,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((cfg.d_model,), jnp.float32))

    @jax.named_scope("norm")  # names its ops in profiles (profile_kinds.py)
    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        centered = x32 - jnp.mean(x32, axis=-1, keepdims=True)
        return _rms_normalized(centered, self.eps) * self.scale[...] + self.bias[...]


@NORMS.register("rmsnorm")
class RMSNorm(Normalization):
    """x / rms(x) * scale over the features, in float32: no centring, no bias."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.eps = cfg.norm_eps
        self.scale = nnx.Param(jnp.ones((cfg.d_model,), jnp.float32))

    @jax.named_scope("norm")
    def __call__(self, x):
        return _rms_normalized(x.astype(jnp.float32), self.eps) * self.scale[...]


class NormPlacement(nnx.Module):
    """Where a sublayer's normalisation sits: its residual step and the stacks' final norm."""

    name: ClassVar[str] = ""
    # Appended to the remedies of a run whose loss turned non-finite ('' for none).
    divergence_remedy: ClassVar[str] = ""

    def __init__(self, cfg: ModelConfig):
        pass

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        """Raises ValueError, naming the fix, for a config this placement cannot serve."""

    @classmethod
    def stack_norm(cls, cfg: ModelConfig, *, rngs: nnx.Rngs) -> Normalization | None:
        """The normalisation that ends each stack (None: the last sublayer's output as is)."""
        return None

    def __call__(self, x: jax.Array, fn: Fn, norm: Normalization, drop: Fn) -> jax.Array:
        """The residual stream [B, T, d] after the sublayer fn with its norm and dropout."""
        raise NotImplementedError


@PLACEMENTS.register("pre")
class PreNorm(NormPlacement):
    """Pre-LN: x + drop(fn(norm(x))); the residual stream itself is never normalised, so each
    stack ends with a norm of its own."""

    @classmethod
    def stack_norm(cls, cfg, *, rngs):
        return NORMS[cfg.norm_type](cfg, rngs=rngs)

    def __call__(self, x, fn, norm, drop):
        return x + drop(fn(norm(x)))


@PLACEMENTS.register("post")
class PostNorm(NormPlacement):
    """Post-LN (Vaswani et al.): norm(x + drop(fn(x)))."""

    # Pre-LN is the usual cure for a Post-LN run that diverges early.
    divergence_remedy = "use model.norm_position='pre'"

    def __call__(self, x, fn, norm, drop):
        return norm(x + drop(fn(x)))

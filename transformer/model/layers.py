"""Basic layers: dense projection, embedding and the feed-forward block (its activation:
activations.py; normalisations: normalization.py)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.model.activations import ACTIVATIONS
from transformer.model.differentiation import AUTODIFF, Differentiation
from transformer.model.dropout import KeySeq, dropout

xavier = nnx.initializers.xavier_uniform()


class Dense(nnx.Module):
    """y = x @ W + b with W [in, out] kept float32 and the product computed in `dtype`."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        use_bias: bool,
        dtype,
        rngs: nnx.Rngs,
        init_scale=1.0,
        differentiation: Differentiation = AUTODIFF,
    ):
        kernel = xavier(rngs.params(), (d_in, d_out), jnp.float32) * init_scale
        self.kernel = nnx.Param(kernel)
        self.bias = nnx.Param(jnp.zeros((d_out,), jnp.float32)) if use_bias else None
        self.dtype = dtype
        self.differentiation = differentiation

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.differentiation.matmul(x.astype(self.dtype), self.kernel[...].astype(self.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


def fused_product(layers: list[Dense], x: jax.Array) -> list[jax.Array]:
    """[layer(x) for layer in layers] as one product of x with their kernels side by side
    (one wide matrix product instead of several narrow ones; the same values, each output
    column being the same dot product). The layers share d_in, dtype, bias use and
    differentiation."""
    first = layers[0]
    kernel = jnp.concatenate([layer.kernel[...] for layer in layers], axis=1)
    y = first.differentiation.matmul(x.astype(first.dtype), kernel.astype(first.dtype))
    if first.bias is not None:
        bias = jnp.concatenate([layer.bias[...] for layer in layers])
        y = y + bias.astype(first.dtype)
    widths = [layer.kernel.shape[1] for layer in layers]
    return jnp.split(y, list(itertools.accumulate(widths[:-1])), axis=-1)


class Embed(nnx.Module):
    """Token embedding table [vocab, d]; lookups are scaled by sqrt(d) by the caller."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        *,
        rngs: nnx.Rngs,
        differentiation: Differentiation = AUTODIFF,
    ):
        init = nnx.initializers.normal(stddev=d_model**-0.5)
        self.embedding = nnx.Param(init(rngs.params(), (vocab_size, d_model), jnp.float32))
        self.differentiation = differentiation

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], tokens, axis=0)

    def attend(self, x: jax.Array, dtype=jnp.float32) -> jax.Array:
        """Tied output projection: x [..., d] -> float32 logits [..., vocab], the product's
        operands in `dtype` (float32 sums whatever it is)."""
        if dtype == jnp.float32:
            return self.differentiation.tied_logits(x.astype(jnp.float32), self.embedding[...])
        table = self.embedding[...].astype(dtype)
        return jnp.einsum(
            "...d,vd->...v", x.astype(dtype), table, preferred_element_type=jnp.float32
        )


class FeedForward(nnx.Module):
    """d_model -> d_ff -> d_model; a gated activation's block computes act(x W1) * (x Wg).

    linear(d_in, d_out, **kw) makes its linear layers (a projection policy's, at the block's
    place in the network); the default is `Dense`."""

    def __init__(
        self,
        cfg,
        *,
        out_init_scale: float,
        rngs: nnx.Rngs,
        differentiation: Differentiation = AUTODIFF,
        linear=Dense,
    ):
        common = dict(
            use_bias=cfg.use_bias, dtype=_dtype(cfg), rngs=rngs, differentiation=differentiation
        )
        activation = ACTIVATIONS[cfg.activation]
        self.wi = linear(cfg.d_model, cfg.d_ff, **common)
        self.wg = linear(cfg.d_model, cfg.d_ff, **common) if activation.gated else None
        self.wo = linear(cfg.d_ff, cfg.d_model, init_scale=out_init_scale, **common)
        self.act = activation(cfg, rngs=rngs)  # after the projections: their init unchanged
        self.activation_dropout_rate = cfg.activation_dropout_rate

    def __call__(self, x: jax.Array, keys: KeySeq | None) -> jax.Array:
        h = self.act(self.wi(x))  # [B, T, F]
        if self.wg is not None:
            h = h * self.wg(x)
        h = dropout(h, self.activation_dropout_rate, keys)
        return self.wo(h)


def _dtype(cfg):
    return jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32

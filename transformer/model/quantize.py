"""Int8 products for decoding: weights quantized per output channel once per parameter set, the
activations per row at each product, both symmetric (abs-max / 127), the sum taken in int32.

A decode step multiplies a few rows by every weight matrix, where XLA's CPU int8 product runs
about twice as fast as its float32 one (benchmarks/experiments/matmul_shapes.py measures the
shapes). A decoding network built with `projection_policy.DecodeProjections(...,
step_quantize='int8')` (decoding_network) holds int8 copies of the decoder's dense layers and
the output projection, made once per parameter set; the float32 parameters are untouched and
training never sees them. The
BLEU cost is a measured figure (docs/decoding_and_evaluation.md), not a guarantee.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

INT8_MAX = 127.0


def quantize_columns(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """w [in, out] -> (int8 [in, out], float32 scale [out]) with w ~ q * scale."""
    scale = jnp.max(jnp.abs(w), axis=0) / INT8_MAX
    scale = jnp.where(scale > 0, scale, 1.0)  # an all-zero column stays zero
    return jnp.round(w / scale).astype(jnp.int8), scale.astype(jnp.float32)


def quantize_rows(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """x [..., in] -> (int8 [..., in], float32 scale [..., 1]) with x ~ q * scale."""
    x = x.astype(jnp.float32)
    scale = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / INT8_MAX
    scale = jnp.where(scale > 0, scale, 1.0)
    return jnp.round(x / scale).astype(jnp.int8), scale


def int8_matmul(x: jax.Array, w_q: jax.Array, w_scale: jax.Array) -> jax.Array:
    """x [..., in] (float) @ (w_q [in, out] int8 * w_scale [out]) -> float32 [..., out]."""
    x_q, x_scale = quantize_rows(x)
    acc = jax.lax.dot_general(
        x_q, w_q, (((x_q.ndim - 1,), (0,)), ((), ())), preferred_element_type=jnp.int32
    )
    return acc.astype(jnp.float32) * x_scale * w_scale

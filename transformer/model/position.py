"""The formulas of the positional schemes: sinusoids, RoPE, ALiBi slopes and T5 buckets
(position_schemes holds the schemes that use them).

Every scheme works from explicit integer positions (not array indices), so packed rows
(positions restart at each segment) and cached decoding (positions continue from the cache
index) need no special cases.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def sinusoids(positions: jax.Array, d_model: int) -> jax.Array:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    positions: int [...]; returns float32 [..., d_model] (sin and cos interleaved).
    Computed from the positions directly, so it extends to any length.
    """
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, d_model, 2, dtype=jnp.float32) / d_model))
    angles = positions[..., None].astype(jnp.float32) * inv_freq  # [..., d/2]
    pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., d/2, 2]
    return pe.reshape(*positions.shape, d_model)


def sinusoidal_table(length: int, d_model: int) -> jax.Array:
    """The [length, d_model] sinusoidal table (positions 0..length-1)."""
    return sinusoids(jnp.arange(length), d_model)


def apply_rope(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
    """Rotary embedding of x [B, T, H, D] at integer positions [B, T] (rotate-half layout).

    Pairs (x[i], x[i + D/2]) are rotated by angle pos * base^(-2i/D), so the dot product of a
    rotated query and key depends only on their position difference.
    """
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (base ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, D/2]
    cos = jnp.cos(angles)[:, :, None, :]  # [B, T, 1, D/2]
    sin = jnp.sin(angles)[:, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


def alibi_slopes(num_heads: int) -> jax.Array:
    """Head slopes of ALiBi (Press et al.): a geometric sequence 2^(-8/n), 2^(-16/n), ...

    For a head count that is not a power of two, the slopes of the next lower power of two are
    interleaved with every other slope of the next higher one, as in the paper's code.
    """

    def power_of_two_slopes(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_two_slopes(num_heads)
    else:
        lower = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two_slopes(lower)
        slopes += power_of_two_slopes(2 * lower)[0::2][: num_heads - lower]
    return jnp.asarray(slopes, jnp.float32)


def alibi_bias(q_positions: jax.Array, k_positions: jax.Array, num_heads: int) -> jax.Array:
    """ALiBi bias -slope_h * |q_pos - k_pos|: q [B, Tq], k [B, Tk] -> [B, H, Tq, Tk].

    The absolute distance serves both the bidirectional encoder and the causal decoder (the
    causal mask removes the future half there).
    """
    distance = jnp.abs(q_positions[:, :, None] - k_positions[:, None, :]).astype(jnp.float32)
    return -alibi_slopes(num_heads)[None, :, None, None] * distance[:, None, :, :]


def relative_position_bucket(
    relative_position: jax.Array, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> jax.Array:
    """T5's bucketing of relative_position = key_pos - query_pos.

    Half the buckets (per direction when bidirectional) hold exact small distances, the rest
    cover distances up to max_distance logarithmically; farther distances share the last bucket.
    """
    bucket = jnp.zeros_like(relative_position)
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).astype(jnp.int32) * num_buckets
        n = jnp.abs(n)
    else:
        n = jnp.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    n_safe = jnp.maximum(n, 1).astype(jnp.float32)
    log_ratio = jnp.log(n_safe / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
    large = jnp.minimum(large, num_buckets - 1)
    return bucket + jnp.where(is_small, n, large)

"""Dropout with cheap masks, and a key sequence that hands each dropout site its own key.

Threefry bits are the dominant cost of dropout on CPU. One 32-bit draw is sliced into four
8-bit uniforms, so a mask costs a quarter of the random bits. The drop rate is rounded to a
multiple of 1/256 (0.1 -> 26/256 = 0.1016) and kept units are scaled by 1 / keep-rate actually
used, so the layer stays unbiased in expectation.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


class KeySeq:
    """Deterministic stream of PRNG keys for dropout sites, advanced at trace time."""

    def __init__(self, key: jax.Array):
        self.key = key
        self.count = 0

    def next(self) -> jax.Array:
        self.count += 1
        return jax.random.fold_in(self.key, self.count)


def dropout(x: jax.Array, rate: float, keys: KeySeq | None) -> jax.Array:
    """Zeroes each element with probability ~rate (see module docstring); identity if keys None."""
    if keys is None or rate == 0.0:
        return x
    threshold = round(rate * 256)
    if threshold == 0:
        return x
    keep_rate = 1.0 - threshold / 256
    size = math.prod(x.shape)
    words = jax.random.bits(keys.next(), ((size + 3) // 4,), jnp.uint32)
    bytes_ = jax.lax.bitcast_convert_type(words, jnp.uint8).reshape(-1)[:size]
    keep = (bytes_ >= threshold).reshape(x.shape)
    return jnp.where(keep, x * jnp.asarray(1.0 / keep_rate, x.dtype), jnp.zeros((), x.dtype))

"""Dropout with exact rates and cheap masks, and a key sequence that hands each dropout site
its own key.

A site drops each element with probability exactly `rate` and scales the kept ones by
1 / (1 - rate). Threefry bits are the dominant cost of dropout on CPU, so the mask uses the
narrowest uniform that represents the rate exactly: a rate that is a multiple of 1/256
(0.125, 0.25, 26/256 = 0.1016...) compares one byte per element, four elements per 32-bit
draw; any other rate (0.1) one 32-bit word per element, its threshold round(rate * 2^32), so
the rate is represented to within 2^-33 (a float64 rate's own precision, near 0.1, is
1e-17: finer, but no configured rate means anything at that scale). A positive rate below
MIN_RATE cannot be represented and is refused (`check_rate`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

WIDE_BITS = 32
MIN_RATE = 2.0**-WIDE_BITS  # the smallest positive rate a 32-bit threshold represents


class KeySeq:
    """Deterministic stream of PRNG keys for dropout sites, advanced at trace time."""

    def __init__(self, key: jax.Array):
        self.key = key
        self.count = 0

    def next(self) -> jax.Array:
        self.count += 1
        return jax.random.fold_in(self.key, self.count)


def check_rate(name: str, rate: float) -> None:
    """ValueError naming `name` for a rate outside [0, 1) or too small to represent."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {rate!r}")
    if 0.0 < rate < MIN_RATE:
        raise ValueError(
            f"{name}={rate!r} is below {MIN_RATE:.3g}, the smallest rate dropout represents "
            "(2^-32); use 0 for no dropout"
        )


def mask_width(rate: float) -> tuple[int, int]:
    """(bits per uniform, threshold): an element is dropped when its uniform is below the
    threshold. 8 bits when rate * 256 is a whole number, else 32."""
    if float(rate * 256).is_integer():
        return 8, int(rate * 256)
    return WIDE_BITS, min(round(rate * 2**WIDE_BITS), 2**WIDE_BITS - 1)


def dropout(x: jax.Array, rate: float, keys: KeySeq | None) -> jax.Array:
    """Zeroes each element with probability `rate` (see module docstring) and scales the rest
    by 1 / (1 - rate); identity when keys is None or the rate 0."""
    if keys is None or rate == 0.0:
        return x
    check_rate("dropout rate", rate)
    bits, threshold = mask_width(rate)
    uniforms = _uniforms(keys.next(), x.shape, bits)
    keep = uniforms >= jnp.asarray(threshold, uniforms.dtype)
    scale = jnp.asarray(1.0 / (1.0 - threshold / 2**bits), x.dtype)
    return jnp.where(keep, x * scale, jnp.zeros((), x.dtype))


def _uniforms(key: jax.Array, shape: tuple[int, ...], bits: int) -> jax.Array:
    """Independent uniform integers of `bits` bits, [shape]."""
    if bits == WIDE_BITS:
        return jax.random.bits(key, shape, jnp.uint32)
    size = math.prod(shape)
    words = jax.random.bits(key, ((size + 3) // 4,), jnp.uint32)
    bytes_ = jax.lax.bitcast_convert_type(words, jnp.uint8).reshape(-1)[:size]
    return bytes_.reshape(shape)

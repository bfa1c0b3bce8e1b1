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

Where the bits come from is a `DropoutBits` chosen when the model is built (`BIT_SOURCES`,
train.dropout_bits): 'threefry' draws them with JAX's default generator from the site's key;
'philox' turns the site's key into a Philox4x32 state (one 4-word threefry draw) and lets
XLA's RngBitGenerator produce the mask's bits, a counter-based generator that GPUs run as one
cheap kernel where threefry's rounds are a long chain of integer operations. Both are pure
functions of the site's key, so masks differ between sites, repeat exactly for the same
step and key (resume is bit-exact), and the thresholds (the rates) are the same.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

WIDE_BITS = 32
MIN_RATE = 2.0**-WIDE_BITS  # the smallest positive rate a 32-bit threshold represents


class DropoutBits:
    """Where a dropout site's uniform bits come from (module docstring)."""

    name = ""

    def bits(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Independent uniform uint32 words [shape], a pure function of `key`."""
        raise NotImplementedError

    def __eq__(self, other):  # stateless: one per name, so graphdefs built apart compare equal
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class ThreefryBits(DropoutBits):
    """JAX's default generator (threefry2x32) applied to the site's key."""

    name = "threefry"

    def bits(self, key, shape):
        return jax.random.bits(key, shape, jnp.uint32)


class PhiloxBits(DropoutBits):
    """XLA's RngBitGenerator (Philox4x32) from a 4-word state drawn from the site's key."""

    name = "philox"

    def bits(self, key, shape):
        state = jax.random.bits(key, (4,), jnp.uint32)
        algorithm = jax.lax.RandomAlgorithm.RNG_PHILOX
        _, words = jax.lax.rng_bit_generator(state, shape, jnp.uint32, algorithm=algorithm)
        return words


# train.dropout_bits names; users may register their own DropoutBits subclass here.
BIT_SOURCES: dict[str, DropoutBits] = {
    source.name: source for source in (ThreefryBits(), PhiloxBits())
}
THREEFRY = BIT_SOURCES["threefry"]


class KeySeq:
    """Deterministic stream of PRNG keys for dropout sites, advanced at trace time; `bits`
    draws each site's mask bits from its key."""

    def __init__(self, key: jax.Array, bits: DropoutBits = THREEFRY):
        self.key = key
        self.count = 0
        self.bits = bits

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
    # The scope names these ops in profiles (benchmarks/experiments/profile_kinds.py).
    with jax.named_scope("dropout"):
        bits, threshold = mask_width(rate)
        uniforms = _uniforms(keys.bits, keys.next(), x.shape, bits)
        keep = uniforms >= jnp.asarray(threshold, uniforms.dtype)
        scale = jnp.asarray(1.0 / (1.0 - threshold / 2**bits), x.dtype)
        return jnp.where(keep, x * scale, jnp.zeros((), x.dtype))


def _uniforms(source: DropoutBits, key: jax.Array, shape: tuple[int, ...], bits: int) -> jax.Array:
    """Independent uniform integers of `bits` bits, [shape], from `source`."""
    if bits == WIDE_BITS:
        return source.bits(key, shape)
    size = math.prod(shape)
    words = source.bits(key, ((size + 3) // 4,))
    bytes_ = jax.lax.bitcast_convert_type(words, jnp.uint8).reshape(-1)[:size]
    return bytes_.reshape(shape)

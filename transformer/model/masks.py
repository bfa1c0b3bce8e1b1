"""Attention masks, segment bookkeeping and the per-segment target shift."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from transformer.common.special_ids import BOS_ID, PAD_ID


@dataclasses.dataclass(frozen=True)
class SelfAttentionInputs:
    """What every layer of a stack shares: mask [B, 1, T, S], the positional scheme's bias
    [B, H, T, S] and its rotation of queries and keys (position_schemes)."""

    mask: jax.Array
    bias: jax.Array | None
    rotate: Callable[[jax.Array], jax.Array] | None


def default_segments(tokens, segments=None, positions=None):
    """One sentence per row unless told otherwise: segment 1 on tokens, 0 on padding."""
    if segments is None:
        segments = (tokens != PAD_ID).astype(jnp.int32)
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return segments, positions


def segment_mask(q_segments: jax.Array, k_segments: jax.Array) -> jax.Array:
    """[B, Tq], [B, Tk] -> bool [B, 1, Tq, Tk]: same segment and the key is not padding.

    Padding queries attend to nothing useful; their outputs are never used (loss mask).
    """
    same = q_segments[:, :, None] == k_segments[:, None, :]
    return (same & (k_segments != 0)[:, None, :])[:, None]


def causal_mask(tq: int, tk: int) -> jax.Array:
    """bool [1, 1, Tq, Tk]: query i sees keys j <= i."""
    return (jnp.arange(tk)[None, :] <= jnp.arange(tq)[:, None])[None, None]


def shift_right(targets: jax.Array, segments: jax.Array | None, bos_id: int = BOS_ID) -> jax.Array:
    """Decoder inputs from targets [B, T]: BOS then the targets shifted right by one,
    restarting at every segment of a packed row (no token leaks across sentences)."""
    shifted = jnp.pad(targets, ((0, 0), (1, 0)), constant_values=PAD_ID)[:, :-1]
    if segments is None:
        starts = jnp.zeros_like(targets, dtype=bool).at[:, 0].set(True)
    else:
        prev = jnp.pad(segments, ((0, 0), (1, 0)))[:, :-1]
        starts = segments != prev
    shifted = jnp.where(starts, bos_id, shifted)
    real = targets != PAD_ID if segments is None else segments != 0
    return jnp.where(real, shifted, PAD_ID)

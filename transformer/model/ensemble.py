"""Several trained networks decoding as one: at every step the ensemble's next-token
distribution is the softmax of the mean of its members' log-probabilities (a normalised
geometric mean of their distributions; K copies of one network give that network's).

`Ensemble` offers the decoding interface of `Transformer` (encode, cross_kv, cached decode,
init_cache, grow_cache), each member with its own encoder output, cross-attention keys and
values and KV cache, held as tuples in member order, so the translator's one compiled loop
runs every member at each step. Members may differ in architecture but must share the
vocabulary (evaluation.ensemble checks the tokenizers).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.model.transformer import Transformer


class Ensemble(nnx.Module):
    def __init__(self, members: list[Transformer]):
        if len(members) < 1:
            raise ValueError("an ensemble needs at least one member")
        vocab = {m.cfg.vocab_size for m in members}
        if len(vocab) > 1:
            raise ValueError(f"ensemble members disagree on the vocabulary size: {sorted(vocab)}")
        self.members = nnx.List(members)

    def encode(self, src: jax.Array, *, src_segments: jax.Array) -> tuple[jax.Array, ...]:
        """src [B, S] -> each member's encoder output [B, S, d_i]."""
        return tuple(m.encode(src, src_segments=src_segments) for m in self.members)

    def cross_kv(self, encoded: tuple) -> tuple:
        return tuple(m.cross_kv(e) for m, e in zip(self.members, encoded, strict=True))

    def decode(self, encoded, src_segments, tgt_in, *, cross_kv, cache, cache_index):
        """Cached decoding (as Transformer.decode with a cache): returns (the mean of the
        members' log-probabilities [R, T, V] float32, the members' updated caches)."""
        logps, caches = [], []
        for member, kv, member_cache in zip(self.members, cross_kv, cache, strict=True):
            logits, member_cache = member.decode(
                None, src_segments, tgt_in, cross_kv=kv, cache=member_cache, cache_index=cache_index
            )
            logps.append(jax.nn.log_softmax(logits, axis=-1))
            caches.append(member_cache)
        return jnp.mean(jnp.stack(logps), axis=0), tuple(caches)

    def init_cache(self, batch_size: int, max_len: int, dtype=None) -> tuple:
        return tuple(m.init_cache(batch_size, max_len, dtype) for m in self.members)

    @staticmethod
    def grow_cache(cache: tuple, max_len: int) -> tuple:
        return tuple(Transformer.grow_cache(c, max_len) for c in cache)

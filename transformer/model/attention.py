"""Multi-head attention with grouped key/value heads (MHA, GQA, MQA) and a functional KV cache.

Shapes: B batch, T query length, S key length, H query heads, K key/value heads, G = H / K
query heads per key/value head, D head dim. Keys and values are laid out [B, K, S, D], the
layout of the decode cache, so a decode step reads the cache without transposing it.
What analysis sees of a module (its probabilities, head masks) is chosen when it is built
(`instrumentation.Instrumentation`); by default the traced program holds neither.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.model.differentiation import AUTODIFF, Differentiation
from transformer.model.dropout import KeySeq, dropout
from transformer.model.instrumentation import PLAIN, HeadMask, Instrumentation
from transformer.model.layers import _dtype, fused_product
from transformer.model.position_schemes import Rotation
from transformer.model.projection_policy import TRAINED, ProjectionPolicy

NEG_INF = -1e9  # additive mask value; softmax runs in float32 so this cannot overflow


@jax.named_scope("attention")  # names its ops in profiles (profile_kinds.py)
def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    bias: jax.Array | None,
    dropout_rate: float = 0.0,
    keys: KeySeq | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention.

    q [B, T, H, D]; k, v [B, K, S, D]; mask bool broadcastable to [B, H, T, S] (True = attend);
    bias float broadcastable to [B, H, T, S].
    Returns (output [B, T, H, D], probabilities [B, H, T, S] in float32).
    """
    b, t, h, d = q.shape
    kv = k.shape[1]
    g = h // kv
    k, v = k.astype(q.dtype), v.astype(q.dtype)  # a narrower cache is read, computed as q
    q = q.reshape(b, t, kv, g, d) * jnp.asarray(d**-0.5, q.dtype)
    scores = jnp.einsum("btkgd,bksd->bkgts", q, k, preferred_element_type=jnp.float32)
    scores = scores.reshape(b, h, t, -1)  # [B, H, T, S]
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = jnp.where(mask, scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1)  # float32
    dropped = dropout(probs, dropout_rate, keys).astype(v.dtype)
    out = jnp.einsum("bkgts,bksd->btkgd", dropped.reshape(b, kv, g, t, -1), v)
    return out.reshape(b, t, h, d), probs


@jax.named_scope("attention")
def attend_fused(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    bias: jax.Array | None,
    implementation: str,
) -> jax.Array:
    """`attend` by jax.nn.dot_product_attention ('xla' or 'cudnn'): same shapes in, the
    output [B, T, H, D] only (the fused kernels keep no probabilities)."""
    t, s = q.shape[1], k.shape[2]
    k, v = (a.astype(q.dtype).transpose(0, 2, 1, 3) for a in (k, v))  # [B, S, K, D]
    # cuDNN takes masks and biases as [B|1, H|1, T, S] only; broadcasting here costs XLA nothing.
    if mask is not None:
        mask = jnp.broadcast_to(mask, (*mask.shape[:2], t, s))
    if bias is not None:
        bias = jnp.broadcast_to(bias, (*bias.shape[:2], t, s)).astype(q.dtype)
    return jax.nn.dot_product_attention(
        q, k, v, bias=bias, mask=mask, scale=q.shape[-1] ** -0.5, implementation=implementation
    )


class Attention(nnx.Module):
    """Self- or cross-attention sublayer: projections, the positional scheme's rotation,
    attend, output projection; with `instrumentation`, its probabilities sown and its heads
    masked (instrumentation.py). Its linear layers are `projections`' for `place` (the
    queries and output) and `kv_place` (the keys and values; default `place`); a policy that
    fuses self-attention's query, key and value layers gives one `qkv` layer instead."""

    def __init__(
        self,
        cfg,
        *,
        out_init_scale: float,
        rngs: nnx.Rngs,
        differentiation: Differentiation = AUTODIFF,
        instrumentation: Instrumentation = PLAIN,
        projections: ProjectionPolicy = TRAINED,
        place: str = "encoder",
        kv_place: str | None = None,
    ):
        self.num_heads = cfg.num_heads
        self.kv_heads = cfg.kv_heads
        self.head_dim = cfg.head_dim
        self.dtype = _dtype(cfg)
        self.attention_dropout_rate = cfg.attention_dropout_rate
        self.attention_impl = cfg.attention_impl
        common = dict(
            use_bias=cfg.use_bias, dtype=self.dtype, rngs=rngs, differentiation=differentiation
        )
        d, q_width, kv_width = (
            cfg.d_model,
            cfg.num_heads * cfg.head_dim,
            cfg.kv_heads * cfg.head_dim,
        )
        kv_place = kv_place or place
        self.qkv = (  # None: separate layers
            projections.fused_qkv(
                place, d, (q_width, kv_width, kv_width), use_bias=cfg.use_bias, dtype=self.dtype
            )
            if kv_place == place
            else None
        )
        # Self-attention's three trained layers multiplied as one (projection_policy).
        self.fuse_trained_qkv = (
            self.qkv is None and kv_place == place and projections.fuse_trained_qkv
        )
        if self.qkv is None:
            self.query = projections.linear(place, d, q_width, **common)
            self.key = projections.linear(kv_place, d, kv_width, **common)
            self.value = projections.linear(kv_place, d, kv_width, **common)
        self.out = projections.linear(place, q_width, d, init_scale=out_init_scale, **common)
        self.head_mask = (
            HeadMask(jnp.ones((cfg.num_heads,))) if instrumentation.head_masks else None
        )
        self.sow_probabilities = instrumentation.capture_attention

    def project_kv(
        self, x: jax.Array, rotate: Rotation | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """x [B, S, d] -> keys, values [B, K, S, D]; keys rotated by `rotate` when given (the
        positional scheme's rotation at the keys' positions)."""
        b, s, _ = x.shape
        k = self.key(x).reshape(b, s, self.kv_heads, self.head_dim)
        v = self.value(x).reshape(b, s, self.kv_heads, self.head_dim)
        if rotate is not None:
            k = rotate(k)
        return k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)

    def project_q(self, x: jax.Array, rotate: Rotation | None = None) -> jax.Array:
        b, t, _ = x.shape
        q = self.query(x).reshape(b, t, self.num_heads, self.head_dim)
        if rotate is not None:
            q = rotate(q)
        return q

    def project_qkv(
        self, x: jax.Array, rotate: Rotation | None = None
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """Self-attention's projections of x [B, T, d]: (queries [B, T, H, D], (keys, values)
        [B, K, T, D]), in one product when the projection policy fused them (`qkv`, or the
        trained layers side by side: `fuse_trained_qkv`)."""
        b, t, _ = x.shape
        if self.fuse_trained_qkv:
            q, k, v = fused_product([self.query, self.key, self.value], x)
        elif self.qkv is None:
            return self.project_q(x, rotate), self.project_kv(x, rotate)
        else:
            q_width, kv_width = self.num_heads * self.head_dim, self.kv_heads * self.head_dim
            qkv = self.qkv(x)  # [B, T, q_width + 2 kv_width]
            q, k, v = jnp.split(qkv, [q_width, q_width + kv_width], axis=-1)
        q = q.reshape(b, t, self.num_heads, self.head_dim)
        k = k.reshape(b, t, self.kv_heads, self.head_dim)
        v = v.reshape(b, t, self.kv_heads, self.head_dim)
        if rotate is not None:
            q, k = rotate(q), rotate(k)
        return q, (k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))

    def __call__(
        self,
        x: jax.Array,
        kv: tuple[jax.Array, jax.Array],
        *,
        mask: jax.Array | None,
        bias: jax.Array | None,
        rotate: Rotation | None,
        keys: KeySeq | None,
        q: jax.Array | None = None,
    ) -> jax.Array:
        """Attends queries from x [R, T, d] to projected (keys, values) [B, K, S, D]; q, the
        queries [R, T, H, D] when already projected (project_qkv), skips the projection.

        R is B, or a multiple of it when rows b * (R / B) + j (the beams or samples of
        element b) share element b's keys and values (cross-attention while decoding): their
        queries then attend as one block of (R / B) * T queries, so the keys and values are
        read once per element instead of once per row; mask and bias must not depend on the
        row within a group. Returns the output [R, T, d].
        """
        if q is None:
            q = self.project_q(x, rotate)  # [R, T, H, D]
        rows, t = q.shape[:2]
        group = rows // kv[0].shape[0]
        if group > 1:  # rows b * group + j share element b's keys/values: one query block
            q = q.reshape(rows // group, group * t, *q.shape[2:])  # [B, group * T, H, D]
        dropping = keys is not None and self.attention_dropout_rate > 0
        if self.attention_impl != "einsum" and not (dropping or self.sow_probabilities):
            out = attend_fused(q, kv[0], kv[1], mask, bias, self.attention_impl)
        else:
            out, probs = attend(q, kv[0], kv[1], mask, bias, self.attention_dropout_rate, keys)
            if self.sow_probabilities:
                self.sow(nnx.Intermediate, "probabilities", probs)
        if self.head_mask is not None:
            out = out * self.head_mask[...].astype(out.dtype)[None, None, :, None]  # [B, T, H, D]
        return self.out(out.reshape(rows, t, self.num_heads * self.head_dim))

"""The encoder-decoder Transformer (Flax NNX): blocks, stacks and the full model.

Inputs are int32 token ids with 0 = padding. Packed rows (several sentences per row) are
described by segment ids (1, 2, ... per sentence, 0 on padding) and positions that restart at
each segment; when omitted they are derived from the tokens (one sentence per row).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.model import masks
from transformer.model.attention import Attention
from transformer.model.config import ModelConfig
from transformer.model.differentiation import AUTODIFF, Differentiation
from transformer.model.dropout import THREEFRY, DropoutBits, KeySeq, dropout
from transformer.model.instrumentation import PLAIN, Instrumentation
from transformer.model.layers import Embed, FeedForward, _dtype
from transformer.model.normalization import NORMS, PLACEMENTS, Normalization, NormPlacement
from transformer.model.position_schemes import SCHEMES, PositionScheme
from transformer.model.projection_policy import TRAINED, ProjectionPolicy

Cache = list[dict[str, jax.Array]]  # per decoder layer: {'k', 'v'} [B, K, max_len, D]


class Sublayer(nnx.Module):
    """Residual wrapper around a sublayer fn: its normalisation (model.norm_type) placed as
    model.norm_position says (normalization.py), residual dropout on fn's output."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.placement: NormPlacement = PLACEMENTS[cfg.norm_position](cfg)
        self.norm: Normalization = NORMS[cfg.norm_type](cfg, rngs=rngs)
        self.dropout_rate = cfg.dropout_rate

    def __call__(self, x, fn, keys: KeySeq | None):
        """x [B, T, d] -> [B, T, d]."""
        return self.placement(x, fn, self.norm, lambda y: dropout(y, self.dropout_rate, keys))


class EncoderBlock(nnx.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        *,
        out_init_scale: float,
        rngs: nnx.Rngs,
        differentiation: Differentiation,
        instrumentation: Instrumentation,
        projections: ProjectionPolicy,
    ):
        layers = dict(out_init_scale=out_init_scale, rngs=rngs, differentiation=differentiation)
        attention = dict(layers, instrumentation=instrumentation, projections=projections)
        self.self_attention = Attention(cfg, place="encoder", **attention)
        self.ffn = FeedForward(cfg, linear=_linear(projections, "encoder"), **layers)
        self.attention_sublayer = Sublayer(cfg, rngs=rngs)
        self.ffn_sublayer = Sublayer(cfg, rngs=rngs)

    def __call__(self, x, ctx: masks.SelfAttentionInputs, keys):
        def self_attend(h):
            q, kv = self.self_attention.project_qkv(h, ctx.rotate)
            return self.self_attention(
                h, kv, mask=ctx.mask, bias=ctx.bias, rotate=ctx.rotate, keys=keys, q=q
            )

        x = self.attention_sublayer(x, self_attend, keys)
        return self.ffn_sublayer(x, lambda h: self.ffn(h, keys), keys)


class DecoderBlock(nnx.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        *,
        out_init_scale: float,
        rngs: nnx.Rngs,
        differentiation: Differentiation,
        instrumentation: Instrumentation,
        projections: ProjectionPolicy,
    ):
        layers = dict(out_init_scale=out_init_scale, rngs=rngs, differentiation=differentiation)
        attention = dict(layers, instrumentation=instrumentation, projections=projections)
        # 'step' layers run once per generated token; the cross-attention keys and values
        # ('memory') once per source (projection_policy.PLACES).
        self.self_attention = Attention(cfg, place="step", **attention)
        self.cross_attention = Attention(cfg, place="step", kv_place="memory", **attention)
        self.ffn = FeedForward(cfg, linear=_linear(projections, "step"), **layers)
        self.self_sublayer = Sublayer(cfg, rngs=rngs)
        self.cross_sublayer = Sublayer(cfg, rngs=rngs)
        self.ffn_sublayer = Sublayer(cfg, rngs=rngs)

    def __call__(
        self,
        x,
        ctx: masks.SelfAttentionInputs,
        cross_kv,
        cross_mask,
        keys,
        *,
        cache: dict[str, jax.Array] | None = None,
        cache_index: jax.Array | None = None,
    ):
        """Returns (x, updated cache or None). With a cache, x holds the tokens at positions
        cache_index..cache_index+T-1 and their keys/values are written into the cache."""
        new_cache = None

        def self_attend(h):
            nonlocal new_cache
            q, (k, v) = self.self_attention.project_qkv(h, ctx.rotate)  # k, v [B, K, T, D]
            if cache is not None:
                start = (0, 0, cache_index, 0)
                k = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), start)
                v = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), start)
                new_cache = {"k": k, "v": v}
            return self.self_attention(
                h, (k, v), mask=ctx.mask, bias=ctx.bias, rotate=ctx.rotate, keys=keys, q=q
            )

        def cross_attend(h):
            return self.cross_attention(
                h, cross_kv, mask=cross_mask, bias=None, rotate=None, keys=keys
            )

        x = self.self_sublayer(x, self_attend, keys)
        x = self.cross_sublayer(x, cross_attend, keys)
        x = self.ffn_sublayer(x, lambda h: self.ffn(h, keys), keys)
        return x, new_cache


class Transformer(nnx.Module):
    """Encoder-decoder Transformer; ``model(src, tgt_in)`` returns float32 logits [B, T, V]."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        rngs: nnx.Rngs,
        differentiation: Differentiation = AUTODIFF,
        instrumentation: Instrumentation = PLAIN,
        projections: ProjectionPolicy = TRAINED,
        dropout_bits: DropoutBits = THREEFRY,
    ):
        """differentiation: how the backward pass runs (differentiation.py; values unchanged);
        instrumentation: what analysis sees (instrumentation.py; default nothing);
        projections: what the linear layers hold (projection_policy.py; default trainable
        Dense parameters, decoding_network.py builds the decode-time copies);
        dropout_bits: where training's dropout masks draw their bits (dropout.py)."""
        if cfg.vocab_size is None:
            raise ValueError(
                "ModelConfig.vocab_size is None: give the vocabulary size (train.py takes it "
                "from the run's tokenizer)"
            )
        self.cfg = cfg
        self.differentiation = differentiation
        self.instrumentation = instrumentation
        self.dropout_bits = dropout_bits
        embed = dict(rngs=rngs, differentiation=differentiation)
        blocks = dict(embed, instrumentation=instrumentation, projections=projections)
        self.src_embed = Embed(cfg.vocab_size, cfg.d_model, **embed)
        self.tgt_embed = (
            None if cfg.share_embeddings else Embed(cfg.vocab_size, cfg.d_model, **embed)
        )
        # The positional scheme of each stack's self-attention (position_schemes).
        scheme = SCHEMES[cfg.position]
        self.encoder_positions: PositionScheme = scheme(cfg, causal=False, rngs=rngs)
        self.decoder_positions: PositionScheme = scheme(cfg, causal=True, rngs=rngs)
        enc_scale = _residual_scale(cfg, cfg.num_encoder_layers)
        dec_scale = _residual_scale(cfg, cfg.num_decoder_layers)
        self.encoder_layers = nnx.List(
            [
                EncoderBlock(cfg, out_init_scale=enc_scale, **blocks)
                for _ in range(cfg.num_encoder_layers)
            ]
        )
        self.decoder_layers = nnx.List(
            [
                DecoderBlock(cfg, out_init_scale=dec_scale, **blocks)
                for _ in range(cfg.num_decoder_layers)
            ]
        )
        placement = PLACEMENTS[cfg.norm_position]
        self.encoder_norm = placement.stack_norm(cfg, rngs=rngs)  # None: the stack ends as is
        self.decoder_norm = placement.stack_norm(cfg, rngs=rngs)
        self.output = projections.output(cfg, rngs=rngs)  # None: the tied embedding's
        self.output_bias = (  # added to the logits (Marian's final_logits_bias)
            nnx.Param(jnp.zeros((cfg.vocab_size,), jnp.float32)) if cfg.output_bias else None
        )

    # ----------------------------------------------------------------------------- embedding

    @property
    def target_embedding(self) -> Embed:
        return self.src_embed if self.tgt_embed is None else self.tgt_embed

    def _embed(self, tokens, positions, embed: Embed, scheme: PositionScheme, keys):
        """Scaled token embedding plus what the positional scheme adds to it."""
        x = embed(tokens) * math.sqrt(self.cfg.d_model)  # [B, T, d] float32
        x = scheme.embed(x, positions)
        return dropout(x, self.cfg.dropout_rate, keys)  # residual stream stays float32

    @staticmethod
    def _check_length(length: int, what: str, scheme: PositionScheme):
        limit = scheme.max_length
        if limit is not None and length > limit:
            raise ValueError(
                f"{what} length {length} exceeds the {limit} positions of position="
                f"{scheme.name!r} (model.max_len={limit}); truncate the input or raise "
                "model.max_len"
            )

    @staticmethod
    def _self_attention_inputs(scheme: PositionScheme, mask, q_positions, k_positions):
        return masks.SelfAttentionInputs(
            mask=mask,
            bias=scheme.bias(q_positions, k_positions),
            rotate=scheme.rotation(q_positions),
        )

    # -------------------------------------------------------------------------------- encoder

    def encode(
        self,
        src: jax.Array,
        *,
        src_segments: jax.Array | None = None,
        src_positions: jax.Array | None = None,
        keys: KeySeq | None = None,
    ) -> jax.Array:
        """src [B, S] -> encoder output [B, S, d]."""
        scheme = self.encoder_positions
        self._check_length(src.shape[1], "source", scheme)
        src_segments, src_positions = masks.default_segments(src, src_segments, src_positions)
        x = self._embed(src, src_positions, self.src_embed, scheme, keys)
        mask = masks.segment_mask(src_segments, src_segments)
        ctx = self._self_attention_inputs(scheme, mask, src_positions, src_positions)
        for layer in self.encoder_layers:
            x = self.differentiation.block(lambda block, h: block(h, ctx, keys))(layer, x)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x

    # -------------------------------------------------------------------------------- decoder

    def cross_kv(self, encoded: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
        """Cross-attention keys/values of every decoder layer, computed once per source."""
        return [layer.cross_attention.project_kv(encoded) for layer in self.decoder_layers]

    def decode(
        self,
        encoded: jax.Array,
        src_segments: jax.Array,
        tgt_in: jax.Array,
        *,
        tgt_segments: jax.Array | None = None,
        tgt_positions: jax.Array | None = None,
        cross_kv: list | None = None,
        cache: Cache | None = None,
        cache_index: jax.Array | None = None,
        keys: KeySeq | None = None,
    ) -> tuple[jax.Array, Cache | None]:
        """Decoder pass: returns (float32 logits [B, T, V], updated cache or None).

        Teacher forcing: cache None, tgt_in [B, T] (BOS first). Cached decoding: tgt_in holds
        the tokens at positions cache_index..cache_index+T-1 (T = 1 per step); src_segments
        [B, S] marks source padding with 0. Cached decoding may give G target rows per source
        (tgt_in and cache [B * G, ...], rows b * G + j for source b, as beams and samples
        are laid out) with cross_kv and src_segments per source [B, ...]: the sources' keys
        and values are then read once per source, not once per row.
        """
        tgt_segments, tgt_positions, ctx = self._decoder_self_attention_inputs(
            tgt_in, tgt_segments, tgt_positions, cache, cache_index
        )
        x = self._embed(tgt_in, tgt_positions, self.target_embedding, self.decoder_positions, keys)
        if src_segments.shape[0] == tgt_in.shape[0]:
            cross_mask = masks.segment_mask(tgt_segments, src_segments)  # [B, 1, T, S]
        elif cache is not None:  # beams/samples per source: cross_kv and segments per source
            cross_mask = (src_segments != 0)[:, None, None, :]  # [B, 1, 1, S]
        else:
            raise ValueError(
                f"{tgt_in.shape[0]} target rows for {src_segments.shape[0]} sources: only "
                "cached decoding takes several target rows per source"
            )
        if cross_kv is None:
            cross_kv = self.cross_kv(encoded)
        new_cache = [] if cache is not None else None
        for i, layer in enumerate(self.decoder_layers):
            if cache is None:  # teacher forcing: the only pass that is differentiated

                def block_fn(block, h, kv=cross_kv[i]):
                    return block(h, ctx, kv, cross_mask, keys)[0]

                x = self.differentiation.block(block_fn)(layer, x)
                continue
            x, layer_cache = layer(
                x, ctx, cross_kv[i], cross_mask, keys, cache=cache[i], cache_index=cache_index
            )
            new_cache.append(layer_cache)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self.logits(x), new_cache

    def _decoder_self_attention_inputs(
        self, tgt_in, tgt_segments, tgt_positions, cache: Cache | None, cache_index
    ) -> tuple[jax.Array, jax.Array, masks.SelfAttentionInputs]:
        """(target segments [B, T], target positions [B, T], self-attention mask/bias/RoPE)."""
        b, t = tgt_in.shape
        if cache is None:
            self._check_length(t, "target", self.decoder_positions)
            tgt_segments, tgt_positions = masks.default_segments(
                tgt_in, tgt_segments, tgt_positions
            )
            k_positions = tgt_positions
            self_mask = masks.segment_mask(tgt_segments, tgt_segments) & masks.causal_mask(t, t)
        else:
            cache_len = cache[0]["k"].shape[2] if cache else self.cfg.max_len
            tgt_positions = cache_index + jnp.broadcast_to(jnp.arange(t), (b, t))
            tgt_segments = jnp.ones((b, t), jnp.int32)
            k_positions = jnp.broadcast_to(jnp.arange(cache_len), (b, cache_len))
            # The cache is the only mask needed: slot j is filled iff j <= the query's position.
            self_mask = (k_positions[:, None, :] <= tgt_positions[:, :, None])[:, None]
        ctx = self._self_attention_inputs(
            self.decoder_positions, self_mask, tgt_positions, k_positions
        )
        return tgt_segments, tgt_positions, ctx

    def logits(self, x: jax.Array) -> jax.Array:
        """Final projection to float32 logits (softmax and loss stay float32 under bf16); the
        tied product's operands in model.logits_dtype."""
        if self.output is None:
            dtype = _dtype(self.cfg) if self.cfg.logits_dtype == "compute" else jnp.float32
            logits = self.target_embedding.attend(x, dtype)
        else:
            logits = self.output(x.astype(jnp.float32))
        return logits if self.output_bias is None else logits + self.output_bias[...]

    def init_cache(self, batch_size: int, max_len: int | None = None, dtype=None) -> Cache:
        """Zeroed self-attention KV cache: per layer {'k', 'v'} [B, K, max_len, D], in dtype
        (default: the compute dtype)."""
        cfg = self.cfg
        shape = (batch_size, cfg.kv_heads, max_len or cfg.max_len, cfg.head_dim)
        zeros = jnp.zeros(shape, dtype or _dtype(cfg))
        return [{"k": zeros, "v": zeros} for _ in range(cfg.num_decoder_layers)]

    @staticmethod
    def grow_cache(cache: Cache, max_len: int) -> Cache:
        """The cache with empty slots appended up to max_len positions (a
        `search.CacheGrowth`'s grow): a step masks the slots past its position, so decoding
        with a cache that grows gives what decoding with the long one from the start does."""

        def grow(a):  # [B, K, L, D] -> [B, K, max_len, D]
            return jnp.pad(a, ((0, 0), (0, 0), (0, max_len - a.shape[2]), (0, 0)))

        return jax.tree.map(grow, cache)

    # ------------------------------------------------------------------------------- forward

    def __call__(
        self,
        src: jax.Array,
        tgt_in: jax.Array,
        *,
        src_segments: jax.Array | None = None,
        tgt_segments: jax.Array | None = None,
        src_positions: jax.Array | None = None,
        tgt_positions: jax.Array | None = None,
        deterministic: bool = True,
        dropout_rng: jax.Array | None = None,
    ) -> jax.Array:
        """Teacher-forced forward pass: src [B, S], tgt_in [B, T] -> logits [B, T, V] float32."""
        if not deterministic and dropout_rng is None:
            raise ValueError("deterministic=False needs dropout_rng (a PRNG key for dropout)")
        keys = None if deterministic else KeySeq(dropout_rng, self.dropout_bits)
        src_segments, src_positions = masks.default_segments(src, src_segments, src_positions)
        encoded = self.encode(
            src, src_segments=src_segments, src_positions=src_positions, keys=keys
        )
        logits, _ = self.decode(
            encoded,
            src_segments,
            tgt_in,
            tgt_segments=tgt_segments,
            tgt_positions=tgt_positions,
            keys=keys,
        )
        return logits


def _linear(projections: ProjectionPolicy, place: str):
    """The policy's linear-layer maker for one place in the network."""
    return functools.partial(projections.linear, place)


def _residual_scale(cfg: ModelConfig, num_layers: int) -> float:
    if cfg.residual_init_scale is not None:
        return cfg.residual_init_scale
    return 1.0 / math.sqrt(2 * max(num_layers, 1))


def count_params(model: nnx.Module) -> int:
    state = nnx.state(model, nnx.Param)
    return sum(x.size for x in jax.tree.leaves(state))


def param_shapes(cfg: ModelConfig) -> Any:
    """Builds the model abstractly (no allocation) and returns its parameter shapes."""
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    return nnx.state(abstract, nnx.Param)

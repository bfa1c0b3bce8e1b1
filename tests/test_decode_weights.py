"""Decode-time weight copies against the training layout: the same logits and tokens for every
layout and model shape, one fused product for self-attention's Q/K/V, parameters untouched."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.decode_weights import (
    AUTO_OUT_IN_MAX_ROWS,
    prepare_decoder,
    resolve_layout,
)

SRC = jnp.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0]], jnp.int32)
TGT = jnp.array([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]], jnp.int32)
SEGMENTS = (SRC != 0).astype(jnp.int32)

MODELS = {  # every switch the copies must carry: biases, GQA splits, RoPE on q/k, gates, untied
    "post_ln_bias": dict(norm_position="post", use_bias=True),
    "gqa_rope_nobias": dict(num_heads=4, num_kv_heads=2, position="rope", use_bias=False),
    "swiglu_untied": dict(activation="swiglu", tie_output=False, share_embeddings=False),
}


def _decode(graphdef, params, layout, *, cached: bool):
    """Teacher-forced logits [B, T, V] of TGT, either in one call or one cached step at a time."""
    m = nnx.merge(graphdef, params)
    encoded = m.encode(SRC, src_segments=SEGMENTS)
    cross_kv = m.cross_kv(encoded)
    if layout is not None:
        prepare_decoder(m, layout=layout)
    if not cached:
        return m.decode(encoded, SEGMENTS, TGT, cross_kv=cross_kv)[0]
    cache, steps = m.init_cache(SRC.shape[0], TGT.shape[1]), []
    for i in range(TGT.shape[1]):
        logits, cache = m.decode(
            encoded,
            SEGMENTS,
            TGT[:, i : i + 1],
            cross_kv=cross_kv,
            cache=cache,
            cache_index=jnp.asarray(i),
        )
        steps.append(logits)
    return jnp.concatenate(steps, axis=1)


@pytest.mark.parametrize(
    "name",  # one representative in the fast tier: GQA splits, RoPE and no biases at once
    [
        pytest.param(n, marks=[] if n == "gqa_rope_nobias" else [pytest.mark.slow])
        for n in sorted(MODELS)
    ],
)
def test_every_layout_gives_the_training_layouts_logits(name):
    model = Transformer(tiny_model_config(d_model=32, **MODELS[name]), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    for cached in (False, True):
        fn = jax.jit(
            lambda p, layout, c=cached: _decode(graphdef, p, layout, cached=c), static_argnums=1
        )
        plain = np.asarray(fn(params, None))
        for layout in ("in_out", "out_in"):
            np.testing.assert_allclose(fn(params, layout), plain, atol=1e-5, rtol=1e-5)
    for _, module in nnx.iter_modules(nnx.merge(graphdef, params)):  # copies on the merge only
        for field in ("decode_projection", "decode_qkv", "decode_output"):
            assert getattr(module, field, None) is None


def test_self_attention_projects_q_k_v_in_one_product():
    model = Transformer(tiny_model_config(num_decoder_layers=2), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    def products(layout):  # dot_generals in one cached decode step
        def step(p):
            m = nnx.merge(graphdef, p)
            encoded = m.encode(SRC, src_segments=SEGMENTS)
            cross_kv = m.cross_kv(encoded)
            if layout is not None:
                prepare_decoder(m, layout=layout)
            cache = m.init_cache(SRC.shape[0], 4)
            return m.decode(
                encoded,
                SEGMENTS,
                TGT[:, :1],
                cross_kv=cross_kv,
                cache=cache,
                cache_index=jnp.asarray(0),
            )[0]

        return str(jax.make_jaxpr(step)(params)).count("dot_general")

    # Per decoder layer, three self-attention projections become one: 2 fewer products each.
    assert products(None) - products("out_in") == 2 * 2
    assert products(None) - products("in_out") == 2 * 2


def test_bfloat16_copies_match_the_training_layouts_bfloat16_products():
    model = Transformer(tiny_model_config(d_model=32, dtype="bfloat16"), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    fn = jax.jit(lambda p, layout: _decode(graphdef, p, layout, cached=False), static_argnums=1)
    plain = np.asarray(fn(params, None))
    for layout in ("in_out", "out_in"):  # bfloat16 operands either way; the sums may reorder
        np.testing.assert_allclose(fn(params, layout), plain, atol=0.05 * np.abs(plain).max())


def test_auto_layout_picks_by_rows_per_product():
    assert resolve_layout("auto", AUTO_OUT_IN_MAX_ROWS) == "out_in"
    assert resolve_layout("auto", AUTO_OUT_IN_MAX_ROWS + 1) == "in_out"
    assert resolve_layout("in_out", 1) == "in_out" and resolve_layout("out_in", 512) == "out_in"


@pytest.mark.parametrize("strategy", ["greedy", pytest.param("beam", marks=pytest.mark.slow)])
def test_translator_tokens_do_not_depend_on_the_layout(strategy):
    model = Transformer(tiny_model_config(d_model=32), rngs=nnx.Rngs(1))
    graphdef, params = nnx.split(model)
    sources = [[5, 6, 7, 3], [9, 10, 3], [11, 12, 13, 14, 3]]
    results = {}
    for layout in ("auto", "in_out", "out_in"):
        settings = DecodeSettings(
            strategy=strategy, beam_size=3, max_len_a=0.0, max_len_b=6, weight_layout=layout
        )
        translator = Translator(graphdef, model.cfg, settings, None, None)
        results[layout] = translator.translate_ids(params, sources)
    ids = {layout: outputs for layout, (outputs, _) in results.items()}
    assert ids["auto"] == ids["in_out"] == ids["out_in"]
    with pytest.raises(UserError, match="decode.weight_layout 'kn'"):
        DecodeSettings(weight_layout="kn")

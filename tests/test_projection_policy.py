"""The decoding network against the trained one: the same logits and tokens for every weight
layout and model shape, one fused product for self-attention's Q/K/V, the trained network
and its parameters untouched, and its weight copies made once per parameter set."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import cached_logits, tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.inference.translator import DecodeSettings, Prepared, Translator
from transformer.model.decoding_network import decoding_network
from transformer.model.layers import Dense
from transformer.model.projection_policy import (
    AUTO_OUT_IN_MAX_ROWS,
    DecodeProjections,
    Projected,
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


def _decode(graphdef, params, policy, *, cached: bool):
    """Teacher-forced logits [B, T, V] of TGT by the trained network (policy None) or its
    decoding network, either in one call or one cached step at a time."""
    m = nnx.merge(graphdef, params)
    if policy is not None:
        m = decoding_network(m, policy)
    if cached:
        return cached_logits(m, SRC, TGT)
    encoded = m.encode(SRC, src_segments=SEGMENTS)
    return m.decode(encoded, SEGMENTS, TGT, cross_kv=m.cross_kv(encoded))[0]


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
    before = jax.tree.map(np.array, params)
    for cached in (False, True):
        fn = jax.jit(
            lambda p, policy, c=cached: _decode(graphdef, p, policy, cached=c), static_argnums=1
        )
        plain = np.asarray(fn(params, None))
        for layout in ("in_out", "out_in"):
            logits = fn(params, DecodeProjections(step_layout=layout))
            np.testing.assert_allclose(logits, plain, atol=1e-5, rtol=1e-5)
    # The trained network is read, never written: same graph, same parameter values.
    assert nnx.graphdef(model) == graphdef
    jax.tree.map(np.testing.assert_array_equal, nnx.state(model), before)
    assert not any(isinstance(m, Projected) for _, m in nnx.iter_modules(model))


def test_each_place_gets_the_copies_its_policy_names():
    model = Transformer(tiny_model_config(d_model=32, tie_output=True), rngs=nnx.Rngs(0))

    def kinds(policy):  # {module path: kind} of every linear layer of the decoding network
        net = decoding_network(model, policy)
        return {
            "/".join(map(str, path)): (type(m).__name__, getattr(m, "layout", None))
            for path, m in nnx.iter_modules(net)
            if isinstance(m, Dense | Projected)
        }

    untouched = kinds(DecodeProjections(step_layout="none"))
    assert {kind for kind in untouched.values()} == {("Dense", None)}
    assert "output" not in untouched  # tied: the embedding's own attend, as in training
    step = kinds(DecodeProjections(step_layout="out_in"))
    for path, kind in step.items():
        in_loop = path.startswith("decoder_layers") and not path.endswith(
            ("cross_attention/key", "cross_attention/value")
        )
        assert kind == (("Projected", "out_in") if in_loop or path == "output" else ("Dense", None))
    assert "decoder_layers/0/self_attention/qkv" in step
    assert "decoder_layers/0/self_attention/query" not in step
    memory = kinds(DecodeProjections(step_layout="none", memory_quantize="bfloat16"))
    for path, kind in memory.items():
        once = path.startswith("encoder_layers") or path.endswith(
            ("cross_attention/key", "cross_attention/value")
        )
        assert kind == (("Projected", "in_out") if once else ("Dense", None)), path


def test_self_attention_projects_q_k_v_in_one_product():
    model = Transformer(tiny_model_config(num_decoder_layers=2), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    def products(policy):  # dot_generals in one cached decode step
        def step(p):
            m = nnx.merge(graphdef, p)
            encoded = m.encode(SRC, src_segments=SEGMENTS)
            cross_kv = m.cross_kv(encoded)
            if policy is not None:
                m = decoding_network(m, policy)
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
    for layout in ("out_in", "in_out"):
        assert products(None) - products(DecodeProjections(step_layout=layout)) == 2 * 2


def test_bfloat16_copies_match_the_training_layouts_bfloat16_products():
    model = Transformer(tiny_model_config(d_model=32, dtype="bfloat16"), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    fn = jax.jit(lambda p, policy: _decode(graphdef, p, policy, cached=False), static_argnums=1)
    plain = np.asarray(fn(params, None))
    for layout in ("in_out", "out_in"):  # bfloat16 operands either way; the sums may reorder
        logits = fn(params, DecodeProjections(step_layout=layout))
        np.testing.assert_allclose(logits, plain, atol=0.05 * np.abs(plain).max())


def test_auto_layout_picks_by_rows_per_product():
    assert resolve_layout("auto", AUTO_OUT_IN_MAX_ROWS) == "out_in"
    assert resolve_layout("auto", AUTO_OUT_IN_MAX_ROWS + 1) == "in_out"
    assert resolve_layout("in_out", 1) == "in_out" and resolve_layout("out_in", 512) == "out_in"
    beams = DecodeSettings(strategy="beam", beam_size=4, batch_size=AUTO_OUT_IN_MAX_ROWS // 4)
    assert beams.projections.step_layout == "out_in"
    wider = DecodeSettings(strategy="beam", beam_size=4, batch_size=AUTO_OUT_IN_MAX_ROWS // 2)
    assert wider.projections.step_layout == "in_out"
    with pytest.raises(ValueError, match="resolve 'auto' first"):
        DecodeProjections(step_layout="auto")


@pytest.mark.parametrize("strategy", ["greedy", pytest.param("beam", marks=pytest.mark.slow)])
def test_translator_tokens_do_not_depend_on_the_layout(strategy):
    model = Transformer(tiny_model_config(d_model=32), rngs=nnx.Rngs(1))
    graphdef, params = nnx.split(model)
    sources = [[5, 6, 7, 3], [9, 10, 3], [11, 12, 13, 14, 3]]
    results = {}
    for layout in ("auto", "in_out", "out_in", "none"):
        settings = DecodeSettings(
            strategy=strategy, beam_size=3, max_len_a=0.0, max_len_b=6, weight_layout=layout
        )
        translator = Translator(graphdef, model.cfg, settings, None, None)
        results[layout] = translator.translate_ids(params, sources)
    ids = {layout: outputs for layout, (outputs, _) in results.items()}
    assert ids["auto"] == ids["in_out"] == ids["out_in"] == ids["none"]
    with pytest.raises(UserError, match="decode.weight_layout 'kn'"):
        DecodeSettings(weight_layout="kn")


def test_copies_are_made_once_per_parameter_set_outside_the_batch_program():
    model = Transformer(tiny_model_config(d_model=32), rngs=nnx.Rngs(1))
    graphdef, params = nnx.split(model)
    settings = DecodeSettings(strategy="greedy", max_len_b=6, batch_size=1, quantize="int8")
    translator = Translator(graphdef, model.cfg, settings, None, None)
    builds = []
    real = translator._prepare_fn
    translator._prepare_fn = lambda p: builds.append(p) or real(p)
    sources = [[5, 6, 7, 3], [9, 10, 3], [11, 12, 13, 14, 3]]  # three batches of one
    direct = translator.translate_ids(params, sources)
    assert len(builds) == 1
    prepared = translator.prepare(params)
    assert isinstance(prepared, Prepared) and translator.prepare(prepared) is prepared
    assert translator.translate_ids(prepared, sources) == direct
    assert len(builds) == 2  # prepare(params) above; decoding a Prepared builds nothing
    # The per-batch program quantizes no weight: int8 copies arrive as its inputs.
    state_leaves = jax.tree.leaves(prepared.state)
    assert any(leaf.dtype == jnp.int8 for leaf in state_leaves)
    batch = jax.make_jaxpr(
        lambda state: translator._translate_batch(
            state,
            jnp.asarray([[5, 6, 3]]),
            jnp.zeros((1,), jnp.int32),
            graphdef=prepared.graphdef,
            max_out=4,
        )
    )(prepared.state)
    weight_shapes = {
        leaf.shape for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)) if leaf.ndim == 2
    }
    rounded = [eqn for eqn in _equations(batch.jaxpr) if eqn.primitive.name == "round"]
    assert rounded  # the activations are quantized at every step...
    assert not [e for e in rounded if e.outvars[0].aval.shape in weight_shapes]  # ...weights never


def _equations(jaxpr):
    """Every equation of a jaxpr, those of the jaxprs nested in it (loops, conds) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)

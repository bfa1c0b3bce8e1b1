"""Int8 decoding products against their definition: symmetric abs-max quantization, an
int32 sum, and the error bound that rounding each operand by at most half a step implies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.decoding_network import decoding_network
from transformer.model.projection_policy import DecodeProjections, Projected
from transformer.model.quantize import int8_matmul, quantize_columns, quantize_rows


def test_quantized_values_are_int8_steps_within_half_a_step():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 5)).astype(np.float32)
    w[:, 3] = 0.0  # an all-zero column stays exactly zero
    q, scale = quantize_columns(jnp.asarray(w))
    assert q.dtype == jnp.int8 and int(jnp.abs(q).max()) == 127
    np.testing.assert_allclose(
        np.asarray(scale)[[0, 1, 2, 4]], np.abs(w).max(axis=0)[[0, 1, 2, 4]] / 127, rtol=1e-6
    )
    error = np.abs(np.asarray(q, np.float32) * np.asarray(scale) - w)
    assert (error <= np.asarray(scale) / 2 + 1e-7).all()
    assert (np.asarray(q)[:, 3] == 0).all()
    x = rng.standard_normal((3, 4, 16)).astype(np.float32)
    qx, sx = quantize_rows(jnp.asarray(x))
    assert sx.shape == (3, 4, 1)
    assert (
        np.abs(np.asarray(qx, np.float32) * np.asarray(sx) - x) <= np.asarray(sx) / 2 + 1e-7
    ).all()


def test_int8_product_is_within_the_rounding_bound_and_exact_on_the_grid():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    w = rng.standard_normal((64, 10)).astype(np.float32)
    got = np.asarray(int8_matmul(jnp.asarray(x), *quantize_columns(jnp.asarray(w))))
    # |x w - x' w'| <= |x| |dw| + |dx| |w'| with |dx| <= s_x / 2 and |dw| <= s_w / 2.
    s_x = np.abs(x).max(axis=1, keepdims=True) / 127
    s_w = np.abs(w).max(axis=0, keepdims=True) / 127
    bound = np.abs(x) @ np.broadcast_to(s_w / 2, w.shape) + (s_x / 2) @ (np.abs(w) + s_w / 2).sum(
        axis=0, keepdims=True
    )
    assert (np.abs(got - x @ w) <= bound + 1e-5).all()
    # Operands already on their int8 grids multiply exactly (the sum is int32).
    xi = rng.integers(-127, 128, (4, 64)).astype(np.float32)
    xi[:, 0] = 127
    wi = rng.integers(-127, 128, (64, 3)).astype(np.float32)
    wi[0] = 127
    exact = np.asarray(int8_matmul(jnp.asarray(xi * 0.5), *quantize_columns(jnp.asarray(wi * 2.0))))
    np.testing.assert_allclose(exact, xi @ wi, rtol=1e-6)


SRC = jnp.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0]], jnp.int32)
TGT = jnp.array([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]], jnp.int32)


def test_quantized_decoder_stays_close_and_leaves_the_parameters_alone():
    model = Transformer(tiny_model_config(d_model=64, d_ff=128), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    segments = (SRC != 0).astype(jnp.int32)

    def logits(params, int8: bool):
        m = nnx.merge(graphdef, params)
        if int8:
            m = decoding_network(m, DecodeProjections(step_layout="in_out", step_quantize="int8"))
        encoded = m.encode(SRC, src_segments=segments)
        return m.decode(encoded, segments, TGT, cross_kv=m.cross_kv(encoded))[0]

    plain = jax.jit(lambda p: logits(p, False))(params)
    int8 = jax.jit(lambda p: logits(p, True))(params)
    scale = float(jnp.abs(plain).max())
    assert 0 < float(jnp.abs(int8 - plain).max()) < 0.02 * scale
    assert float((plain.argmax(-1) == int8.argmax(-1)).mean()) >= 0.9


def copy_dtypes(translator: Translator, params) -> list[str]:
    """The storage dtype of every weight copy in the translator's decoding network."""
    network = translator.prepare(params).network()
    return sorted(
        str(m.kernel[...].dtype) for _, m in nnx.iter_modules(network) if isinstance(m, Projected)
    )


def test_translator_decodes_with_int8_and_rejects_unknown_modes():
    model = Transformer(tiny_model_config(d_model=64, d_ff=128), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    outputs = {}
    for quantize in ("none", "int8"):
        settings = DecodeSettings(strategy="greedy", max_len_a=0.0, max_len_b=6, quantize=quantize)
        translator = Translator(graphdef, model.cfg, settings, None, None)
        outputs[quantize], _ = translator.translate_ids(params, [[5, 6, 7, 3], [9, 10, 3]])
        assert set(copy_dtypes(translator, params)) == {"int8" if quantize == "int8" else "float32"}
    assert all(len(o[0]) <= 6 for o in outputs["int8"])
    tokens = [t for o in outputs["none"] for t in o[0]]
    same = [
        a == b
        for o, q in zip(outputs["none"], outputs["int8"], strict=True)
        for a, b in zip(o[0], q[0], strict=False)
    ]
    assert tokens and sum(same) >= 0.5 * len(same)  # greedy paths part at the first near-tie
    with pytest.raises(UserError, match="decode.quantize 'int4'"):
        DecodeSettings(quantize="int4")


def test_bfloat16_cache_stores_bfloat16_and_keeps_the_tokens(monkeypatch):
    from transformer.inference import translator as translator_lib

    model = Transformer(tiny_model_config(d_model=32), rngs=nnx.Rngs(1))
    graphdef, params = nnx.split(model)
    cache_dtypes = []  # what the decode loop's cache is made of, recorded while tracing
    real = translator_lib.search.greedy

    def greedy(fn, cache, **kw):
        cache_dtypes.append({leaf.dtype for leaf in jax.tree.leaves(cache)})
        return real(fn, cache, **kw)

    monkeypatch.setattr(translator_lib.search, "greedy", greedy)
    sources = [[5, 6, 7, 3], [9, 10, 3], [11, 12, 13, 14, 3]]
    results = {}
    for cache_dtype in ("model", "bfloat16"):
        settings = DecodeSettings(
            strategy="greedy", max_len_a=0.0, max_len_b=6, cache_dtype=cache_dtype
        )
        translator = Translator(graphdef, model.cfg, settings, None, None)
        results[cache_dtype] = translator.translate_ids(params, sources)
    assert cache_dtypes == [{jnp.dtype(jnp.float32)}, {jnp.dtype(jnp.bfloat16)}]
    (ids, scores), (ids_bf16, scores_bf16) = results["model"], results["bfloat16"]
    assert ids == ids_bf16  # keys/values rounded to 8 bits of mantissa: no token moves here
    np.testing.assert_allclose(np.array(scores_bf16), np.array(scores), atol=0.02)
    with pytest.raises(UserError, match="decode.cache_dtype 'int8'"):
        DecodeSettings(cache_dtype="int8")


@pytest.mark.parametrize("layout", ["in_out", "out_in"])
def test_bfloat16_product_is_the_exact_sum_of_rounded_operands(layout):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 96)).astype(np.float32)
    w = rng.standard_normal((96, 7)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    proj = Projected.of(
        [jnp.asarray(w)], [jnp.asarray(b)], layout=layout, dtype=jnp.float32, quantize="bfloat16"
    )
    assert proj.kernel[...].dtype == jnp.bfloat16
    got = np.asarray(proj(jnp.asarray(x)))
    assert got.dtype == np.float32

    def rounded(a):  # to bfloat16 and back: products of two of these are exact in float64
        return np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32), np.float64)

    want = rounded(x) @ rounded(w) + b  # bfloat16 operands, a float32 (here float64) sum
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - (x @ w + b)).max() > 1e-4  # the operands were indeed rounded


def test_bfloat16_decoding_rounds_the_products_asked_for_and_keeps_most_tokens():
    model = Transformer(tiny_model_config(d_model=64, d_ff=128), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    sources = [[5, 6, 7, 3], [9, 10, 3], [11, 12, 13, 14, 3]]
    outputs, copies = {}, {}
    arms = {"none": ("none", "none"), "loop": ("bfloat16", "none"), "all": ("bfloat16", "bfloat16")}
    for arm, (quantize, encoder_quantize) in arms.items():
        settings = DecodeSettings(
            strategy="greedy",
            max_len_a=0.0,
            max_len_b=6,
            quantize=quantize,
            encoder_quantize=encoder_quantize,
        )
        translator = Translator(graphdef, model.cfg, settings, None, None)
        outputs[arm], _ = translator.translate_ids(params, sources)
        copies[arm] = copy_dtypes(translator, params)
    enc, dec = model.cfg.num_encoder_layers, model.cfg.num_decoder_layers
    # The decoder loop: fused Q/K/V, self-attention output, cross-attention query and output,
    # 2 feed-forward per layer, and the output projection; encoder_quantize adds the encoder's
    # Q, K, V, output and 2 feed-forward per layer and the cross-attention keys and values.
    loop, once = dec * 6 + 1, enc * 6 + dec * 2
    assert copies["none"] == ["float32"] * loop
    assert copies["loop"] == ["bfloat16"] * loop
    assert copies["all"] == ["bfloat16"] * (loop + once)
    for arm in ("loop", "all"):
        same = [
            a == b
            for o, q in zip(outputs["none"], outputs[arm], strict=True)
            for a, b in zip(o[0], q[0], strict=False)
        ]
        assert same and sum(same) >= 0.5 * len(same)  # greedy paths part at the first near-tie
    with pytest.raises(UserError, match="decode.encoder_quantize 'int8'"):
        DecodeSettings(encoder_quantize="int8")

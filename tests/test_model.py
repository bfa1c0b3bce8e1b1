"""Behaviour of the Transformer against independent facts (formulas, invariances)."""

import dataclasses
import glob
import importlib.util
import itertools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, tiny_model_config
from transformer import ModelConfig, Transformer, count_params, param_shapes
from transformer.model.activations import ACTIVATIONS
from transformer.model.normalization import PLACEMENTS
from transformer.model.position import sinusoidal_table
from transformer.model.position_schemes import SCHEMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


tiny = tiny_model_config


SRC = jnp.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0]], jnp.int32)
TGT = jnp.array([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]], jnp.int32)


# Every combination builds and runs (full suite); that each switch changes the output is
# tests/test_model_concepts.py::test_each_switch_changes_logits (fast tier too).
@pytest.mark.parametrize(
    "norm_position,activation,position",
    fast_subset(
        itertools.product(PLACEMENTS.names(), ACTIVATIONS.names(), SCHEMES.names()),
        [("pre", "relu", "sinusoidal")],
    ),
)
def test_forward_shape_dtype_finite(norm_position, activation, position):
    cfg = tiny(norm_position=norm_position, activation=activation, position=position)
    logits = Transformer(cfg, rngs=nnx.Rngs(0))(SRC, TGT)
    assert logits.shape == (2, 5, 40)
    assert logits.dtype == jnp.float32
    assert bool(jnp.isfinite(logits).all())


@pytest.mark.parametrize("num_kv_heads", fast_subset([None, 2, 1], [2]), ids=["mha", "gqa", "mqa"])
def test_attention_head_sharing(num_kv_heads):
    cfg = tiny(num_kv_heads=num_kv_heads)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    kv_width = model.decoder_layers[0].self_attention.key.kernel[...].shape[1]
    assert kv_width == cfg.kv_heads * cfg.head_dim
    logits = model(SRC, TGT)
    assert logits.shape == (2, 5, 40) and bool(jnp.isfinite(logits).all())


def test_bfloat16_compute_keeps_float32_params_and_logits():
    model = Transformer(tiny(dtype="bfloat16"), rngs=nnx.Rngs(0))
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert all(leaf.dtype == jnp.float32 for leaf in leaves)
    logits = model(SRC, TGT)
    assert logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())


@pytest.mark.parametrize("position", SCHEMES.names())
def test_causality(position):
    """Changing target tokens at positions >= k leaves logits at positions < k unchanged."""
    model = Transformer(tiny(position=position, num_decoder_layers=2), rngs=nnx.Rngs(1))
    k = 2
    changed = TGT.at[:, k:].set(jnp.array([[20, 21, 22], [23, 24, 25]]))
    a, b = model(SRC, TGT), model(SRC, changed)
    np.testing.assert_allclose(a[:, :k], b[:, :k], atol=1e-5)
    assert not np.allclose(a[:, k:], b[:, k:], atol=1e-3)


@pytest.mark.parametrize("position", fast_subset(SCHEMES.names(), ["rope", "relative"]))
def test_source_padding_is_invisible(position):
    model = Transformer(tiny(position=position), rngs=nnx.Rngs(2))
    padded = jnp.pad(SRC, ((0, 0), (0, 5)))
    real = (TGT != 0)[..., None]  # padding target positions feed no loss and are not compared
    a, b = model(SRC, TGT), model(padded, TGT)
    np.testing.assert_allclose(jnp.where(real, a, 0), jnp.where(real, b, 0), atol=1e-5)


def test_sinusoidal_table_matches_formula():
    length, d = 50, 16
    table = np.asarray(sinusoidal_table(length, d))
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)


def test_sinusoidal_shift_is_one_linear_map():
    """PE(pos + k) = PE(pos) @ M_k for one matrix M_k (a rotation by k * w_i in each
    (sin, cos) pair) that does not depend on pos."""
    length, d, k = 60, 16, 7
    table = np.asarray(sinusoidal_table(length + k, d), np.float64)
    m = np.zeros((d, d))
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        c, s = math.cos(k * w), math.sin(k * w)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    np.testing.assert_allclose(table[:length] @ m, table[k : length + k], atol=1e-4)


@pytest.mark.parametrize("position", fast_subset(SCHEMES.names(), ["none", "rope"]))
def test_encoder_permutation_equivariance_only_without_positions(position):
    model = Transformer(tiny(position=position), rngs=nnx.Rngs(3))
    src = jnp.array([[5, 6, 7, 8, 9, 10]], jnp.int32)
    perm = jnp.array([3, 0, 5, 1, 4, 2])
    out, out_perm = model.encode(src), model.encode(src[:, perm])
    equivariant = np.allclose(out[:, perm], out_perm, atol=1e-5)
    assert equivariant == (position == "none")


def expected_param_count(cfg: ModelConfig) -> int:
    """Analytic count for an MHA model with biases, LayerNorm and shared, tied embeddings."""
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    final_norms = 2 * norm if cfg.norm_position == "pre" else 0
    return (
        v * d
        + cfg.num_encoder_layers * encoder_layer
        + cfg.num_decoder_layers * decoder_layer
        + final_norms
    )


def load_config(path):
    spec = importlib.util.spec_from_file_location("cfg", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def model_config_of(config) -> ModelConfig:
    """A config file's ModelConfig; an unset vocab_size (it follows the tokenizer) is taken
    as the size asked of the tokenizer, data.vocab_size."""
    cfg = ModelConfig.from_dict(config.model)
    if cfg.vocab_size is None:
        cfg = dataclasses.replace(cfg, vocab_size=int(config.data.vocab_size))
    return cfg


def test_transformer_base_param_count_matches_formula():
    cfg = model_config_of(load_config(os.path.join(ROOT, "configs/transformer_base.py")))
    shapes = param_shapes(cfg)
    counted = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    assert counted == expected_param_count(cfg)
    # The paper's base model (37k vocab) has ~65M parameters; ours has a 32k vocabulary.
    assert 55e6 < counted < 65e6


def test_param_count_of_a_built_model():
    cfg = tiny(norm_position="pre")
    assert count_params(Transformer(cfg, rngs=nnx.Rngs(0))) == expected_param_count(cfg)


def test_transformer_big_builds_abstractly():
    cfg = model_config_of(load_config(os.path.join(ROOT, "configs/transformer_big.py")))
    shapes = param_shapes(cfg)  # jax.eval_shape underneath: nothing is allocated
    leaves = jax.tree.leaves(shapes)
    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
    assert sum(math.prod(x.shape) for x in leaves) == expected_param_count(cfg)


CONFIG_FILES = sorted(
    p
    for p in glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)
    if not os.path.basename(p).startswith("__")
    and os.path.basename(p) != "base.py"
    and os.sep + "sweeps" + os.sep not in p
)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=[os.path.relpath(p, ROOT) for p in CONFIG_FILES])
def test_every_config_parses_and_builds(path):
    config = load_config(path)
    for section in ("model", "data", "train", "decode"):
        assert section in config
    from transformer.training import run_config

    run_config.validate(config)
    shapes = param_shapes(model_config_of(config))
    assert jax.tree.leaves(shapes)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(d_model=30, num_heads=4), "num_heads=4 must divide d_model=30"),
        (dict(num_heads=4, num_kv_heads=3), "num_kv_heads=3 must divide num_heads=4"),
        (
            dict(activation="tanh"),
            "unknown activation 'tanh'; valid: 'relu', 'gelu', 'gelu_tanh', 'silu', 'swiglu', "
            "'geglu'",
        ),
        (dict(norm_position="middle"), "unknown norm_position 'middle'; valid: 'pre', 'post'"),
        (
            dict(norm_type="batchnorm"),
            "unknown norm_type 'batchnorm'; valid: 'layernorm', 'rmsnorm'",
        ),
        (dict(position="xpos"), "unknown position 'xpos'; valid: 'sinusoidal', 'learned', 'rope'"),
        (dict(dtype="float16"), "unknown dtype 'float16'"),
        (dict(dropout_rate=1.5), "dropout_rate must be in [0, 1)"),
    ],
)
def test_validation_errors(overrides, message):
    with pytest.raises(ValueError, match=_escape(message)):
        tiny(**overrides)


def test_unknown_model_field_is_rejected():
    with pytest.raises(ValueError, match="unknown model field"):
        ModelConfig.from_dict({"d_model": 16, "num_layers": 3})


def test_learned_positions_longer_than_max_len_names_max_len():
    model = Transformer(tiny(position="learned", max_len=8), rngs=nnx.Rngs(0))
    long_src = jnp.ones((1, 9), jnp.int32)
    with pytest.raises(ValueError, match="max_len=8"):
        model(long_src, TGT[:1])


def test_dropout_changes_output_only_when_training():
    model = Transformer(tiny(dropout_rate=0.3), rngs=nnx.Rngs(0))
    a = model(SRC, TGT)
    np.testing.assert_array_equal(a, model(SRC, TGT))
    b = model(SRC, TGT, deterministic=False, dropout_rng=jax.random.key(0))
    c = model(SRC, TGT, deterministic=False, dropout_rng=jax.random.key(0))
    np.testing.assert_array_equal(b, c)
    assert not np.allclose(a, b)


def _escape(text):
    import re

    return re.escape(text)


def _activation(name):
    """The registered activation `name`, built as the feed-forward block builds it."""
    return ACTIVATIONS[name](tiny(activation=name), rngs=nnx.Rngs(0))


def test_gelu_names_say_which_form():
    x = np.linspace(-6, 6, 241)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert np.max(np.abs(exact - tanh)) > 1e-4  # the two forms are distinguishable here
    np.testing.assert_allclose(_activation("gelu")(jnp.asarray(x)), exact, atol=1e-6)
    np.testing.assert_allclose(_activation("gelu_tanh")(jnp.asarray(x)), tanh, atol=1e-6)
    np.testing.assert_allclose(_activation("geglu")(jnp.asarray(x)), exact, atol=1e-6)


# name -> (formula, gated), written out independently of the package.
ACTIVATION_FORMULAS = {
    "relu": (lambda x: np.maximum(x, 0.0), False),
    "silu": (lambda x: x / (1 + np.exp(-x)), False),
    "swiglu": (lambda x: x / (1 + np.exp(-x)), True),
}


@pytest.mark.parametrize("name", ACTIVATION_FORMULAS)
def test_activation_is_its_formula_and_gates_as_named(name):
    formula, gated = ACTIVATION_FORMULAS[name]
    x = np.linspace(-6, 6, 241)
    np.testing.assert_allclose(_activation(name)(jnp.asarray(x)), formula(x), atol=1e-6)
    assert ACTIVATIONS[name].gated is gated
    ffn = Transformer(tiny(activation=name), rngs=nnx.Rngs(0)).encoder_layers[0].ffn
    assert (ffn.wg is not None) is gated  # a gated activation's block has the gate projection


@pytest.mark.parametrize("position", fast_subset(["sinusoidal", "alibi"], ["alibi"]))
def test_rows_sharing_a_source_attend_to_it_as_if_it_were_repeated(position):
    # Cached decoding with G = 3 target rows per source (beams or samples) and the sources'
    # cross-attention keys/values given once per source equals giving every row its own copy.
    from transformer.inference.search import expand_to_beams

    model = Transformer(tiny(position=position), rngs=nnx.Rngs(0))
    segments = (SRC != 0).astype(jnp.int32)
    cross_kv = model.cross_kv(model.encode(SRC, src_segments=segments))
    g = 3
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(4, 40, (SRC.shape[0] * g, 4)), jnp.int32)
    shared_cache = repeated_cache = model.init_cache(tokens.shape[0], 8)
    repeated_kv, repeated_segments = expand_to_beams((cross_kv, segments), g)
    for i in range(tokens.shape[1]):
        step = dict(tgt_in=tokens[:, i : i + 1], cache_index=jnp.asarray(i))
        shared, shared_cache = model.decode(
            None, segments, cross_kv=cross_kv, cache=shared_cache, **step
        )
        repeated, repeated_cache = model.decode(
            None, repeated_segments, cross_kv=repeated_kv, cache=repeated_cache, **step
        )
        np.testing.assert_allclose(np.asarray(shared), np.asarray(repeated), atol=1e-5)
    with pytest.raises(ValueError, match="only cached decoding"):
        model.decode(None, segments, tokens, cross_kv=cross_kv)

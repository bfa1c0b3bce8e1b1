"""Self-attention's query, key and value layers multiplied as one product in training
(train.fused_qkv, projection_policy.TRAINED_FUSED_QKV): the same parameters, logits within
1e-5 and gradients within float32 rounding of three products, for MHA, GQA and MQA and every
positional scheme that rotates queries and keys; the train step's losses match."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import tiny_config, tiny_model_config
from transformer import Transformer
from transformer.model.projection_policy import TRAINED, TRAINED_FUSED_QKV
from transformer.training import run_config, steps
from transformer.training.optim import make_optimizer
from transformer.training.run_state import build_train_model

SRC = jnp.asarray([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]], jnp.int32)
TGT = jnp.asarray([[2, 11, 12, 13], [2, 14, 15, 0]], jnp.int32)


def split(cfg, projections):
    model = Transformer(cfg, rngs=nnx.Rngs(0), projections=projections)
    return nnx.split(model, nnx.Param)


@pytest.mark.parametrize("position", ["sinusoidal", "rope"])
@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_fused_products_give_the_three_products_values(num_kv_heads, position):
    cfg = tiny_model_config(num_kv_heads=num_kv_heads, position=position)
    (graph_a, params_a), (graph_b, params_b) = split(cfg, TRAINED), split(cfg, TRAINED_FUSED_QKV)
    # The same parameter tree and values: checkpoints of either load into the other.
    assert jax.tree.structure(params_a) == jax.tree.structure(params_b)
    for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_b), strict=True):
        np.testing.assert_array_equal(a, b)

    def loss(graphdef):
        return lambda p: jnp.sum(nnx.merge(graphdef, p)(SRC, TGT) ** 2) * 1e-3

    logits = [nnx.merge(g, p)(SRC, TGT) for g, p in ((graph_a, params_a), (graph_b, params_a))]
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-5, rtol=1e-5)
    grads = [jax.grad(loss(g))(params_a) for g in (graph_a, graph_b)]
    for got, want in zip(jax.tree.leaves(grads[1]), jax.tree.leaves(grads[0]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_the_fused_model_really_multiplies_once():
    """The fused model's compiled forward pass holds fewer products (one per self-attention
    instead of three): the option is not silently ignored."""
    cfg = tiny_model_config(num_encoder_layers=2, num_decoder_layers=2)
    counts = []
    for projections in (TRAINED, TRAINED_FUSED_QKV):
        graphdef, params = split(cfg, projections)
        text = jax.jit(lambda p, g=graphdef: nnx.merge(g, p)(SRC, TGT)).lower(params).as_text()
        counts.append(text.count("dot_general"))
    assert counts[0] - counts[1] == 2 * 4  # 4 self-attentions, two products fewer each


def test_train_setting_builds_the_fused_model_and_trains_to_the_same_losses():
    losses = []
    for fused in (False, True):
        config = tiny_config(train__fused_qkv=fused, model__vocab_size=64)
        settings = run_config.validate(config)
        model = build_train_model(settings.model, config.train)
        layer = model.encoder_layers[0].self_attention
        assert layer.fuse_trained_qkv is fused
        optimizer, schedule = make_optimizer(config.train)
        graphdef, state = steps.init_state(model, optimizer)
        step = jax.jit(steps.make_train_step(graphdef, optimizer, schedule, config.train))
        batch = {
            "src": np.asarray(SRC),
            "tgt": np.asarray(TGT[:, 1:]),
            "src_segments": (np.asarray(SRC) != 0).astype(np.int32),
            "tgt_segments": (np.asarray(TGT[:, 1:]) != 0).astype(np.int32),
            "src_positions": np.tile(np.arange(5, dtype=np.int32), (2, 1)),
            "tgt_positions": np.tile(np.arange(3, dtype=np.int32), (2, 1)),
        }
        run = []
        for _ in range(3):
            state, metrics = step(state, batch, jax.random.key(0))
            run.append(float(metrics["loss"]))
        losses.append(run)
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)

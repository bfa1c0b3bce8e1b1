"""The accelerator settings against the plain path: model.attention_impl='xla'
(jax.nn.dot_product_attention) gives the einsum attention's logits, gradients and cached
decoding for every positional scheme and head grouping, and falls back to einsum where it
lacks what a site needs, and the keys' and values' cache layout costs it no transpose;
train.remat='block' gives the same gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, tiny_model_config
from transformer import Transformer
from transformer.model.differentiation import Differentiation
from transformer.model.instrumentation import Instrumentation
from transformer.model.position_schemes import SCHEMES

SRC = jnp.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0]], jnp.int32)
TGT = jnp.array([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]], jnp.int32)
POSITIONS = SCHEMES.names()  # every registered scheme, the user's own included
CASES = [(p, kv) for p in POSITIONS for kv in (None, 2)]


def _pair(**overrides):
    """The same parameters (same init seed) under einsum and xla attention."""
    einsum = Transformer(tiny_model_config(**overrides), rngs=nnx.Rngs(0))
    fused = Transformer(tiny_model_config(attention_impl="xla", **overrides), rngs=nnx.Rngs(0))
    return einsum, fused


def _grads(model, **call):
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(p):
        logits = nnx.merge(graphdef, p)(SRC, TGT, **call)
        return (jax.nn.log_softmax(logits) * jax.nn.one_hot(TGT, logits.shape[-1])).sum()

    return jax.jit(jax.grad(loss))(params)


def _close(a, b, tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=tol, rtol=tol)


def _logits(model):
    graphdef, params = nnx.split(model)
    return jax.jit(lambda p: nnx.merge(graphdef, p)(SRC, TGT))(params)


@pytest.mark.parametrize("position,num_kv_heads", fast_subset(CASES, [("alibi", 2)]))
def test_xla_attention_gives_the_einsum_logits_and_gradients(position, num_kv_heads):
    einsum, fused = _pair(position=position, num_kv_heads=num_kv_heads, dropout_rate=0.1)
    _close(_logits(einsum), _logits(fused), 1e-5)
    # Training mode (residual dropout, same key): the same gradients.
    call = dict(deterministic=False, dropout_rng=jax.random.key(3))
    _close(_grads(einsum, **call), _grads(fused, **call), 1e-5)


def _cached_logits(model):
    """Logits of decoding TGT one token at a time through the KV cache: [B, T, V]."""
    graphdef, params = nnx.split(model)

    def decode(params):
        m = nnx.merge(graphdef, params)
        segments = (SRC != 0).astype(jnp.int32)
        encoded = m.encode(SRC, src_segments=segments)
        cache = m.init_cache(SRC.shape[0], 8)
        steps = []
        for i in range(TGT.shape[1]):
            logits, cache = m.decode(
                encoded, segments, TGT[:, i : i + 1], cache=cache, cache_index=jnp.asarray(i)
            )
            steps.append(logits)
        return jnp.concatenate(steps, axis=1)

    return jax.jit(decode)(params)


@pytest.mark.parametrize("position", fast_subset(POSITIONS, ["relative"]))
def test_xla_attention_decodes_through_the_cache_like_einsum(position):
    einsum, fused = _pair(position=position)
    cached = _cached_logits(fused)
    _close(_cached_logits(einsum), cached, 1e-5)
    # And the cache reproduces teacher forcing on the real target tokens.
    real = TGT != 0
    np.testing.assert_allclose(
        np.asarray(cached)[np.asarray(real)],
        np.asarray(_logits(fused))[np.asarray(real)],
        atol=1e-5,
    )


def test_sites_the_fused_kernel_cannot_serve_use_einsum():
    # Attention dropout in training: jax.nn.dot_product_attention has none, so the sites
    # fall back and draw the same dropout masks: the output is the einsum model's exactly.
    einsum, fused = _pair(attention_dropout_rate=0.2)
    call = dict(deterministic=False, dropout_rng=jax.random.key(5))
    np.testing.assert_array_equal(
        np.asarray(einsum(SRC, TGT, **call)), np.asarray(fused(SRC, TGT, **call))
    )
    # Attention probabilities for analysis: sown by the einsum path.
    captured = Transformer(
        fused.cfg, rngs=nnx.Rngs(0), instrumentation=Instrumentation(capture_attention=True)
    )
    _, state = nnx.capture(lambda m: m.encode(SRC), nnx.Intermediate)(captured)
    (probs,) = jax.tree.leaves(state)
    assert probs.shape == (2, 4, 7, 7)
    np.testing.assert_allclose(np.asarray(probs.sum(-1)), 1.0, atol=1e-5)


def _compiled_ops(fn, *args) -> dict[str, int]:
    """How many transposes and copies the compiled program of fn, and of its gradient, holds."""
    counts = {}
    for name, f in (("forward", fn), ("gradient", jax.grad(fn, argnums=(1, 2, 3)))):
        text = jax.jit(f).lower(*args).compile().as_text()
        for op in ("transpose", "copy"):
            counts[f"{name} {op}"] = text.count(f" {op}(")
    return counts


def test_the_key_value_layout_costs_the_fused_kernel_no_transpose():
    """Keys and values travel as [B, K, S, D] (the cache's layout) and the fused kernel reads
    [B, S, K, D]: attend_fused's transposes back cancel the projection's in the compiled
    program, forward and backward; it holds what projecting straight into the kernel's
    layout holds."""
    from transformer.model.attention import attend_fused

    b, t, h, d = 2, 8, 4, 16

    def heads(x, w):
        return (x @ w).reshape(b, t, h, d)  # [B, T, H, D]

    def through_cache_layout(x, wq, wk, wv):
        k, v = (heads(x, w).transpose(0, 2, 1, 3) for w in (wk, wv))  # [B, K, S, D]
        return attend_fused(heads(x, wq), k, v, None, None, "xla").sum()

    def kernel_layout(x, wq, wk, wv):
        q, k, v = (heads(x, w) for w in (wq, wk, wv))
        return jax.nn.dot_product_attention(q, k, v, scale=d**-0.5, implementation="xla").sum()

    args = [jnp.ones((b, t, h * d))] + [jnp.full((h * d, h * d), 0.01)] * 3
    assert _compiled_ops(through_cache_layout, *args) == _compiled_ops(kernel_layout, *args)


def test_cudnn_attention_needs_bfloat16():
    with pytest.raises(ValueError, match="needs dtype='bfloat16'"):
        tiny_model_config(attention_impl="cudnn")
    assert tiny_model_config(attention_impl="cudnn", dtype="bfloat16").attention_impl == "cudnn"


@pytest.mark.parametrize("dropout_rate", fast_subset([0.0, 0.1], [0.1]))
def test_block_remat_gives_the_same_gradients(dropout_rate):
    def model(remat):
        rates = dict(dropout_rate=dropout_rate, attention_dropout_rate=dropout_rate)
        cfg = tiny_model_config(**rates)  # 1 + 1 blocks
        differentiation = Differentiation(remat_blocks=remat)
        return Transformer(cfg, rngs=nnx.Rngs(0), differentiation=differentiation)

    call = dict(deterministic=False, dropout_rng=jax.random.key(7))
    plain, remat = model(False), model(True)
    _close(_grads(plain, **call), _grads(remat, **call), 1e-5)
    graphdef, params = nnx.split(remat, nnx.Param)

    def loss(p):
        return nnx.merge(graphdef, p)(SRC, TGT, **call).sum()

    jaxpr = str(jax.make_jaxpr(jax.grad(loss))(params))
    assert jaxpr.count("remat") == 2  # one checkpointed region per block: 1 + 1


@pytest.mark.slow
def test_train_remat_block_trains_like_no_remat(tmp_path, monkeypatch):
    from tests.helpers import tiny_config
    from transformer.common.metrics_file import read_metrics
    from transformer.training.loop import train_and_evaluate

    wrapped = []  # blocks put under nnx.remat while tracing
    real_remat = nnx.remat
    monkeypatch.setattr(nnx, "remat", lambda f: wrapped.append(f) or real_remat(f))
    losses, traced = {}, {}
    for remat in ("none", "block"):
        wrapped.clear()
        config = tiny_config(
            train__num_steps=4,
            train__log_every=1,
            train__eval_every=4,
            train__eval_bleu_sentences=0,
            train__remat=remat,
            model__dropout_rate=0.1,
        )
        train_and_evaluate(config, str(tmp_path / remat))
        losses[remat] = [r["loss"] for r in read_metrics(tmp_path / remat, kind="train")]
        traced[remat] = len(wrapped)
    assert traced["none"] == 0 and traced["block"] >= 2  # the train step's 1 + 1 blocks
    assert len(losses["none"]) == 4
    np.testing.assert_allclose(losses["none"], losses["block"], rtol=1e-5)

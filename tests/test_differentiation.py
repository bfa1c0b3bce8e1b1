"""How a model is differentiated is chosen when it is built (model/differentiation.py): the
default is JAX's autodiff, so forward-mode differentiation runs through the whole model; the
hand-written CPU backward products give autodiff's gradients; train.hand_written_vjps
resolves per platform."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.model.differentiation import Differentiation
from transformer.training import run_config, steps
from transformer.training.base_config import get_base_config
from transformer.training.run_state import uses_hand_written_vjps

SRC = jnp.asarray([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]], jnp.int32)
TGT = jnp.asarray([[2, 11, 12, 13], [2, 14, 15, 0]], jnp.int32)
# The untied output and separate embeddings put every kind of product in the model.
CONFIGS = {"tied": {}, "untied": dict(tie_output=False, share_embeddings=False)}


def loss_of(graphdef):
    def loss(params):
        return jnp.sum(nnx.merge(graphdef, params)(SRC, TGT) ** 2) * 1e-3

    return loss


@pytest.mark.parametrize("config", CONFIGS)
def test_jvp_through_the_whole_model_under_the_default(config):
    """jax.jvp's directional derivative equals the reverse-mode gradient dotted with the
    tangent, and (loosely, in float32) the central finite difference."""
    model = Transformer(tiny_model_config(**CONFIGS[config]), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    loss = loss_of(graphdef)
    rng = np.random.default_rng(0)
    tangent = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), params)
    _, directional = jax.jvp(loss, (params,), (tangent,))
    grads = jax.tree.leaves(jax.grad(loss)(params))
    reverse = sum(jnp.vdot(g, t) for g, t in zip(grads, jax.tree.leaves(tangent), strict=True))
    np.testing.assert_allclose(float(directional), float(reverse), rtol=1e-4)
    eps = 1e-3
    plus = jax.tree.map(lambda p, t: p + eps * t, params, tangent)
    minus = jax.tree.map(lambda p, t: p - eps * t, params, tangent)
    finite = (loss(plus) - loss(minus)) / (2 * eps)
    np.testing.assert_allclose(float(directional), float(finite), rtol=5e-2)


def _training_batch():
    """SRC and TGT as a training batch (one sentence per row, 0 = padding)."""
    batch = {"src": SRC, "tgt": TGT[:, 1:]}  # targets: the decoder inputs shifted left
    for side in ("src", "tgt"):
        tokens = batch[side]
        batch[f"{side}_segments"] = (tokens != 0).astype(jnp.int32)
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        batch[f"{side}_positions"] = positions.astype(jnp.int32)
    return batch


@pytest.mark.parametrize("ls", fast_subset([0.0, 0.1], [0.1]))  # both: tests/test_loss.py
def test_forward_mode_runs_through_the_training_loss_under_the_default(ls):
    """The train step's loss (dropout on, one fixed key): jax.jvp equals the gradient dotted
    with the tangent, jax.linearize gives the same, and the Hessian-vector product (forward
    over reverse) equals central differences of the gradient. GELU keeps the loss smooth;
    ReLU's kinks would make the finite differences jump."""
    cfg = tiny_model_config(activation="gelu", dropout_rate=0.1, activation_dropout_rate=0.1)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)), nnx.Param)
    batch = _training_batch()

    def loss(p):
        kw = dict(train=True, label_smoothing=ls)
        return steps.loss_sums(graphdef, p, batch, jax.random.key(3), **kw)[0]

    rng = np.random.default_rng(1)
    tangent = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), params)
    forward = jax.jit(lambda p, t: (jax.jvp(loss, (p,), (t,))[1], jax.linearize(loss, p)[1](t)))
    directional, linearized = forward(params, tangent)
    grad = jax.jit(jax.grad(loss))
    reverse = jnp.vdot(_flat(grad(params)), _flat(tangent))
    np.testing.assert_allclose(float(directional), float(reverse), rtol=1e-4)
    np.testing.assert_allclose(float(linearized), float(directional), rtol=1e-6)
    hvp = jax.jit(lambda p, t: jax.jvp(grad, (p,), (t,))[1])(params, tangent)
    eps = 1e-3  # float32: measured error ~ eps^2 down to here (2e-4 relative), rounding below
    plus = grad(jax.tree.map(lambda p, t: p + eps * t, params, tangent))
    minus = grad(jax.tree.map(lambda p, t: p - eps * t, params, tangent))
    finite = (_flat(plus) - _flat(minus)) / (2 * eps)
    assert float(jnp.linalg.norm(_flat(hvp) - finite)) < 2e-3 * float(jnp.linalg.norm(finite))


def _flat(tree) -> jax.Array:
    return jnp.concatenate([x.ravel() for x in jax.tree.leaves(tree)])


def test_jvp_is_refused_with_hand_written_vjps():
    """The custom VJPs have no forward-mode rule: the reason they are not the default."""
    differentiation = Differentiation(hand_written_vjps=True)
    model = Transformer(tiny_model_config(), rngs=nnx.Rngs(0), differentiation=differentiation)
    graphdef, params = nnx.split(model, nnx.Param)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(loss_of(graphdef), (params,), (params,))


@pytest.mark.parametrize("config", CONFIGS)
def test_hand_written_vjps_give_autodiff_gradients(config):
    cfg = tiny_model_config(**CONFIGS[config])
    grads = []
    for hand_written in (False, True):
        differentiation = Differentiation(hand_written_vjps=hand_written)
        model = Transformer(cfg, rngs=nnx.Rngs(0), differentiation=differentiation)
        graphdef, params = nnx.split(model, nnx.Param)
        grads.append(jax.grad(loss_of(graphdef))(params))
    for got, want in zip(jax.tree.leaves(grads[1]), jax.tree.leaves(grads[0]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "setting,platform,expected",
    [("auto", "cpu", True), ("auto", "gpu", False), ("on", "gpu", True), ("off", "cpu", False)],
)
def test_train_setting_resolves_per_platform(setting, platform, expected):
    assert uses_hand_written_vjps(setting, platform) is expected


def test_a_bad_train_setting_is_named():
    config = get_base_config()
    config.train.hand_written_vjps = "yes"
    with pytest.raises(UserError, match="train.hand_written_vjps must be one of auto, on, off"):
        run_config.validate(config)

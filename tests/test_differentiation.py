"""How a model is differentiated is chosen when it is built (model/differentiation.py): the
default is JAX's autodiff, so forward-mode differentiation runs through the whole model; the
hand-written CPU backward products give autodiff's gradients; train.hand_written_vjps
resolves per platform."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.model.differentiation import Differentiation
from transformer.training import run_config
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

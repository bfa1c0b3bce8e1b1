"""The loss and the hand-written gradients against independent formulations.

`cross_entropy` carries a hand-written derivative (a custom JVP that JAX transposes for the
gradient), `cpu_tied_logits` and `cpu_matmul` custom VJPs, all chosen for speed; here each
value is checked against the textbook formula in NumPy, each gradient against JAX's autodiff
of a plain formulation, and the loss's forward mode against its gradient, finite differences
and the closed-form softmax curvature (float64).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.model.differentiation import cpu_matmul as matmul
from transformer.model.differentiation import cpu_tied_logits as tied_logits
from transformer.training.loss import cross_entropy


def _batch(vocab=11, shape=(3, 5), seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(*shape, vocab)).astype(np.float32) * 3
    targets = rng.integers(0, vocab, shape).astype(np.int32)
    weights = (rng.random(shape) > 0.3).astype(np.float32)  # some padding
    return logits, targets, weights


def _reference(logits, targets, weights, ls):
    """KL(q || softmax(logits)) and NLL summed over weighted tokens, q built explicitly."""
    vocab = logits.shape[-1]
    log_p = jax.nn.log_softmax(logits, axis=-1)
    q = jnp.where(jax.nn.one_hot(targets, vocab) > 0, 1.0 - ls, ls / (vocab - 1))
    kl = jnp.sum(jnp.where(q > 0, q * (jnp.log(jnp.where(q > 0, q, 1.0)) - log_p), 0.0), -1)
    nll = -jnp.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    return jnp.sum(kl * weights), jnp.sum(nll * weights)


@pytest.mark.parametrize("ls", [0.0, 0.1, 0.3])
def test_cross_entropy_value_matches_numpy_formula(ls):
    logits, targets, weights = _batch()
    loss, nll = cross_entropy(jnp.asarray(logits), targets, weights, ls)
    # Independent NumPy formula: log-softmax by hand, q as an explicit matrix.
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    q = np.full(logits.shape, ls / (vocab - 1))
    np.put_along_axis(q, targets[..., None], 1.0 - ls, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(q > 0, q * (np.log(q) - log_p), 0.0).sum(-1)
    expected_nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss, (kl * weights).sum(), rtol=1e-5)
    np.testing.assert_allclose(nll, (expected_nll * weights).sum(), rtol=1e-5)


def test_perfect_smoothed_prediction_scores_zero():
    vocab, ls = 7, 0.2
    targets = np.array([[1, 4]], np.int32)
    q = np.full((1, 2, vocab), ls / (vocab - 1))
    np.put_along_axis(q, targets[..., None], 1 - ls, -1)
    loss, _ = cross_entropy(jnp.log(jnp.asarray(q, jnp.float32)), targets, np.ones((1, 2)), ls)
    assert abs(float(loss)) < 1e-5


@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("mix", [(1.0, 0.0), (0.0, 1.0), (0.7, -1.3)])
def test_cross_entropy_gradient_matches_autodiff(ls, mix):
    logits, targets, weights = _batch(seed=1)

    def combine(fn):
        return lambda x: mix[0] * fn(x)[0] + mix[1] * fn(x)[1]

    ours = jax.grad(combine(lambda x: cross_entropy(x, targets, weights, ls)))(logits)
    plain = jax.grad(combine(lambda x: _reference(x, targets, weights, ls)))(logits)
    np.testing.assert_allclose(ours, plain, rtol=1e-4, atol=1e-6)
    assert np.all(np.asarray(ours)[weights == 0] == 0)  # padding gets no gradient


def test_cross_entropy_accepts_bfloat16_logits():
    logits, targets, weights = _batch()
    grad = jax.grad(lambda x: cross_entropy(x, targets, weights, 0.1)[0])(
        jnp.asarray(logits, jnp.bfloat16)
    )
    assert grad.dtype == jnp.bfloat16


def test_tied_logits_value_and_gradients_match_autodiff():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    table = rng.normal(size=(9, 4)).astype(np.float32)
    probe = rng.normal(size=(2, 3, 9)).astype(np.float32)

    def ours(x, table):
        return jnp.sum(tied_logits(x, table) * probe)

    def plain(x, table):
        return jnp.sum(jnp.dot(x, table.T) * probe)

    np.testing.assert_allclose(tied_logits(x, table), x @ table.T, rtol=1e-5)
    got, want = jax.grad(ours, (0, 1))(x, table), jax.grad(plain, (0, 1))(x, table)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("d_in,d_out", [(3, 8), (8, 3)])  # both transpose choices
def test_matmul_gradients_match_autodiff(d_in, d_out):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, d_in)).astype(np.float32)
    kernel = rng.normal(size=(d_in, d_out)).astype(np.float32)
    probe = rng.normal(size=(2, 5, d_out)).astype(np.float32)
    np.testing.assert_allclose(matmul(x, kernel), x @ kernel, rtol=1e-5)
    got = jax.grad(lambda x, k: jnp.sum(matmul(x, k) * probe), (0, 1))(x, kernel)
    want = jax.grad(lambda x, k: jnp.sum(jnp.dot(x, k) * probe), (0, 1))(x, kernel)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ forward mode


def _f64_batch(seed):
    """_batch in float64, with random tangents for the logits and the weights."""
    logits, targets, weights = _batch(seed=seed)
    rng = np.random.default_rng(seed + 100)
    d_logits, d_weights = rng.normal(size=logits.shape), rng.normal(size=weights.shape)
    as64 = [jnp.asarray(a, jnp.float64) for a in (logits, weights, d_logits, d_weights)]
    return targets, *as64


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_jvp_of_the_loss_is_the_gradient_dotted_with_the_tangent_and_the_finite_difference(ls):
    with jax.enable_x64(True):
        targets, logits, weights, d_logits, d_weights = _f64_batch(seed=4)

        def sums(x, w):
            return jnp.stack(cross_entropy(x, targets, w, ls))  # [loss, nll]

        _, directional = jax.jvp(sums, (logits, weights), (d_logits, d_weights))
        for i in (0, 1):
            g_x, g_w = jax.grad(lambda x, w, i=i: sums(x, w)[i], (0, 1))(logits, weights)
            reverse = jnp.vdot(g_x, d_logits) + jnp.vdot(g_w, d_weights)
            np.testing.assert_allclose(directional[i], reverse, rtol=1e-12)
        eps = 1e-6
        plus = sums(logits + eps * d_logits, weights + eps * d_weights)
        minus = sums(logits - eps * d_logits, weights - eps * d_weights)
        np.testing.assert_allclose(directional, (plus - minus) / (2 * eps), rtol=1e-7)


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_hessian_vector_product_of_the_loss_is_the_softmax_curvature(ls):
    """Forward over reverse: equal to central differences of the gradient and to the
    closed form w * (p * v - p * (p . v)) per token (the Hessian of -log softmax is
    diag(p) - p p^T whatever the target distribution)."""
    with jax.enable_x64(True):
        targets, logits, weights, v, _ = _f64_batch(seed=5)
        grad = jax.grad(lambda x: cross_entropy(x, targets, weights, ls)[0])
        _, hvp = jax.jvp(grad, (logits,), (v,))
        eps = 1e-5
        finite = (grad(logits + eps * v) - grad(logits - eps * v)) / (2 * eps)
        np.testing.assert_allclose(hvp, finite, rtol=1e-6, atol=1e-10)
        p = np.exp(logits - np.log(np.exp(logits).sum(-1, keepdims=True)))
        closed = p * v - p * (p * v).sum(-1, keepdims=True)
        np.testing.assert_allclose(hvp, closed * np.asarray(weights)[..., None], atol=1e-12)

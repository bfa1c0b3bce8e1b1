"""How a model is differentiated, chosen when it is built: `Differentiation`.

Neither choice changes a value the model computes; both change how its backward pass runs:

- remat_blocks: each encoder/decoder block's activations are recomputed in the backward pass
  instead of kept (train.remat='block'), trading compute for memory;
- hand_written_vjps: the dense layers' products and the tied output projection carry
  hand-written backward products (`cpu_matmul`, `cpu_tied_logits`) that put XLA's CPU
  backend's transposes on the narrower operand. Custom VJPs have no forward-mode rule, so a
  model built with them cannot go through `jax.jvp` or `jax.jacfwd`; the default is JAX's
  own autodiff, and training turns them on where they pay (train.hand_written_vjps).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx


@dataclasses.dataclass(frozen=True)
class Differentiation:
    """The backward pass's policy; the default is plain JAX autodiff, nothing recomputed."""

    remat_blocks: bool = False
    hand_written_vjps: bool = False

    def matmul(self, x: jax.Array, kernel: jax.Array) -> jax.Array:
        """x [..., in] @ kernel [in, out]."""
        if self.hand_written_vjps:
            return cpu_matmul(x, kernel)
        return jnp.dot(x, kernel)

    def tied_logits(self, x: jax.Array, embedding: jax.Array) -> jax.Array:
        """x [..., d] @ embedding [V, d].T -> [..., V]."""
        if self.hand_written_vjps:
            return cpu_tied_logits(x, embedding)
        return jnp.einsum("...d,vd->...v", x, embedding)

    def block(self, block_fn):
        """block_fn(block, x) -> x, rematerialised when remat_blocks is set."""
        return nnx.remat(block_fn) if self.remat_blocks else block_fn


AUTODIFF = Differentiation()


@jax.custom_vjp
def cpu_matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """x [..., in] @ kernel [in, out], with the kernel gradient's transpose put on the narrower
    of x and the output gradient.

    The kernel gradient contracts over the token axis, the major axis of both x [N, in] and
    dy [N, out], so XLA's CPU backend copies one of them transposed; left to itself it picks
    x even when in > out (a [N, 2048] copy in the feed-forward output layer where a [N, 512]
    one would do).
    """
    return jnp.dot(x, kernel)


def _matmul_fwd(x, kernel):
    return jnp.dot(x, kernel), (x, kernel)


def _matmul_bwd(residuals, d_y):
    x, kernel = residuals
    d_x = jnp.dot(d_y, kernel.T)
    x_2d = x.reshape(-1, x.shape[-1])  # [N, in]
    d_y_2d = d_y.reshape(-1, d_y.shape[-1])  # [N, out]
    if x_2d.shape[1] <= d_y_2d.shape[1]:
        d_kernel = jnp.dot(x_2d.T, d_y_2d)  # [in, out]
    else:
        d_kernel = jnp.dot(d_y_2d.T, x_2d).T
    return d_x, d_kernel


cpu_matmul.defvjp(_matmul_fwd, _matmul_bwd)


@jax.custom_vjp
def cpu_tied_logits(x: jax.Array, embedding: jax.Array) -> jax.Array:
    """x [..., d] @ embedding[V, d].T -> [..., V].

    Autodiff computes the table's gradient as dlogits^T @ x, and XLA's CPU backend writes the
    [tokens, V] logits gradient transposed to feed that product. (x^T @ dlogits)^T gives the
    same numbers but transposes only x and the [d, V] result, both V / d or tokens / V times
    smaller.
    """
    return jnp.einsum("...d,vd->...v", x, embedding)


def _tied_logits_fwd(x, embedding):
    return cpu_tied_logits(x, embedding), (x, embedding)


def _tied_logits_bwd(residuals, d_logits):
    x, embedding = residuals
    d_x = jnp.einsum("...v,vd->...d", d_logits, embedding)
    x_2d = x.reshape(-1, x.shape[-1])  # [N, d]
    d_logits_2d = d_logits.reshape(-1, d_logits.shape[-1])  # [N, V]
    d_embedding = jnp.dot(x_2d.T, d_logits_2d).T  # [V, d]
    return d_x, d_embedding


cpu_tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)

"""Squared ReLU: model.activation = "relu2"."""

import jax
import jax.numpy as jnp

from transformer.model.activations import ACTIVATIONS, Activation


@ACTIVATIONS.register("relu2")
class SquaredReLU(Activation):
    """relu(x)^2 (So et al., 2021, Primer's feed-forward activation); not gated."""

    def __call__(self, x):
        return jnp.square(jax.nn.relu(x))

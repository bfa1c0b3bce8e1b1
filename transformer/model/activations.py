"""The feed-forward block's activations as objects: one class each, chosen once from
`model.activation`.

An activation is an `nnx.Module` built from the config, so one may hold parameters of its
own; `gated` says whether the block multiplies act(x W1) by a second projection x Wg
(Shazeer, 2020), which gives the block that projection's parameters. Adding an activation is
one class: subclass `Activation`, define `__call__` (and `gated = True` for a gated one) and
decorate it with `@ACTIVATIONS.register("name")`; `model.activation="name"` then builds it,
from the package or from a user's module named in `plugins.modules` (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import jax
from flax import nnx

from transformer.common.registry import Registry

if TYPE_CHECKING:
    from transformer.model.config import ModelConfig

ACTIVATIONS = Registry("activation")  # model.activation -> its Activation class


class Activation(nnx.Module):
    """The nonlinearity of the feed-forward block: [..., d_ff] -> [..., d_ff]."""

    name: ClassVar[str] = ""
    gated: ClassVar[bool] = False  # the block multiplies act(x W1) by x Wg

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        """rngs: for an activation with parameters of its own (the built-in ones have none)."""

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        """Raises ValueError, naming the fix, for a config this activation cannot serve."""

    def __call__(self, x: jax.Array) -> jax.Array:
        raise NotImplementedError


def gelu(x: jax.Array) -> jax.Array:
    """GELU in its exact form, x * Phi(x) with the normal CDF via erf (Hendrycks & Gimpel;
    PyTorch's and Hugging Face's default). jax.nn.gelu alone would give the tanh form."""
    return jax.nn.gelu(x, approximate=False)


@ACTIVATIONS.register("relu")
class ReLU(Activation):
    def __call__(self, x):
        return jax.nn.relu(x)


@ACTIVATIONS.register("gelu")
class GELU(Activation):
    """Exact GELU (erf)."""

    def __call__(self, x):
        return gelu(x)


@ACTIVATIONS.register("gelu_tanh")
class GELUTanh(Activation):
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    def __call__(self, x):
        return jax.nn.gelu(x, approximate=True)


@ACTIVATIONS.register("silu")
class SiLU(Activation):
    """x * sigmoid(x): Marian's swish."""

    def __call__(self, x):
        return jax.nn.silu(x)


@ACTIVATIONS.register("swiglu")
class SwiGLU(SiLU):
    """silu(x W1) * (x Wg)."""

    gated = True


@ACTIVATIONS.register("geglu")
class GEGLU(GELU):
    """gelu(x W1) * (x Wg), exact GELU."""

    gated = True

"""Configurable sequence-to-sequence Transformer in JAX/Flax NNX."""

from transformer.config import ModelConfig
from transformer.errors import UserError
from transformer.masks import shift_right
from transformer.model import Transformer, count_params, param_shapes

__all__ = [
    "ModelConfig",
    "Transformer",
    "UserError",
    "count_params",
    "param_shapes",
    "shift_right",
]

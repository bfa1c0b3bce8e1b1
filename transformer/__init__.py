"""Configurable sequence-to-sequence Transformer in JAX/Flax NNX.

The public names below are imported on first use, so light tools (`python -m
transformer.report`) start without loading JAX.
"""

import importlib

_EXPORTS = {
    "ModelConfig": "transformer.config",
    "UserError": "transformer.errors",
    "Transformer": "transformer.model",
    "count_params": "transformer.model",
    "param_shapes": "transformer.model",
    "shift_right": "transformer.masks",
    "Translator": "transformer.translate",
    "DecodeSettings": "transformer.translate",
    "train_and_evaluate": "transformer.trainer",
    "evaluate": "transformer.evaluation",
    "Evaluation": "transformer.evaluation",
    "restore_run": "transformer.evaluation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'transformer' has no attribute {name!r}")


def __dir__():
    return __all__

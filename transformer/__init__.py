"""Configurable sequence-to-sequence Transformer in JAX/Flax NNX.

The public names below are imported on first use, so light tools (`transformer-report`)
start without loading JAX.
"""

import importlib

_EXPORTS = {
    "ModelConfig": "transformer.model.config",
    "UserError": "transformer.common.errors",
    "Transformer": "transformer.model.transformer",
    "count_params": "transformer.model.transformer",
    "param_shapes": "transformer.model.transformer",
    "shift_right": "transformer.model.masks",
    "Translator": "transformer.inference.translator",
    "DecodeSettings": "transformer.inference.translator",
    "train_and_evaluate": "transformer.training.loop",
    "evaluate": "transformer.evaluation.evaluator",
    "Evaluation": "transformer.evaluation.evaluator",
    "restore_run": "transformer.evaluation.restore",
    "get_base_config": "transformer.training.base_config",
    "load_config_file": "transformer.training.run_config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'transformer' has no attribute {name!r}")


def __dir__():
    return __all__

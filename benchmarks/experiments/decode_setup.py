"""The decoding set-up the profile_step and decode_ab experiments share: a random-init model
of the config, decode.batch_size random sources of data.max_source_len tokens, and the mode's
decode settings forced to emit exactly `length` tokens per row (benchmarks/common's
`forced_length_overrides`), so a random model does fixed work per call."""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks import common
from transformer.common.errors import UserError


@dataclasses.dataclass
class DecodeSetup:
    graphdef: Any
    params: Any
    model_cfg: Any
    src: Any  # [B, S] int32, EOS-terminated
    row_ids: Any  # [B] int32
    settings: Any  # DecodeSettings of the mode, forced to `length` tokens
    length: int

    def compile(self, settings=None):
        """(call, compiled): the Translator's batch program for settings (default: the
        mode's), compiled for these inputs, and `call()` running it on them. The decoding
        network's weight copies are made here, once, as decode.py makes them once per run."""
        from transformer.inference.translator import Translator

        translator = Translator(
            self.graphdef, self.model_cfg, settings or self.settings, None, None
        )
        prepared = translator.prepare(self.params)
        compiled = translator.lower(prepared, self.src, self.row_ids, self.length).compile()
        return (lambda: compiled(prepared.state, self.src, self.row_ids)), compiled


def decode_setup(config, mode: str, length: int) -> DecodeSetup:
    import jax.numpy as jnp
    from flax import nnx

    from transformer.data import EOS_ID
    from transformer.model.transformer import Transformer
    from transformer.training import run_config

    validated = run_config.validate(config)
    model_cfg = validated.model
    if length < 1 or length > model_cfg.max_len:
        raise UserError(f"--decode_len must be in [1, model.max_len={model_cfg.max_len}]")
    graphdef, params = nnx.split(Transformer(model_cfg, rngs=nnx.Rngs(params=0)), nnx.Param)
    rows, s_len = int(config.decode.batch_size), int(config.data.max_source_len)
    src = jnp.asarray(common.random_sources(1, rows, s_len, model_cfg.vocab_size, EOS_ID))
    forced = common.forced_length_overrides(mode, length, rows)
    settings = dataclasses.replace(validated.decode, **forced)
    return DecodeSetup(
        graphdef, params, model_cfg, src, jnp.arange(rows, dtype=jnp.int32), settings, length
    )

"""The decoding set-up the profile_step and decode_ab experiments share: a random-init model
of the config, decode.batch_size random sources of data.max_source_len tokens, and the mode's
decode settings forced to emit exactly `length` tokens per row (benchmarks/common's
`forced_length_overrides`), so a random model does fixed work per call; and the arms of the
A/B experiments (decode_ab, prepare_ab): `--arms` parsed into typed decode overrides, and
their calls timed in rotated rounds."""

from __future__ import annotations

import dataclasses
import os
import time
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

    def compile_building_weights(self, settings=None):
        """`call()` of one compiled program that builds the decoding network's weight copies
        from the trained parameters and then decodes, as if they were made in every call:
        the counterpart of `compile` for measuring what building them once saves."""
        import jax
        from flax import nnx

        from transformer.inference.translator import Translator
        from transformer.model.decoding_network import decoding_network

        settings = settings or self.settings
        translator = Translator(self.graphdef, self.model_cfg, settings, None, None)

        def build_and_decode(params, src, row_ids):
            network = decoding_network(nnx.merge(self.graphdef, params), settings.projections)
            graphdef, state = nnx.split(network)
            return translator._translate_batch(
                state, src, row_ids, graphdef=graphdef, max_out=self.length
            )

        compiled = jax.jit(build_and_decode).lower(self.params, self.src, self.row_ids).compile()
        return lambda: compiled(self.params, self.src, self.row_ids)


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


def parse_arms(text: str, fields: set[str]) -> list[dict]:
    """'a=1,b=x;' -> [{'a': '1', 'b': 'x'}, {}]: raw strings, typed by `typed_overrides`."""
    arms = []
    for arm in text.split(";"):
        overrides = {}
        for item in filter(None, (part.strip() for part in arm.split(","))):
            name, sep, value = item.partition("=")
            if not sep or name not in fields:
                raise UserError(
                    f"--arms: {item!r} is not FIELD=VALUE with a decode field; "
                    f"fields: {', '.join(sorted(fields))}"
                )
            overrides[name] = value
        arms.append(overrides)
    if len(arms) < 2:
        raise UserError(
            "--arms needs at least two arms separated by ';' (an empty arm is the "
            "config's own settings)"
        )
    return arms


def typed_overrides(base, overrides: dict) -> dict:
    """Casts each raw value to the type of the field's value in `base` (a DecodeSettings)."""
    typed = {}
    for name, raw in overrides.items():
        kind = type(getattr(base, name))
        if kind is bool:
            typed[name] = raw.lower() in ("1", "true", "yes")
        else:
            try:
                typed[name] = kind(raw)
            except ValueError:
                raise UserError(f"--arms: {name}={raw!r} is not a {kind.__name__}") from None
    return typed


def arm_label(overrides: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "(config)"


def interleaved_times(calls, rounds: int) -> list[list[float]]:
    """Seconds of every call, per arm: one untimed call each, then `rounds` rotated rounds."""
    for call in calls:
        call()
    times = [[] for _ in calls]
    for r in range(rounds):
        for i in [(r + j) % len(calls) for j in range(len(calls))]:
            start = time.perf_counter()
            calls[i]()
            times[i].append(time.perf_counter() - start)
    return times


def check_ab_options(config, modes, rounds: int) -> None:
    """The A/B experiments' common flags: a config, known modes, at least one round."""
    if config is None:
        raise UserError("--config is required (configs/bench_base.py)")
    unknown = sorted(set(modes) - set(common.DECODE_MODES))
    if unknown or rounds < 1:
        raise UserError(
            f"--modes: unknown {unknown} (valid: {', '.join(common.DECODE_MODES)}) or --rounds < 1"
        )


def emit_ab_setup(experiment: str, as_json: bool, rounds: int, arms: list[dict]) -> None:
    """The experiment's `setup` line: cores, the load average before it starts, its arms."""
    common.emit(
        "setup",
        0,
        "-",
        experiment,
        as_json,
        cpus=os.cpu_count(),
        loadavg_1m=round(os.getloadavg()[0], 2),
        rounds=rounds,
        arms=[arm_label(a) for a in arms],
    )

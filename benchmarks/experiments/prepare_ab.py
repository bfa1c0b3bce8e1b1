"""Decode-time weights built once per parameter set against built inside every call, side by
side: what `Translator.prepare` saves each decoding call.

    python -m benchmarks.experiments.prepare_ab --config configs/bench_base.py \
        [--arms "weight_layout=auto;quantize=int8,encoder_quantize=bfloat16"] \
        [--modes greedy,beam4] [--decode_len 64] [--rounds 3] [--json]

For every mode and decode-settings arm (decode_ab's --arms syntax; an empty arm is the
config's own settings), two programs decode the same random sources, forced to --decode_len
tokens per row: `once`, the Translator's program over weight copies made beforehand by
`Translator.prepare` (what decode.py and eval.py run), and `per_call`, one program that
builds those copies (layouts, fused Q/K/V, int8 and bfloat16 tables) from the trained
parameters and then decodes. Both are compiled and called once, then --rounds rotated rounds
call each once. Figures per mode and arm: `prepare_ab_call_s` (median call, impl `once` or
`per_call`), `prepare_ab_speedup` (per_call's median over once's: above 1, building once
saves time) with `tokens_agree` (share of output tokens equal), and `prepare_s`, the median
of three calls of `Translator.prepare` alone after its compile.
"""

from __future__ import annotations

import dataclasses
import os

from absl import flags
from ml_collections import config_flags

from benchmarks import common
from benchmarks.experiments.decode_setup import (
    arm_label,
    check_ab_options,
    decode_setup,
    emit_ab_setup,
    interleaved_times,
    parse_arms,
    typed_overrides,
)
from transformer.cli.app import run_cli

config_flags.DEFINE_config_file("config", None, "Config file (configs/bench_base.py).")
flags.DEFINE_string(
    "arms",
    "weight_layout=auto;quantize=int8,encoder_quantize=bfloat16",
    "Decode overrides per arm: 'a=1,b=2;a=3' (';' between arms).",
)
flags.DEFINE_list("modes", ["greedy", "beam4"], "Decoding modes (DECODE_MODES).")
flags.DEFINE_integer("decode_len", 64, "Output tokens per row.")
flags.DEFINE_integer("rounds", 3, "Timed rounds; each calls both programs once.")
flags.DEFINE_bool("json", False, "One JSON object per line instead of a table.")
FLAGS = flags.FLAGS


def prepare_seconds(setup, settings) -> float:
    """Median of three `Translator.prepare` calls after one that compiles it."""
    import jax

    from transformer.inference.translator import Translator

    translator = Translator(setup.graphdef, setup.model_cfg, settings, None, None)

    def prepare():
        return jax.block_until_ready(translator.prepare(setup.params).state)

    seconds, _ = common.median_time(prepare, warmup=1, repeats=3)
    return seconds


def compare(setup, settings, label: str, mode: str) -> None:
    import numpy as np

    once, _ = setup.compile(settings)
    per_call = setup.compile_building_weights(settings)
    calls = [lambda: once()[0].block_until_ready(), lambda: per_call()[0].block_until_ready()]
    outputs = [np.asarray(call()) for call in calls]
    medians = [float(np.median(t)) for t in interleaved_times(calls, FLAGS.rounds)]
    for impl, median in zip(("once", "per_call"), medians, strict=True):
        common.emit("prepare_ab_call_s", median, "s", impl, FLAGS.json, mode=mode, arm=label)
    agree = float(np.mean(outputs[0] == outputs[1]))
    common.emit(
        "prepare_ab_speedup",
        medians[1] / medians[0],
        "x",
        "once",
        FLAGS.json,
        mode=mode,
        arm=label,
        tokens_agree=round(agree, 4),
    )
    seconds = prepare_seconds(setup, settings)
    common.emit("prepare_s", seconds, "s", "once", FLAGS.json, mode=mode, arm=label)


def main(_argv) -> None:
    from transformer.inference.translator import DecodeSettings

    config = FLAGS.config
    check_ab_options(config, FLAGS.modes, FLAGS.rounds)
    fields = {f.name for f in dataclasses.fields(DecodeSettings)}
    # A trailing empty arm lets a single arm through parse_arms' two-arm rule.
    overrides = parse_arms(FLAGS.arms + ";", fields)[:-1]
    emit_ab_setup("prepare_ab", FLAGS.json, FLAGS.rounds, overrides)
    for mode in FLAGS.modes:
        setup = decode_setup(config, mode, FLAGS.decode_len)
        for arm in overrides:
            settings = dataclasses.replace(setup.settings, **typed_overrides(setup.settings, arm))
            compare(setup, settings, arm_label(arm), mode)
    common.emit("loadavg_end", round(os.getloadavg()[0], 2), "-", "prepare_ab", FLAGS.json)


if __name__ == "__main__":
    run_cli(main)

"""Decode settings compared side by side: each arm's compiled decoder called in turn, round
after round, so drift in the machine's speed falls on every arm alike.

    python -m benchmarks.experiments.decode_ab --config configs/bench_base.py \
        --arms "weight_layout=none;weight_layout=out_in" [--modes greedy,sample,beam4] \
        [--decode_len 64] [--rounds 7] [--json]

--arms lists decode-setting overrides, arms separated by ';' and fields within an arm by ','
(for example `quantize=int8,weight_layout=in_out`); an empty arm is the config's own
settings. For every mode (benchmarks/common's DECODE_MODES, forced to emit exactly
--decode_len tokens per row on decode.batch_size random sources of data.max_source_len
tokens), each arm is compiled and called once, then --rounds rounds call every arm once, in
an order rotated each round. Figures per mode and arm: `decode_ab_call_s` (the median call
over the rounds, with min/max) and `decode_ab_speedup`, the first arm's median over this
arm's (above 1: faster), with `tokens_agree`, the share of output tokens equal to the first
arm's, and `compile_s`, the seconds its program took to compile (weight copies included).
A one-off timing run on a machine whose speed drifts (a shared VM) can differ by 20%
between two runs of one program; alternating arms cancels that drift, which one run per arm
cannot.
"""

from __future__ import annotations

import dataclasses
import os
import time

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
flags.DEFINE_string("arms", "", "Decode overrides per arm: 'a=1,b=2;a=3' (';' between arms).")
flags.DEFINE_list("modes", ["greedy", "sample", "beam4"], "Decoding modes (DECODE_MODES).")
flags.DEFINE_integer("decode_len", 64, "Output tokens per row.")
flags.DEFINE_integer("rounds", 7, "Timed rounds; each calls every arm once.")
flags.DEFINE_bool("json", False, "One JSON object per line instead of a table.")
FLAGS = flags.FLAGS


def build_calls(config, mode: str, length: int, arms: list[dict]):
    """(calls, compile seconds): one zero-argument call per arm running its compiled decoder
    on the same sources and parameters, each returning the output tokens [B, R, length]."""
    setup = decode_setup(config, mode, length)
    calls, compile_s = [], []
    for overrides in arms:
        settings = dataclasses.replace(setup.settings, **typed_overrides(setup.settings, overrides))
        start = time.perf_counter()
        call, _ = setup.compile(settings)
        compile_s.append(time.perf_counter() - start)
        calls.append(lambda call=call: call()[0].block_until_ready())
    return calls, compile_s


def main(_argv) -> None:
    import numpy as np

    from transformer.inference.translator import DecodeSettings

    config = FLAGS.config
    check_ab_options(config, FLAGS.modes, FLAGS.rounds)
    arms = parse_arms(FLAGS.arms, {f.name for f in dataclasses.fields(DecodeSettings)})
    emit_ab_setup("decode_ab", FLAGS.json, FLAGS.rounds, arms)
    for mode in FLAGS.modes:
        calls, compile_s = build_calls(config, mode, FLAGS.decode_len, arms)
        outputs = [np.asarray(call()) for call in calls]
        medians = []
        for i, seconds in enumerate(interleaved_times(calls, FLAGS.rounds)):
            median = float(np.median(seconds))
            medians.append(median)
            label = arm_label(arms[i])
            common.emit(
                "decode_ab_call_s",
                median,
                "s",
                mode,
                FLAGS.json,
                arm=label,
                **common.spread(seconds),
            )
            agree = float(np.mean(outputs[i] == outputs[0]))
            common.emit(
                "decode_ab_speedup",
                medians[0] / median,
                "x",
                mode,
                FLAGS.json,
                arm=label,
                tokens_agree=round(agree, 4),
                compile_s=round(compile_s[i], 2),
            )
    common.emit("loadavg_end", round(os.getloadavg()[0], 2), "-", "decode_ab", FLAGS.json)


if __name__ == "__main__":
    run_cli(main)

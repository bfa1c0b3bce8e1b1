"""Where a training step's or a decoding call's time goes: a jax.profiler trace, per XLA op.

    python -m benchmarks.experiments.profile_step --config configs/bench_base.py
        [--config.field=value ...] [--what train|greedy|sample|beam4] [--decode_len 64]
        [--steps 3] [--top 25] [--trace_dir /tmp/transformer_profile] [--json]

--what train (default) builds the project's train step for the config on fixed-shape random
batches (as `python -m benchmarks.throughput --what train` does); greedy / sample / beam4 build the
Translator's compiled decoding call for decode.batch_size random sources, forced to emit
exactly --decode_len tokens per row (as `throughput.py --what decode` does, same settings).
It traces `--steps` calls dispatched back to back after compilation and warm-up, and reduces
the trace with profile_kinds.py: the time per call of each kind of work (matrix products,
attention kernels, dropout random bits, optimizer update, norms and reductions, copies and
transposes, elementwise fusions), on a GPU from its kernels with the idle gaps between them,
on the CPU from XLA's op events; the time outside device work (host dispatch; on the CPU the
runtime running ops one after another); the totals by place: ops in a while loop's body (a
decoding call's token steps) and ops outside any loop; and the slowest ops with their output
shape, kind and the JAX operation they came from. On the CPU the op times are summed over the
call and XLA's runtime can run independent ops at once, so they may add up to more than the
call's wall time. The trace (TensorBoard/Perfetto format) stays in --trace_dir.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import time

from absl import flags
from ml_collections import config_flags

from benchmarks import common
from benchmarks.experiments import profile_kinds
from benchmarks.experiments.decode_setup import decode_setup
from transformer.cli.app import run_cli
from transformer.common.errors import UserError

config_flags.DEFINE_config_file("config", None, "Config file (configs/bench_base.py).")
flags.DEFINE_enum("what", "train", ["train", *common.DECODE_MODES], "What to profile.")
flags.DEFINE_integer("decode_len", 64, "Output tokens per row when profiling decoding.")
flags.DEFINE_integer("steps", 3, "Traced calls (after one compile call and two warm-up calls).")
flags.DEFINE_integer("top", 25, "Ops listed, slowest first.")
flags.DEFINE_string("trace_dir", "/tmp/transformer_profile", "Where the trace is written.")
flags.DEFINE_bool("json", False, "One JSON object per line instead of a table.")
FLAGS = flags.FLAGS

# Call time outside the device work: host dispatch, and on the CPU the runtime between ops.
OUTSIDE = "outside device work"


def build_step(config):
    """(call, compiled HLO text): `call()` runs one train step of the config on a fixed-shape
    random batch and returns what to block on."""
    import jax
    import numpy as np

    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.run_state import build_train_model
    from transformer.training.steps import init_state, make_train_step

    model_cfg = run_config.validate(config).model
    optimizer, schedule = make_optimizer(config.train)
    # The model a run trains: train.remat, train.hand_written_vjps and train.dropout_bits.
    graphdef, state = init_state(build_train_model(model_cfg, config.train), optimizer)
    step = jax.jit(make_train_step(graphdef, optimizer, schedule, config.train), donate_argnums=0)
    batch = common.random_train_batch(
        np.random.default_rng(0),
        int(config.train.batch_size),
        int(config.data.max_source_len),
        int(config.data.max_target_len),
        model_cfg.vocab_size,
    )
    key = jax.random.key(0)
    compiled_text = step.lower(state, batch, key).compile().as_text()
    holder = {"state": state}

    def call():
        holder["state"], metrics = step(holder["state"], batch, key)
        return metrics

    return call, compiled_text


def build_decode(config, mode: str, length: int):
    """(call, compiled HLO text): `call()` decodes decode.batch_size random sources of
    data.max_source_len tokens with the `mode` settings, exactly `length` tokens per row."""
    setup = decode_setup(config, mode, length)
    call, compiled = setup.compile()
    return call, compiled.as_text()


def read_trace(trace_dir: str) -> dict:
    """The newest Perfetto trace (JSON) under trace_dir."""
    paths = glob.glob(os.path.join(trace_dir, "**", "*.json.gz"), recursive=True)
    if not paths:
        raise UserError(f"no trace written under {trace_dir}; is the directory writable?")
    with gzip.open(max(paths, key=os.path.getmtime)) as f:
        return json.load(f)


def main(argv):
    del argv
    import jax

    config = FLAGS.config
    if config is None:
        raise UserError("--config is required, e.g. --config configs/bench_base.py")
    if FLAGS.steps < 1 or FLAGS.top < 1:
        raise UserError("--steps and --top must be >= 1")
    if FLAGS.what == "train":
        call, compiled_text = build_step(config)
    else:
        call, compiled_text = build_decode(config, FLAGS.what, FLAGS.decode_len)
    for _ in range(3):  # compile + warm-up
        jax.block_until_ready(call())
    # The traced calls are dispatched back to back and waited for once, as a training loop
    # runs: a wait after each call would put host round trips between the device's kernels.
    jax.profiler.start_trace(FLAGS.trace_dir, create_perfetto_trace=True)
    start = time.perf_counter()
    results = [call() for _ in range(FLAGS.steps)]
    jax.block_until_ready(results)
    step_ms = (time.perf_counter() - start) / FLAGS.steps * 1e3
    jax.profiler.stop_trace()
    ops = profile_kinds.parse_hlo(compiled_text)
    events, streams = profile_kinds.trace_events(read_trace(FLAGS.trace_dir), ops)
    kinds = profile_kinds.kind_times(events, ops, FLAGS.steps, streams)
    per_op = profile_kinds.op_times(events, FLAGS.steps)
    places = collections.Counter()
    for name, ms in per_op.items():
        looped = name in ops and ops[name].in_loop
        places["in the loop" if looped else "outside any loop"] += ms
    rows = sorted(per_op.items(), key=lambda kv: -kv[1])[: FLAGS.top]
    report = print_json if FLAGS.json else print_table
    report(step_ms, kinds, places, [_row(name, ms, ops, events) for name, ms in rows], streams)


def _row(name: str, ms: float, ops, events) -> tuple:
    """(name, ms, output shape, kind, JAX op_name, in a loop) of one instruction."""
    op = ops.get(name)
    kernel = next((e.kernel for e in events if e.hlo_op == name), name)
    kind = profile_kinds.classify(op, kernel)
    if op is None:
        return name, ms, "", kind, kernel, False
    return name, ms, op.shape, kind, op.op_name, op.in_loop


def outside_ms(step_ms: float, kinds: dict) -> float:
    """Call time no device work accounts for: host dispatch, and on the CPU the runtime
    running ops one after another (the call minus the summed kind times, at least 0)."""
    return max(step_ms - sum(kinds.values()), 0.0)


def print_json(step_ms: float, kinds, places, rows, streams: bool) -> None:
    meta = {"what": FLAGS.what, "steps": FLAGS.steps, "device_streams": streams}
    common.emit("profiled_step_ms", step_ms, "ms", common.OURS, True, **meta)
    for kind, ms in kinds.items():
        share = ms / max(step_ms, 1e-9)
        common.emit("step_kind_ms", ms, "ms", common.OURS, True, kind=kind, share=share, **meta)
    outside = outside_ms(step_ms, kinds)
    common.emit(
        "step_kind_ms", outside, "ms", common.OURS, True, kind=OUTSIDE, share=outside / step_ms
    )
    for place, ms in places.most_common():
        common.emit("op_place_ms", ms, "ms", common.OURS, True, place=place)
    for name, ms, shape, kind, op_name, looped in rows:
        common.emit(
            "op_ms",
            ms,
            "ms",
            common.OURS,
            True,
            op=name,
            kind=kind,
            shape=shape,
            jax_op=op_name,
            in_loop=looped,
        )


def print_table(step_ms: float, kinds, places, rows, streams: bool) -> None:
    unit = "step" if FLAGS.what == "train" else f"{FLAGS.what} call ({FLAGS.decode_len} tokens)"
    print(
        f"{unit}: {step_ms:.1f} ms (mean of {FLAGS.steps} traced calls run back to back); "
        f"trace in {FLAGS.trace_dir}"
    )
    source = "device kernels" if streams else "op events"
    print(f"time per call by kind ({source}; sum {sum(kinds.values()):.1f} ms):")
    for kind, ms in (*kinds.items(), (OUTSIDE, outside_ms(step_ms, kinds))):
        print(f"  {kind:<22} {ms:9.2f} ms  {100 * ms / max(step_ms, 1e-9):5.1f}% of the call")
    print("op time per call by place (a while loop's body: the decode loop's token steps):")
    for place, ms in places.most_common():
        print(f"  {place:<16} {ms:9.1f} ms  {100 * ms / max(step_ms, 1e-9):5.1f}% of the call")
    print(f"slowest {len(rows)} ops (L: in a loop):")
    for name, ms, shape, kind, op_name, looped in rows:
        print(
            f"  {ms:8.2f} ms  {kind:<21} {'L' if looped else ' '} {name[:40]:<40} {shape[:24]:<24}"
            f" {op_name[-60:]}"
        )


if __name__ == "__main__":
    run_cli(main)

"""Where a training step's or a decoding call's time goes: a jax.profiler trace, per XLA op.

    python -m benchmarks.experiments.profile_step --config configs/bench_base.py
        [--config.field=value ...] [--what train|greedy|sample|beam4] [--decode_len 64]
        [--steps 3] [--top 25] [--trace_dir /tmp/transformer_profile] [--json]

--what train (default) builds the project's train step for the config on fixed-shape random
batches (as `python -m benchmarks.throughput --what train` does); greedy / sample / beam4 build the
Translator's compiled decoding call for decode.batch_size random sources, forced to emit
exactly --decode_len tokens per row (as `throughput.py --what decode` does, same settings).
It traces `--steps` calls after compilation and warm-up, and prints each XLA op's time per
call with its output shape and the JAX operation it came from, then the totals per kind:
matrix products (XLA CPU's `ynn_fusion`/`dot` ops and their fused epilogues), layout copies
(`copy`/`transpose` fusions: data moved into another layout, no arithmetic), the rest
(elementwise, reductions, RNG, sorting) and the time outside any op (the runtime dispatching
ops one after another, loop control), and the totals by place: ops in a while loop's body
(a decoding call's token steps) and ops outside any loop (its encoder, cross-attention
keys/values and set-up). The op
times are summed over the call; XLA's CPU runtime can run independent ops at once, so they
may add up to more than the call's wall time. The trace (TensorBoard/Perfetto format) stays
in --trace_dir.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import time

from absl import flags
from ml_collections import config_flags

from benchmarks import common
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

RUNTIME_EVENTS = ("ThunkExecutor", "$", "PjitFunction", "Slinky", "CommonPjRt", "Thunk")


def build_step(config):
    """(call, compiled HLO text): `call()` runs one train step of the config on a fixed-shape
    random batch and returns what to block on."""
    import jax
    import numpy as np
    from flax import nnx

    from transformer.model.transformer import Transformer
    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.steps import init_state, make_train_step

    model_cfg = run_config.validate(config).model
    optimizer, schedule = make_optimizer(config.train)
    graphdef, state = init_state(Transformer(model_cfg, rngs=nnx.Rngs(params=0)), optimizer)
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


def op_table(hlo_text: str) -> dict[str, tuple[str, str, str, bool]]:
    """{instruction name: (output shape, kind, JAX op_name, in a loop)} from compiled HLO
    text; `in a loop`: the instruction lies in a while loop's body (the decode loop's token
    steps) or in a computation such a body calls."""
    ops, computation_of, calls = {}, {}, collections.defaultdict(set)
    bodies, computation = set(), ""
    for line in hlo_text.splitlines():
        header = re.match(r"(?:ENTRY )?%(\S+) .*\{\s*$", line)
        if header and not line.startswith(" "):
            computation = header.group(1)
            continue
        bodies.update(re.findall(r"body=%([\w.\-]+)", line))  # a while loop's body
        for callees in re.findall(
            r"(?:calls|to_apply|branch_computations|true_computation|"
            r"false_computation|body|condition)=(\{[^}]*\}|%[\w.\-]+)",
            line,
        ):
            calls[computation].update(re.findall(r"%([\w.\-]+)", callees))
        match = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) (\w+)\(", line)  # not tuple-shaped
        if not match:
            continue
        name, shape, opcode = match.groups()
        if "__ynn_fusion" in line or opcode in ("dot", "convolution"):
            kind = "matmul"
        elif re.match(r"(copy|transpose)", name) or opcode in ("copy", "transpose"):
            kind = "layout copy"
        else:
            kind = "other"
        op_name = re.search(r'op_name="([^"]*)"', line)
        ops[name] = (shape, kind, op_name.group(1) if op_name else "")
        computation_of[name] = computation
    in_loop, frontier = set(bodies), list(bodies)
    while frontier:  # computations reachable from a loop body
        for callee in calls[frontier.pop()] - in_loop:
            in_loop.add(callee)
            frontier.append(callee)
    return {name: (*op, computation_of[name] in in_loop) for name, op in ops.items()}


def read_trace(trace_dir: str) -> collections.Counter:
    """Summed duration (microseconds) per event name of the newest Perfetto trace."""
    paths = glob.glob(os.path.join(trace_dir, "**", "*.json.gz"), recursive=True)
    if not paths:
        raise UserError(f"no trace written under {trace_dir}; is the directory writable?")
    with gzip.open(max(paths, key=os.path.getmtime)) as f:
        events = json.load(f)["traceEvents"]
    totals = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and not event["name"].startswith(RUNTIME_EVENTS):
            totals[event["name"]] += event.get("dur", 0)
    return totals


def main(argv):
    del argv
    import jax
    import numpy as np

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
    times = []
    jax.profiler.start_trace(FLAGS.trace_dir, create_perfetto_trace=True)
    for _ in range(FLAGS.steps):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    jax.profiler.stop_trace()
    step_ms = float(np.median(times)) * 1e3
    ops = op_table(compiled_text)
    totals = read_trace(FLAGS.trace_dir)
    per_step = {name: us / FLAGS.steps / 1e3 for name, us in totals.items() if name in ops}
    kinds, places = collections.Counter(), collections.Counter()
    for name, ms in per_step.items():
        kinds[ops[name][1]] += ms
        places["in the loop" if ops[name][3] else "outside any loop"] += ms
    rows = sorted(per_step.items(), key=lambda kv: -kv[1])[: FLAGS.top]
    report = print_json if FLAGS.json else print_table
    report(step_ms, kinds, places, [(name, ms, *ops[name]) for name, ms in rows])


def print_json(step_ms: float, kinds, places, rows) -> None:
    print(json.dumps({"figure": "profiled_step_ms", "value": step_ms, "steps": FLAGS.steps}))
    for kind, ms in kinds.most_common():
        print(json.dumps({"figure": "op_kind_ms", "kind": kind, "value": ms}))
    outside = max(step_ms - sum(kinds.values()), 0.0)
    print(json.dumps({"figure": "op_kind_ms", "kind": "outside ops", "value": outside}))
    for place, ms in places.most_common():
        print(json.dumps({"figure": "op_place_ms", "place": place, "value": ms}))
    for name, ms, shape, kind, op_name, looped in rows:
        print(
            json.dumps(
                {
                    "figure": "op_ms",
                    "op": name,
                    "value": ms,
                    "kind": kind,
                    "shape": shape,
                    "jax_op": op_name,
                    "in_loop": looped,
                }
            )
        )


def print_table(step_ms: float, kinds, places, rows) -> None:
    unit = "step" if FLAGS.what == "train" else f"{FLAGS.what} call ({FLAGS.decode_len} tokens)"
    print(
        f"{unit}: {step_ms:.1f} ms (median of {FLAGS.steps} traced calls); trace in "
        f"{FLAGS.trace_dir}"
    )
    print(f"op time per call by kind (sum {sum(kinds.values()):.1f} ms):")
    for kind, ms in kinds.most_common():
        print(f"  {kind:<12} {ms:9.1f} ms  {100 * ms / max(step_ms, 1e-9):5.1f}% of the call")
    outside = step_ms - sum(kinds.values())
    if outside > 0:  # runtime dispatch between ops, loop control, host work
        print(
            f"  {'outside ops':<12} {outside:9.1f} ms  {100 * outside / step_ms:5.1f}% of the call"
        )
    print("op time per call by place (a while loop's body: the decode loop's token steps):")
    for place, ms in places.most_common():
        print(f"  {place:<16} {ms:9.1f} ms  {100 * ms / max(step_ms, 1e-9):5.1f}% of the call")
    print(f"slowest {len(rows)} ops (L: in a loop):")
    for name, ms, shape, kind, op_name, looped in rows:
        print(
            f"  {ms:8.1f} ms  {kind:<11} {'L' if looped else ' '} {name:<28} {shape:<24} "
            f"{op_name[-60:]}"
        )


if __name__ == "__main__":
    run_cli(main)

"""Where a training step's time goes: a jax.profiler trace of the compiled step, per XLA op.

    python benchmarks/profile_step.py --config configs/bench_base.py [--config.field=value ...]
        [--steps 3] [--top 25] [--trace_dir /tmp/transformer_profile] [--json]

Builds the project's train step for the config on fixed-shape random batches (as
`benchmarks/throughput.py --what train` does), traces `--steps` steps after compilation, and
prints each XLA op's time per step with its output shape and the JAX operation it came from,
then the totals per kind: matrix products (XLA CPU's `ynn_fusion`/`dot` ops and their fused
epilogues), layout copies (`copy`/`transpose` fusions: data moved into another layout, no
arithmetic) and the rest (elementwise, reductions, RNG, loops). The op times are summed over
the step; XLA's CPU runtime can run independent ops at once, so they may add up to more than
the step's wall time. The trace (TensorBoard/Perfetto format) stays in --trace_dir.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import sys
import time

from absl import flags
from ml_collections import config_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from transformer.cli import run_cli  # noqa: E402
from transformer.errors import UserError  # noqa: E402

config_flags.DEFINE_config_file("config", None, "Config file (configs/bench_base.py).")
flags.DEFINE_integer("steps", 3, "Traced steps (after one compile step and two warm-up steps).")
flags.DEFINE_integer("top", 25, "Ops listed, slowest first.")
flags.DEFINE_string("trace_dir", "/tmp/transformer_profile", "Where the trace is written.")
flags.DEFINE_bool("json", False, "One JSON object per line instead of a table.")
FLAGS = flags.FLAGS

RUNTIME_EVENTS = ("ThunkExecutor", "$", "PjitFunction", "Slinky", "CommonPjRt", "Thunk")


def build_step(config):
    """(jitted train step, state, batch, rng) for the config, on random fixed-shape batches."""
    import jax
    import numpy as np
    from flax import nnx

    from transformer import run_config
    from transformer.model import Transformer
    from transformer.optim import make_optimizer
    from transformer.steps import init_state, make_train_step

    model_cfg = run_config.validate(config)
    optimizer, schedule = make_optimizer(config.train)
    graphdef, state = init_state(Transformer(model_cfg, rngs=nnx.Rngs(params=0)), optimizer)
    step = jax.jit(make_train_step(graphdef, optimizer, schedule, config.train), donate_argnums=0)
    rows = int(config.train.batch_size)
    rng = np.random.default_rng(0)
    batch = {}
    for side, length in (("src", config.data.max_source_len), ("tgt", config.data.max_target_len)):
        length = int(length)
        batch[side] = rng.integers(4, model_cfg.vocab_size, (rows, length), dtype=np.int32)
        batch[f"{side}_segments"] = np.ones((rows, length), np.int32)
        batch[f"{side}_positions"] = np.tile(np.arange(length, dtype=np.int32), (rows, 1))
    return step, state, batch, jax.random.key(0)


def op_table(hlo_text: str) -> dict[str, tuple[str, str, str]]:
    """{instruction name: (output shape, kind, JAX op_name)} from compiled HLO text."""
    ops = {}
    for line in hlo_text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) (\w+)\(", line)
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
    return ops


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
    step, state, batch, rng = build_step(config)
    compiled_text = step.lower(state, batch, rng).compile().as_text()
    for _ in range(3):  # compile + warm-up
        state, metrics = step(state, batch, rng)
        jax.block_until_ready(metrics)
    times = []
    jax.profiler.start_trace(FLAGS.trace_dir, create_perfetto_trace=True)
    for _ in range(FLAGS.steps):
        start = time.perf_counter()
        state, metrics = step(state, batch, rng)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    jax.profiler.stop_trace()
    step_ms = float(np.median(times)) * 1e3
    ops = op_table(compiled_text)
    totals = read_trace(FLAGS.trace_dir)
    per_step = {name: us / FLAGS.steps / 1e3 for name, us in totals.items() if name in ops}
    kinds = collections.Counter()
    for name, ms in per_step.items():
        kinds[ops[name][1]] += ms
    rows = sorted(per_step.items(), key=lambda kv: -kv[1])[: FLAGS.top]
    if FLAGS.json:
        print(json.dumps({"figure": "profiled_step_ms", "value": step_ms, "steps": FLAGS.steps}))
        for kind, ms in kinds.most_common():
            print(json.dumps({"figure": "op_kind_ms", "kind": kind, "value": ms}))
        for name, ms in rows:
            shape, kind, op_name = ops[name]
            print(json.dumps({"figure": "op_ms", "op": name, "value": ms, "kind": kind,
                              "shape": shape, "jax_op": op_name}))  # fmt: skip
        return
    print(f"step: {step_ms:.1f} ms (median of {FLAGS.steps} traced steps); trace in "
          f"{FLAGS.trace_dir}")  # fmt: skip
    print(f"op time per step by kind (sum {sum(kinds.values()):.1f} ms):")
    for kind, ms in kinds.most_common():
        print(f"  {kind:<12} {ms:9.1f} ms  {100 * ms / max(step_ms, 1e-9):5.1f}% of the step")
    print(f"slowest {len(rows)} ops:")
    for name, ms in rows:
        shape, kind, op_name = ops[name]
        print(f"  {ms:8.1f} ms  {kind:<11}  {name:<28} {shape:<24} {op_name[-60:]}")


if __name__ == "__main__":
    run_cli(main)

"""The train part of benchmarks/throughput.py, and the `Bench` the other parts share.

`Bench` holds the config, the random-init model's train state and the project's train step
jitted by `Parallel('mesh')`, compiled ahead of time once per batch shape (the train and
pipeline parts share those executables), and prints each figure. `train` times that step on
fixed random batches and reports its FLOPs and MFU against a measured matmul peak (or
--peak_tflops). The figures are described in benchmarks/throughput.py.
"""

from __future__ import annotations

import time

from benchmarks import common
from transformer.common.errors import UserError

IMPL = common.OURS


def ints(values, name: str) -> list[int]:
    try:
        out = [int(v) for v in values]
    except ValueError:
        raise UserError(f"--{name} must be comma-separated integers, got {values!r}") from None
    if not out or any(v < 1 for v in out):
        raise UserError(f"--{name} must list positive integers, got {values!r}")
    return out


def block(x):
    import jax

    return jax.block_until_ready(x)


def aot(jitted, *args, **kwargs):
    """(compiled executable, seconds to lower + compile)."""
    start = time.perf_counter()
    compiled = jitted.lower(*args, **kwargs).compile()
    return compiled, time.perf_counter() - start


class Bench:
    """One benchmark run: `options` are the command's absl flags."""

    def __init__(self, config, settings, options):
        """`settings`: run_config.validate's model and decode settings of `config`."""
        import jax

        self.config = config
        self.model_cfg = settings.model
        self.decode = settings.decode
        self.options = options
        self.as_json = options.json
        self.steps = options.steps
        self.meta = {"backend": jax.default_backend(), "dtype": self.model_cfg.dtype}
        if getattr(options, "size_label", ""):
            self.meta["size"] = options.size_label

    def emit(self, figure, value, unit, impl=IMPL, **extra):
        common.emit(figure, value, unit, impl, self.as_json, **self.meta, **extra)

    def new_state(self):
        """(graphdef, train state, optimizer, schedule) of the random-init model."""
        from transformer.training.optim import make_optimizer
        from transformer.training.run_state import build_train_model
        from transformer.training.steps import init_state

        optimizer, schedule = make_optimizer(self.config.train)
        # The benchmark's --seed, with the run config's other train settings (train.remat).
        train = self.config.train.copy_and_resolve_references()
        train.seed = self.options.seed
        model = build_train_model(self.model_cfg, train)
        graphdef, state = init_state(model, optimizer)
        return graphdef, state, optimizer, schedule

    def train_setup(self):
        """The project's train step jitted by `Parallel('mesh')`, built once per run; the
        train and pipeline parts share it, its state and its executables (one per shape)."""
        if not hasattr(self, "_parallel"):
            import jax

            from transformer.training.parallel import Parallel
            from transformer.training.steps import make_train_step

            t = self.config.train
            self._parallel = Parallel("mesh", int(t.fsdp))
            graphdef, state, optimizer, schedule = self.new_state()
            self._state = self._parallel.place_state(state)
            self._step = self._parallel.compile_train_step(
                lambda axis: make_train_step(graphdef, optimizer, schedule, t, axis_name=axis),
                self._state,
            )
            self._executables = {}
            self._rng = jax.random.key(t.seed)
        return self._parallel

    def train_step(self, batch) -> float:
        """Compiles the step for this batch's shapes if new; returns the compile seconds."""
        shape = (batch["src"].shape, batch["tgt"].shape)
        if shape in self._executables:
            return 0.0
        self._executables[shape], seconds = aot(self._step, self._state, batch, self._rng)
        return seconds

    def run_step(self, batch):
        """One compiled train step on a sharded batch (state updated in place); metrics."""
        fn = self._executables[(batch["src"].shape, batch["tgt"].shape)]
        self._state, metrics = fn(self._state, batch, self._rng)
        return metrics


def matmul_peak(bench: Bench) -> tuple[float, int]:
    """Best median GFLOP/s of a jitted square matmul in the compute dtype, and its size."""
    import jax
    import jax.numpy as jnp

    dtype = jnp.bfloat16 if bench.model_cfg.dtype == "bfloat16" else jnp.float32
    best = (0.0, 0)
    for n in ints(bench.options.matmul_sizes, "matmul_sizes"):
        keys = jax.random.split(jax.random.key(bench.options.seed), 2)
        a = jax.random.normal(keys[0], (n, n), dtype)
        b = jax.random.normal(keys[1], (n, n), dtype)
        dot, _ = aot(jax.jit(jnp.dot), a, b)
        seconds, _ = common.median_time(
            lambda dot=dot, a=a, b=b: dot(a, b), warmup=2, repeats=8, sync=block
        )
        gflops = 2.0 * n**3 / seconds / 1e9
        if gflops > best[0]:
            best = (gflops, n)
    return best


def train(bench: Bench) -> None:
    import jax
    import numpy as np

    from transformer.model.flops import train_step_flops

    d, t = bench.config.data, bench.config.train
    rows, s_len, t_len = int(t.batch_size), int(d.max_source_len), int(d.max_target_len)
    parallel = bench.train_setup()
    rng = np.random.default_rng(bench.options.seed)
    batches = []
    for _ in range(2):
        batch = common.random_train_batch(rng, rows, s_len, t_len, bench.model_cfg.vocab_size)
        batches.append(parallel.shard_batch(batch))
    compile_s = bench.train_step(batches[0])
    counter = iter(range(10**9))

    def one_step():
        return bench.run_step(batches[next(counter) % 2])

    step_s, times = common.median_time(one_step, warmup=1, repeats=bench.steps, sync=block)
    loss = float(jax.device_get(one_step()["loss"]))
    tokens = rows * (s_len + t_len)
    flops = train_step_flops(bench.model_cfg, rows, s_len, t_len)
    peak_gflops, peak_n = matmul_peak(bench)
    peak_tflops = bench.options.peak_tflops
    if peak_tflops:
        peak, peak_source = peak_tflops * 1e12, f"--peak_tflops={peak_tflops}"
    else:
        peak, peak_source = peak_gflops * 1e9, f"measured matmul {peak_n}x{peak_n}"
    extra = dict(
        batch=rows,
        source_len=s_len,
        target_len=t_len,
        warmup=1,
        repeats=bench.steps,
        **common.spread(times),
        loss=round(loss, 3),
    )
    bench.emit("train_tokens_per_s", tokens / step_s, "tokens/s", **extra)
    bench.emit("train_step_s", step_s, "s", **extra)
    bench.emit("compile_s", compile_s, "s", what="train step", cached=compile_s == 0)
    bench.emit("train_step_flops", flops, "FLOP", formula="3 x transformer.model.flops.forward")
    bench.emit("matmul_peak_gflops", peak_gflops, "GFLOP/s", matmul_size=peak_n)
    achieved = flops / step_s
    bench.emit(
        "mfu",
        achieved / peak,
        "fraction",
        achieved_gflops=round(achieved / 1e9, 2),
        peak=peak_source,
    )

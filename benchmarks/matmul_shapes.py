"""The matrix products of Transformer-base in XLA, PyTorch and NumPy on this machine.

    python benchmarks/matmul_shapes.py [--json] [--impls xla,xla_1thread,torch,torch_1thread,numpy]
        [--shapes decode32,decode128,train] [--repeats 20] [--dtype float32]

Each figure is `matmul_gflops_<shape>`: 2 M K N / the median time of --repeats products of a
random [M, K] by [K, N] float32 pair (after 3 warm-up products), in GFLOP/s, one row per
implementation:

  xla            jax.jit(jnp.dot) with XLA's default CPU threading
  xla_1thread    the same in a subprocess with XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
                 intra_op_parallelism_threads=1 (does XLA use both cores for this shape?)
  torch          torch.matmul with PyTorch's default intra-op threads
  torch_1thread  torch.matmul with torch.set_num_threads(1)
  numpy          numpy.dot on its BLAS

Shapes (M x K x N, the products of configs/bench_base.py):
  decode32   one greedy decode step at batch 32: 32 x 512 x 512 (a projection),
             32 x 512 x 2048 (FFN in), 32 x 2048 x 512 (FFN out), 32 x 512 x 8000 (logits)
  decode128  the same at 128 rows (beam 4 over batch 32)
  train      a training step's 4096 token rows: 4096 x 512 x 2048, 4096 x 2048 x 512,
             4096 x 512 x 8000

The load average is recorded with the setup record; ratios from a busy machine mean little
(PyTorch's OpenMP threads slow down several-fold when another process holds a core).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:  # run as `python benchmarks/matmul_shapes.py` (script dir on sys.path) or as a module
    from benchmarks.common import emit
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import emit

D, F, V = 512, 2048, 8000
SHAPES = {
    "decode32": [(32, D, D), (32, D, F), (32, F, D), (32, D, V)],
    "decode128": [(128, D, D), (128, D, F), (128, F, D), (128, D, V)],
    "train": [(4096, D, F), (4096, F, D), (4096, D, V)],
}
IMPLS = ("xla", "xla_1thread", "torch", "torch_1thread", "numpy")
ONE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
WARMUP = 3


def _median_seconds(product, repeats: int) -> float:
    for _ in range(WARMUP):
        product()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _operands(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)


_TORCH_DEFAULT_THREADS: list[int] = []  # PyTorch's own choice, read before any change


def _torch():
    import torch

    if not _TORCH_DEFAULT_THREADS:
        _TORCH_DEFAULT_THREADS.append(torch.get_num_threads())
    return torch


def _product_fn(impl: str, a: np.ndarray, b: np.ndarray):
    """A zero-argument callable computing a @ b to completion with `impl`."""
    if impl == "numpy":
        return lambda: np.dot(a, b)
    if impl.startswith("torch"):
        torch = _torch()
        torch.set_num_threads(1 if impl == "torch_1thread" else _TORCH_DEFAULT_THREADS[0])
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        return lambda: torch.matmul(ta, tb)
    import jax
    import jax.numpy as jnp

    dot = jax.jit(jnp.dot)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    return lambda: dot(ja, jb).block_until_ready()


def _measure(impl: str, shapes: list[str], repeats: int) -> list[dict]:
    rows = []
    for name in shapes:
        for m, k, n in SHAPES[name]:
            seconds = _median_seconds(_product_fn(impl, *_operands(m, k, n)), repeats)
            gflops = 2 * m * k * n / seconds / 1e9
            rows.append({"figure": f"matmul_gflops_{m}x{k}x{n}", "value": gflops, "shape": name,
                         "median_s": seconds})  # fmt: skip
    return rows


def _measure_in_subprocess(shapes: list[str], repeats: int) -> list[dict]:
    """xla_1thread: XLA's threading is fixed when the backend starts, so a fresh process."""
    env = dict(os.environ, XLA_FLAGS=ONE_THREAD_XLA, JAX_PLATFORMS="cpu")
    command = [sys.executable, __file__, "--_rows_of=xla", "--shapes", ",".join(shapes),
               "--repeats", str(repeats)]  # fmt: skip
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_rows_of", help=argparse.SUPPRESS)  # internal: one impl's rows
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    shapes, impls = args.shapes.split(","), args.impls.split(",")
    bad = sorted(set(shapes) - set(SHAPES)) + sorted(set(impls) - set(IMPLS))
    if bad or args.repeats < 1:
        print(f"error: unknown shape/impl {bad} or --repeats < 1; shapes: {list(SHAPES)}, "
              f"impls: {list(IMPLS)}", file=sys.stderr)  # fmt: skip
        return 2
    if args._rows_of:
        print(json.dumps(_measure(args._rows_of, shapes, args.repeats)))
        return 0
    emit("setup", 0, "-", "matmul", args.json, cpus=os.cpu_count(),
         loadavg_1m=round(os.getloadavg()[0], 2))  # fmt: skip
    for impl in impls:
        if impl == "xla_1thread":
            rows = _measure_in_subprocess(shapes, args.repeats)
        else:
            rows = _measure(impl, shapes, args.repeats)
        for row in rows:
            emit(row.pop("figure"), row.pop("value"), "GFLOP/s", impl, args.json, **row)
    emit("loadavg_end", round(os.getloadavg()[0], 2), "-", "matmul", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The matrix products of Transformer-base in XLA, PyTorch and NumPy on this machine.

    python -m benchmarks.experiments.matmul_shapes [--json]
        [--impls xla,xla_1thread,xla_int8,torch,...] [--shapes decode32,decode128,train]
        [--weights cached,streamed] [--stream_mib 256] [--repeats 20]

Each figure is 2 M K N / the median time of one random [M, K] by [K, N] float32 product
(after 3 warm-up calls), in GFLOP/s, one row per implementation and weight placement:

  matmul_gflops_<MxKxN>           cached: the same weight matrix every time, so a matrix
                                  that fits the CPU's caches is read from them
  matmul_streamed_gflops_<MxKxN>  streamed: each call runs the product over a ring of
                                  distinct weight matrices holding --stream_mib MiB (256:
                                  several times any last-level cache), so every weight is
                                  read from memory, as a decode step reads its ~100 MB of
                                  weights; the figure's
                                  `weight_gbs` is the weight bytes read per second (decode
                                  shapes only: a training step's products are compute-bound)

Implementations:

  xla            jax.jit(jnp.dot) with XLA's default CPU threading
  xla_1thread    the same in a subprocess with XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
                 intra_op_parallelism_threads=1 (does XLA use both cores for this shape?)
  xla_nk         jnp.dot with the weight stored transposed, [N, K], both operands contracted
                 on their minor axis (decode.weight_layout=out_in's copies)
  xla_int8       decode.quantize=int8's product (transformer.model.quantize.int8_matmul:
                 rows quantized at each product, int8 weights, int32 sums), jitted
  xla_bf16       decode.quantize=bfloat16's product (projection_policy.Projected): bfloat16
                 weights and rows, float32 sums, jitted
  torch          torch.matmul with PyTorch's default intra-op threads
  torch_1thread  torch.matmul with torch.set_num_threads(1)
  torch_linear   torch.nn.functional.linear with an [N, K] weight, as nn.Linear (and so
                 Hugging Face's Marian) stores and multiplies it
  numpy          numpy.dot on its BLAS

`memory_read_gbs` (impl xla) is the rate at which a jitted sum reads a --stream_mib float32
array: the machine's memory bandwidth as XLA sees it, the bound a streamed product meets.

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

from benchmarks.common import emit

D, F, V = 512, 2048, 8000
SHAPES = {
    "decode32": [(32, D, D), (32, D, F), (32, F, D), (32, D, V)],
    "decode128": [(128, D, D), (128, D, F), (128, F, D), (128, D, V)],
    "train": [(4096, D, F), (4096, F, D), (4096, D, V)],
}
WEIGHT_BYTES = {"xla_int8": 1, "xla_bf16": 2}  # per weight; float32 (4) otherwise
IMPLS = (
    "xla",
    "xla_1thread",
    "xla_nk",
    "xla_int8",
    "xla_bf16",
    "torch",
    "torch_1thread",
    "torch_linear",
    "numpy",
)
WEIGHTS = ("cached", "streamed")
STREAM_MIB = 256  # default ring of distinct weights: far past any last-level cache
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


def _operands(m: int, k: int, n: int, copies: int) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), np.float32)
    return x, [rng.standard_normal((k, n), np.float32) for _ in range(copies)]


def _ring_size(weights: str, k: int, n: int, stream_mib: int) -> int:
    """How many distinct [K, N] float32 matrices one call multiplies by."""
    return 1 if weights == "cached" else max(2, stream_mib * 2**20 // (4 * k * n))


_TORCH_DEFAULT_THREADS: list[int] = []  # PyTorch's own choice, read before any change


def _torch():
    import torch

    if not _TORCH_DEFAULT_THREADS:
        _TORCH_DEFAULT_THREADS.append(torch.get_num_threads())
    return torch


def _products_fn(impl: str, x: np.ndarray, ws: list[np.ndarray]):
    """A zero-argument callable computing x @ w for every w in ws to completion with `impl`."""
    if impl == "numpy":
        return lambda: [np.dot(x, w) for w in ws]
    if impl.startswith("torch"):
        torch = _torch()
        torch.set_num_threads(1 if impl == "torch_1thread" else _TORCH_DEFAULT_THREADS[0])
        tx = torch.from_numpy(x)
        if impl == "torch_linear":
            tws = [torch.from_numpy(np.ascontiguousarray(w.T)) for w in ws]  # [N, K]
            return lambda: [torch.nn.functional.linear(tx, tw) for tw in tws]
        tws = [torch.from_numpy(w) for w in ws]
        return lambda: [torch.matmul(tx, tw) for tw in tws]
    import jax
    import jax.numpy as jnp

    if impl == "xla_int8":
        from transformer.model.quantize import int8_matmul, quantize_columns

        operands = [quantize_columns(jnp.asarray(w)) for w in ws]  # (int8 [K, N], scale [N])
        products = jax.jit(lambda x, ops: [int8_matmul(x, *op) for op in ops])
    elif impl == "xla_bf16":
        from transformer.model.projection_policy import Projected

        operands = [
            Projected.of(
                [jnp.asarray(w)], None, layout="in_out", dtype=jnp.float32, quantize="bfloat16"
            )
            for w in ws
        ]
        products = jax.jit(lambda x, ops: [op(x) for op in ops])
    elif impl == "xla_nk":
        operands = [jnp.asarray(np.ascontiguousarray(w.T)) for w in ws]  # [N, K]
        products = jax.jit(lambda x, ops: [jnp.einsum("mk,nk->mn", x, w) for w in ops])
    else:
        operands = [jnp.asarray(w) for w in ws]
        products = jax.jit(lambda x, ops: [jnp.dot(x, w) for w in ops])
    jx = jnp.asarray(x)
    return lambda: jax.block_until_ready(products(jx, operands))


def _measure(
    impl: str, shapes: list[str], weights: list[str], repeats: int, stream_mib: int
) -> list[dict]:
    rows = []
    for placement in weights:
        for name in shapes:
            if placement == "streamed" and not name.startswith("decode"):
                continue
            for m, k, n in SHAPES[name]:
                copies = _ring_size(placement, k, n, stream_mib)
                call_s = _median_seconds(_products_fn(impl, *_operands(m, k, n, copies)), repeats)
                seconds = call_s / copies  # one product
                prefix = "matmul_gflops" if placement == "cached" else "matmul_streamed_gflops"
                weight_bytes = k * n * WEIGHT_BYTES.get(impl, 4)
                rows.append(
                    {
                        "figure": f"{prefix}_{m}x{k}x{n}",
                        "value": 2 * m * k * n / seconds / 1e9,
                        "shape": name,
                        "weights": placement,
                        "median_s": seconds,
                        "ring": copies,
                        "weight_gbs": weight_bytes / seconds / 1e9,
                    }
                )
    return rows


def _memory_read_gbs(repeats: int, stream_mib: int) -> float:
    import jax
    import jax.numpy as jnp

    array = jnp.ones((stream_mib * 2**20 // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    seconds = _median_seconds(lambda: total(array).block_until_ready(), repeats)
    return stream_mib * 2**20 / seconds / 1e9


def _measure_in_subprocess(
    shapes: list[str], weights: list[str], repeats: int, stream_mib: int
) -> list[dict]:
    """xla_1thread: XLA's threading is fixed when the backend starts, so a fresh process."""
    env = dict(os.environ, XLA_FLAGS=ONE_THREAD_XLA, JAX_PLATFORMS="cpu")
    command = [sys.executable, "-m", __spec__.name, "--_rows_of=xla"]
    command += ["--shapes", ",".join(shapes), "--weights", ",".join(weights)]
    command += ["--repeats", str(repeats), "--stream_mib", str(stream_mib)]
    # `-m` finds the package from the working directory, so the child starts in the
    # repository root wherever this process was started from.
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(command, env=env, cwd=root, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--weights", default=",".join(WEIGHTS), help="cached and/or streamed")
    parser.add_argument(
        "--stream_mib",
        type=int,
        default=STREAM_MIB,
        help="MiB of distinct weights in the streamed ring (and the array memory_read_gbs sums)",
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_rows_of", help=argparse.SUPPRESS)  # internal: one impl's rows
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    shapes, impls = args.shapes.split(","), args.impls.split(",")
    weights = args.weights.split(",")
    bad = (
        sorted(set(shapes) - set(SHAPES))
        + sorted(set(impls) - set(IMPLS))
        + sorted(set(weights) - set(WEIGHTS))
    )
    if bad or args.repeats < 1 or args.stream_mib < 1:
        print(
            f"error: unknown shape/impl/weights {bad} or --repeats < 1; shapes: "
            f"{list(SHAPES)}, impls: {list(IMPLS)}, weights: {list(WEIGHTS)}; --stream_mib >= 1",
            file=sys.stderr,
        )
        return 2
    if args._rows_of:
        print(json.dumps(_measure(args._rows_of, shapes, weights, args.repeats, args.stream_mib)))
        return 0
    emit(
        "setup",
        0,
        "-",
        "matmul",
        args.json,
        cpus=os.cpu_count(),
        loadavg_1m=round(os.getloadavg()[0], 2),
    )
    emit(
        "memory_read_gbs",
        _memory_read_gbs(args.repeats, args.stream_mib),
        "GB/s",
        "xla",
        args.json,
        bytes=args.stream_mib * 2**20,
    )
    for impl in impls:
        if impl == "xla_1thread":
            rows = _measure_in_subprocess(shapes, weights, args.repeats, args.stream_mib)
        else:
            rows = _measure(impl, shapes, weights, args.repeats, args.stream_mib)
        for row in rows:
            emit(row.pop("figure"), row.pop("value"), "GFLOP/s", impl, args.json, **row)
    emit("loadavg_end", round(os.getloadavg()[0], 2), "-", "matmul", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

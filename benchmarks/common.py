"""Small, framework-free helpers shared by the benchmark scripts.

- `emit(figure, value, unit, impl, as_json, **extra)` prints one figure, either as one JSON
  object per line (`{"figure", "value", "unit", "impl", **extra}`) or as a readable table row.
- `median_time(fn, warmup, repeats, sync=None)` times `fn` after warm-up calls and returns
  `(median_s, all_times)`; `sync(result)` is called inside the timed region so asynchronous
  work (JAX dispatch, CUDA streams) is finished before the clock stops.
- `peak_rss_mib()` is the process's peak resident set size so far, in MiB.
- `machine_tag()`: the short name of this machine that recorded results files begin with
  ('epyc2': the CPU family and the core count).
- `busy(loadavg_1m, cpus)`: whether a benchmark that started at that load average shares the
  machine with other work, so that its figures must not enter a ratio.
- `random_train_batch(rng, rows, src_len, tgt_len, vocab_size)`: a fixed-shape, unpacked
  training batch of random word ids; `random_sources(seed, rows, length, vocab_size, eos_id)`:
  EOS-terminated random source rows for decoding.
- `forced_length_overrides(mode, length, rows)`: decode-setting overrides that make every row
  emit exactly `length` tokens (EOS forbidden before the last position, forced at it), so a
  random model does fixed work per call.

- `OURS`, `PEER`, `PEER_COMPILED`, `CT2_FLOAT32`, `CT2_INT8`: the implementation names the
  scripts print;
  `ct2_impl(precision)` names CTranslate2 at a weight type and `ours_impl(quantize)` this
  project's decoding at a `decode.quantize` setting; `INT8_DECODE` is the int8 arm every
  benchmark times (int8 weight products, bfloat16 encoder output), as `decode.*`
  overrides, under the name `OURS_INT8` ("jax-transformer-int8").

Nothing here imports JAX or PyTorch (`transformer.common.special_ids` is a plain module).
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np

from transformer.common.machine import cpu_model
from transformer.common.special_ids import (
    FIRST_WORD_ID,  # random benchmark tokens avoid the specials
)

__all__ = [
    "CT2_FLOAT32",
    "CT2_INT8",
    "DECODE_MODES",
    "INT8_DECODE",
    "ct2_impl",
    "OURS",
    "OURS_INT8",
    "PEER",
    "PEER_COMPILED",
    "FIRST_WORD_ID",
    "emit",
    "forced_length_overrides",
    "format_value",
    "machine_tag",
    "median_time",
    "ours_impl",
    "peak_rss_mib",
    "random_sources",
    "random_train_batch",
]

OURS, PEER = "jax-transformer", "torch-marian"
PEER_COMPILED = f"{PEER}-compiled"  # the peer's train step under torch.compile


def ct2_impl(precision: str) -> str:
    """CTranslate2's implementation name at weight type `precision` (float32, int8)."""
    return f"ctranslate2-{precision}"


CT2_FLOAT32, CT2_INT8 = ct2_impl("float32"), ct2_impl("int8")
# The int8 arm of the side-by-side run and of real_data_speed.py: int8 weight products and a
# bfloat16 encoder output, the fastest int8 setting for greedy and sampling in the A/B of
# docs/performance.md ("the encoder option" of the int8 targets).
INT8_DECODE = {"quantize": "int8", "encoder_quantize": "bfloat16"}


def ours_impl(quantize: str) -> str:
    """This project's implementation name at decode.quantize `quantize` ('none' = OURS)."""
    return OURS if quantize == "none" else f"{OURS}-{quantize}"


OURS_INT8 = ours_impl(INT8_DECODE["quantize"])


# Decoding modes timed by throughput.py and profiled by profile_step.py:
# mode -> (figure name at 64 tokens, decode-setting overrides).
DECODE_MODES = {
    "greedy": ("decode_greedy_tokens_per_s", {"strategy": "greedy"}),
    "sample": (
        "decode_sample_tokens_per_s",
        {"strategy": "sample", "temperature": 0.8, "top_k": 40, "top_p": 0.9, "num_samples": 1},
    ),
    "beam4": (
        "decode_beam4_sentences_per_s",
        {"strategy": "beam", "beam_size": 4, "length_penalty": 0.6, "n_best": 1},
    ),
}


def forced_length_overrides(mode: str, length: int, rows: int) -> dict[str, Any]:
    """DecodeSettings overrides for `mode` that force exactly `length` output tokens per row
    (max_len = 0 * source + length = min_len) for a batch of `rows` sentences."""
    return {
        **DECODE_MODES[mode][1],
        "max_len_a": 0.0,
        "max_len_b": length,
        "min_len": length,
        "batch_size": rows,
    }


def random_sources(seed: int, rows: int, length: int, vocab_size: int, eos_id: int) -> np.ndarray:
    """[rows, length] int32 random word ids, EOS in the last column (a full-length sentence)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(FIRST_WORD_ID, vocab_size, (rows, length), dtype=np.int32)
    src[:, -1] = eos_id
    return src


def random_train_batch(
    rng: np.random.Generator, rows: int, src_len: int, tgt_len: int, vocab_size: int
) -> dict[str, np.ndarray]:
    """A training batch of random word ids with no padding and no packing: one segment per
    row, positions 0..len-1 (what the input pipeline emits for full-length sentences)."""
    batch = {}
    for side, length in (("src", src_len), ("tgt", tgt_len)):
        batch[side] = rng.integers(FIRST_WORD_ID, vocab_size, (rows, length), dtype=np.int32)
        batch[f"{side}_segments"] = np.ones((rows, length), np.int32)
        batch[f"{side}_positions"] = np.tile(np.arange(length, dtype=np.int32), (rows, 1))
    return batch


def format_value(value: float) -> str:
    """A compact human-readable rendering of a figure (4 significant digits, no exponent
    for everyday magnitudes)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e4 or isinstance(value, int):
        return f"{value:,.0f}"
    if magnitude >= 1e-3:
        return f"{value:.4g}"
    return f"{value:.3e}"


# CPU families whose name starts a results file's name (benchmarks/results/epyc2_*.jsonl);
# another CPU is named by its architecture.
CPU_FAMILIES = ("EPYC", "Xeon", "Ryzen", "Core", "Graviton", "Neoverse")


def machine_tag(cpuinfo: str | None = None, cpus: int | None = None) -> str:
    """'epyc2', 'xeon2', 'aarch64_8': the CPU family (else the architecture), lower case, and
    the core count, as results files are named."""
    words = cpu_model(cpuinfo).replace(",", " ").replace("(R)", " ").split()
    family = next((w for w in words if w in CPU_FAMILIES), platform.machine()).lower()
    joint = "_" if family[-1:].isdigit() else ""  # 'aarch64_8', not 'aarch648'
    return f"{family}{joint}{cpus or os.cpu_count() or 1}"


# A benchmark started while the 1-minute load average exceeds this per core shares the machine:
# PyTorch's OpenMP threads slow several-fold beside one busy process, so its ratios are
# withheld. Benchmarks run one after another should wait for the previous one's load to decay.
MAX_BACKGROUND_LOAD_PER_CORE = 0.5


def busy(loadavg_1m: float, cpus: int) -> bool:
    """Whether a run that started at this load average on `cpus` cores shared the machine."""
    return loadavg_1m > MAX_BACKGROUND_LOAD_PER_CORE * max(cpus, 1)


def emit(
    figure: str,
    value: float,
    unit: str,
    impl: str,
    as_json: bool,
    *,
    file: TextIO | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Print one benchmark figure and return it as a dict.

    With `as_json`, one JSON object per line: {"figure", "value", "unit", "impl", **extra}
    (`extra` cannot repeat those four: they are named parameters). Otherwise a fixed-width
    table row: figure, value, unit, impl, then `key=value` for each extra. Output is flushed
    at once so a long benchmark shows progress.
    """
    record: dict[str, Any] = {"figure": figure, "value": value, "unit": unit, "impl": impl}
    record.update(extra)
    out = sys.stdout if file is None else file
    if as_json:
        line = json.dumps(record, sort_keys=False, default=str)
    else:
        rest = "  ".join(f"{k}={format_value(v)}" for k, v in extra.items())
        line = f"{figure:<36} {format_value(value):>12} {unit:<14} {impl:<14} {rest}".rstrip()
    print(line, file=out, flush=True)
    return record


def spread(times: Sequence[float]) -> dict[str, float]:
    """`min_s` and `max_s` of a list of timings, unrounded: rounding them (to 4 decimals, say)
    can put a 2.2 ms median above its own maximum."""
    return {"min_s": float(min(times)), "max_s": float(max(times))}


def median_time(
    fn: Callable[[], Any],
    warmup: int = 1,
    repeats: int = 8,
    sync: Callable[[Any], Any] | None = None,
) -> tuple[float, list[float]]:
    """Call `fn()` `warmup` times untimed, then `repeats` times timed (perf_counter).

    `sync`, when given, receives each call's return value and must block until that work is
    done (e.g. `jax.block_until_ready`, `lambda _: torch.cuda.synchronize()`); it runs inside
    the timed region for measured calls and after each warm-up call.
    Returns (median seconds, list of every measured time in call order).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        result = fn()
        if sync is not None:
            sync(result)
    times: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        if sync is not None:
            sync(result)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss: KiB on Linux,
    bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":
        return peak / (1024 * 1024)
    return peak / 1024

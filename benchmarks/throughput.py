"""Throughput of this codebase's train step, input pipeline and decoders (impl "jax-transformer").

    python -m benchmarks.throughput --config configs/bench_base.py [--config.field=value ...]
        [--what train,pipeline,decode] [--json] [--steps N] [--decode_lengths 64,256]
        [--decode_modes greedy,sample,beam4] [--nocache_lengths 64,256] [--peak_tflops X]
        [--workdir DIR] [--int8] [--size_label big]

Every timed figure is steady state: each program is compiled ahead of time (`.lower().compile()`,
reported as compile time, never timed), run for warm-up, then timed; a figure is the MEDIAN of
the measured repetitions. The random-init model is the config's (`configs/bench_base.py`:
Transformer base, vocab 8000, float32 unless --config.model.dtype=bfloat16).

train (synthetic, fixed shape). The project's own `make_train_step` (forward + backward with
dropout, label-smoothed loss, gradient clipping, AdamW update) jitted by `Parallel('mesh')`, on
batches of train.batch_size sentences of data.max_source_len + data.max_target_len random tokens,
no padding. 1 warm-up step, then --steps (>= 8) timed steps.
  train_tokens_per_s   source + target tokens per step / median step time
  train_step_s         median step time
  compile_s            lowering + XLA compilation of the step
  train_step_flops     model.flops.train_step_flops: 3 x the analytic forward FLOPs (matmul
                       multiply-adds count 2: Q/K/V/O projections, attention scores and weighted
                       sums over all keys, FFN, output projection; norms/softmax/embedding ignored)
  matmul_peak_gflops   jitted jnp.dot of square matrices in the compute dtype, sizes
                       --matmul_sizes: the best size's median GFLOP/s (2 n^3 FLOPs per product)
  mfu                  train_step_flops / train_step_s / peak, the peak being --peak_tflops when
                       given (e.g. a GPU's datasheet bf16 figure), else matmul_peak_gflops

pipeline (real data through `transformer.data.make_datasets`; data.name/data.path of the
config, Multi30k in bench_base; skipped with a message when data.path is absent). A SentencePiece
vocabulary of data.vocab_size pieces is trained once and reused from --workdir.
  train_real_tokens_per_s         data.batching='pack' (rows of max_source_len + max_target_len):
                                  non-padding source + target tokens / step time, median over
                                  --steps steps (after 1 warm-up step)
  padding_fraction                padding share of those packed batches' token slots
  train_padded_real_tokens_per_s  the same model on batches of train.batch_size sentences of the
                                  same stream padded to the longest source and the longest target
                                  in each batch (a default padding collator): median per-step
                                  real tokens / step time; every distinct shape is compiled ahead
                                  of time and one warm-up step runs before timing
  padded_padding_fraction         padding share of those padded batches
Only the step is timed (host batch preparation is reported as batch_s beside the figure).

decode (decode.batch_size random source sentences of data.max_source_len tokens, EOS last). Each
call is the Translator's compiled core (`Translator._translate_fn`: encode, cross-attention K/V
once, then the whole token loop in one lax.while_loop over a preallocated KV cache). To give every
call the same work, each row is forced to emit exactly N tokens: decode.min_len =
decode.max_len_b = N with max_len_a = 0, so EOS is forbidden before the last position and forced
at it (a random model would otherwise stop at random points); the output is checked to have N
tokens per row. Timed: --decode_warmup untimed calls, then the median of --decode_repeats calls.
  decode_greedy_tokens_per_s      greedy, batch * N / call time
  decode_sample_tokens_per_s      sampling, temperature 0.8, top-k 40, top-p 0.9
  decode_beam4_sentences_per_s    beam 4, length penalty alpha 0.6: batch / call time
  decode_greedy_nocache_tokens_per_s  greedy WITHOUT a KV cache (for comparison): a compiled lax
                                  loop that re-runs the full decoder (teacher-forcing mode of
                                  model.decode, cross-attention K/V computed once) over the prefix
                                  each step. Shapes must be static, so the N steps are split into
                                  up to 8 blocks, each a fori_loop over a buffer as long as the
                                  block's last prefix: the work is within ~15% of an exactly
                                  growing prefix (sum of widths ~ 9/16 N^2 vs N^2/2). Reports
                                  agrees_with_cached (share of tokens equal to cached greedy).
With --int8 (benchmarks/common.INT8_DECODE: decode.quantize=int8, decode.encoder_quantize=
bfloat16) or another decode.quantize the cached decoders' figures carry impl
"jax-transformer-<quantize>" (benchmarks/common.ours_impl), a column beside float32's,
and record quantize/encoder_quantize; the no-cache decoder stays float32 ("jax-transformer").
N = 64 gives these names; other lengths (--decode_lengths, default 64,256) append _N, e.g.
decode_greedy_tokens_per_s_256. The no-cache decoder is O(N^2) decoder passes: at N = 256 on a
2-core CPU one call takes tens of minutes (--nocache_lengths chooses its lengths).

Also printed: a `setup` record (machine: CPU count, jax/jaxlib versions, backend, devices, load
average, parameter count) and `peak_rss_mib` (peak resident memory of the whole run) at the end,
with `device_peak_mib` (the accelerator allocator's peak bytes in use) where the device counts it.
--size_label LABEL adds `"size": LABEL` to every figure (benchmarks/table.py's GPU table keys
its rows by size). Output: a readable table, or with --json one JSON object per line
{"figure", "value", "unit", "impl": "jax-transformer", ...details} (benchmarks/common.emit).
--steps below 8 is for tests only (the figures are then not the median of 8).

This file is the command: its flags, the setup and peak-memory records, and the order of the
parts. The parts are throughput_train.py (the train figures and the `Bench` every part
shares), throughput_pipeline.py and throughput_decode.py.
"""

from __future__ import annotations

import math
import os
import sys
import time

from absl import flags
from ml_collections import config_flags

from benchmarks import common
from benchmarks.throughput_decode import NOCACHE_BLOCKS, decode
from benchmarks.throughput_pipeline import pipeline
from benchmarks.throughput_train import IMPL, Bench, train
from transformer.cli.app import load_config_flag, run_cli
from transformer.common.errors import UserError
from transformer.common.machine import describe_machine

DECODE_MODES = common.DECODE_MODES
PARTS = {"train": train, "pipeline": pipeline, "decode": decode}  # run in this order
WHAT = tuple(PARTS)

config_flags.DEFINE_config_file("config", None, "Config file (configs/bench_base.py).")
flags.DEFINE_string("what", ",".join(WHAT), "Comma-separated parts: train, pipeline, decode.")
flags.DEFINE_bool("json", False, "One JSON object per line instead of a table.")
flags.DEFINE_integer("steps", 10, "Timed train steps per figure (>= 8 except in tests).")
flags.DEFINE_string(
    "workdir", "/tmp/transformer_bench", "Cache for the pipeline's vocabulary and tokenized data."
)
flags.DEFINE_list("decode_lengths", ["64", "256"], "Output lengths N of the cached decoders.")
flags.DEFINE_list(
    "decode_modes", list(DECODE_MODES), "Cached decoders timed: greedy, sample, beam4."
)
flags.DEFINE_list(
    "nocache_lengths", None, "Output lengths of the no-cache greedy decoder (default: as decode)."
)
flags.DEFINE_integer(
    "nocache_blocks", NOCACHE_BLOCKS, "Static-width blocks of the no-cache decoder's steps."
)
flags.DEFINE_integer("decode_warmup", 1, "Untimed decode calls before timing (after compiling).")
flags.DEFINE_integer("decode_repeats", 1, "Timed decode calls per figure (median).")
flags.DEFINE_list("matmul_sizes", ["1024", "1536", "2048"], "Square matmul sizes for the peak.")
flags.DEFINE_float("peak_tflops", None, "Peak TFLOP/s for MFU (default: the measured matmul).")
flags.DEFINE_integer("seed", 0, "Seed of the random model and batches.")
flags.DEFINE_string(
    "size_label", "", "A 'size' field on every figure (benchmarks/table.py keys rows by it)."
)
flags.DEFINE_bool(
    "int8",
    False,
    "Decode with benchmarks/common.INT8_DECODE (int8 products, bfloat16 encoder output): "
    "the int8 arm of side_by_side.sh.",
)
FLAGS = flags.FLAGS


def _setup_info(config, model_cfg) -> dict:
    import jax
    import jaxlib

    from transformer.model.transformer import param_shapes
    from transformer.training import run_state

    n_params = sum(int(math.prod(x.shape)) for x in jax.tree.leaves(param_shapes(model_cfg)))
    device = jax.devices()[0]
    return {
        "cpus": os.cpu_count(),
        "machine": describe_machine(jax.default_backend()),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "device_kind": getattr(device, "device_kind", str(device)),
        "dtype": model_cfg.dtype,
        "attention_impl": model_cfg.attention_impl,
        "remat": config.train.remat,
        "params": n_params,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "dropout_bits": run_state.dropout_bits(config.train.dropout_bits).name,
        **({"size": FLAGS.size_label} if FLAGS.size_label else {}),
    }


def _device_peak_mib() -> float | None:
    """Peak bytes the first device's allocator held, in MiB; None where it keeps no count
    (the CPU backend)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else round(peak / 2**20, 1)


def main(argv):
    del argv
    from transformer.training import run_config

    config = load_config_flag()
    if FLAGS.int8:
        config.decode.update(common.INT8_DECODE)
    settings = run_config.validate(config)
    model_cfg = settings.model
    what = [w.strip() for w in FLAGS.what.split(",") if w.strip()]
    unknown = sorted(set(what) - set(WHAT))
    if unknown or not what:
        raise UserError(f"--what {FLAGS.what!r}: choose from {', '.join(WHAT)}")
    if set(FLAGS.decode_modes) - set(DECODE_MODES):
        raise UserError(
            f"--decode_modes {','.join(FLAGS.decode_modes)!r}: choose from "
            f"{', '.join(DECODE_MODES)}"
        )
    if FLAGS.steps < 1:
        raise UserError(f"--steps must be >= 1, got {FLAGS.steps}")
    if FLAGS.steps < 8:
        print(f"note: --steps={FLAGS.steps} < 8: for tests only", file=sys.stderr, flush=True)
    if FLAGS.peak_tflops is not None and FLAGS.peak_tflops <= 0:
        raise UserError(f"--peak_tflops must be > 0, got {FLAGS.peak_tflops}")
    info = _setup_info(config, model_cfg)
    # A decode-only run at another precision is that precision's column, its memory included.
    impl = common.ours_impl(settings.decode.quantize) if what == ["decode"] else IMPL
    if FLAGS.json:
        common.emit("setup", 0, "-", impl, True, **info)
    else:
        print(f"JAX Transformer throughput ({model_cfg.dtype}, random init)")
        print("  " + "  ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        print(f"{'figure':<36} {'value':>12} {'unit':<14} {'impl':<14} details", flush=True)
    bench = Bench(config, settings, FLAGS)
    start = time.perf_counter()
    for part, run_part in PARTS.items():
        if part in what:
            run_part(bench)
    size = {"size": FLAGS.size_label} if FLAGS.size_label else {}
    device_peak = _device_peak_mib()
    if device_peak is not None:  # accelerators report their allocator's high-water mark
        common.emit("device_peak_mib", device_peak, "MiB", impl, FLAGS.json, **size)
    common.emit(
        "peak_rss_mib",
        round(common.peak_rss_mib(), 1),
        "MiB",
        impl,
        FLAGS.json,
        total_s=round(time.perf_counter() - start, 1),
        what=",".join(what),
        loadavg_1m=round(os.getloadavg()[0], 2),
        **size,
    )


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    run_cli(main)

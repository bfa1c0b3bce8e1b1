"""Throughput of this codebase's train step, input pipeline and decoders (impl "jax-transformer").

    python benchmarks/throughput.py --config configs/bench_base.py [--config.field=value ...]
        [--what train,pipeline,decode] [--json] [--steps N] [--decode_lengths 64,256]
        [--decode_modes greedy,sample,beam4] [--nocache_lengths 64,256] [--peak_tflops X]
        [--workdir DIR]

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
call is the Translator's compiled core (`Translator._decode_fn`: encode, cross-attention K/V once,
then the whole token loop in one lax.while_loop over a preallocated KV cache). To give every call
the same work, each row is forced to emit exactly N tokens: decode.min_len = decode.max_len_b = N
with max_len_a = 0, so EOS is forbidden before the last position and forced at it (a random model
would otherwise stop at random points); the output is checked to have N tokens per row. Timed:
--decode_warmup untimed calls, then the median of --decode_repeats calls.
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
N = 64 gives these names; other lengths (--decode_lengths, default 64,256) append _N, e.g.
decode_greedy_tokens_per_s_256. The no-cache decoder is O(N^2) decoder passes: at N = 256 on a
2-core CPU one call takes tens of minutes (--nocache_lengths chooses its lengths).

Also printed: a `setup` record (machine: CPU count, jax/jaxlib versions, backend, devices, load
average, parameter count) and `peak_rss_mib` (peak resident memory of the whole run) at the end.
Output: a readable table, or with --json one JSON object per line
{"figure", "value", "unit", "impl": "jax-transformer", ...details} (benchmarks/common.emit).
--steps below 8 is for tests only (the figures are then not the median of 8).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make `transformer` and `configs` importable
    sys.path.insert(0, str(ROOT))

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from transformer.cli.app import load_config_flag, run_cli  # noqa: E402
from transformer.common.errors import UserError  # noqa: E402

try:  # run as `python benchmarks/throughput.py` (script dir on sys.path) or as a module
    from benchmarks import common
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common

DECODE_MODES, emit, median_time = common.DECODE_MODES, common.emit, common.median_time
forced_length_overrides, peak_rss_mib = common.forced_length_overrides, common.peak_rss_mib
random_sources, random_train_batch = common.random_sources, common.random_train_batch

IMPL = "jax-transformer"
WHAT = ("train", "pipeline", "decode")
NOCACHE_FIGURE = "decode_greedy_nocache_tokens_per_s"
NOCACHE_BLOCKS = 8

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
FLAGS = flags.FLAGS


# ------------------------------------------------------------------------------- helpers


def _ints(values, name: str) -> list[int]:
    try:
        out = [int(v) for v in values]
    except ValueError:
        raise UserError(f"--{name} must be comma-separated integers, got {values!r}") from None
    if not out or any(v < 1 for v in out):
        raise UserError(f"--{name} must list positive integers, got {values!r}")
    return out


def _length_name(figure: str, n: int) -> str:
    return figure if n == 64 else f"{figure}_{n}"


def _block(x):
    import jax

    return jax.block_until_ready(x)


def _aot(jitted, *args, **kwargs):
    """(compiled executable, seconds to lower + compile)."""
    start = time.perf_counter()
    compiled = jitted.lower(*args, **kwargs).compile()
    return compiled, time.perf_counter() - start


class Bench:
    def __init__(self, config, model_cfg):
        import jax

        self.config = config
        self.model_cfg = model_cfg
        self.as_json = FLAGS.json
        self.steps = FLAGS.steps
        self.meta = {"backend": jax.default_backend(), "dtype": model_cfg.dtype}

    def emit(self, figure, value, unit, **extra):
        emit(figure, value, unit, IMPL, self.as_json, **self.meta, **extra)

    # --------------------------------------------------------------------------- pieces

    def new_state(self):
        """(graphdef, train state, optimizer, schedule) of the random-init model."""
        from flax import nnx

        from transformer.model.transformer import Transformer
        from transformer.training.optim import make_optimizer
        from transformer.training.steps import init_state

        optimizer, schedule = make_optimizer(self.config.train)
        model = Transformer(self.model_cfg, rngs=nnx.Rngs(params=FLAGS.seed))
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
        self._executables[shape], seconds = _aot(self._step, self._state, batch, self._rng)
        return seconds

    def run_step(self, batch):
        """One compiled train step on a sharded batch (state updated in place); metrics."""
        fn = self._executables[(batch["src"].shape, batch["tgt"].shape)]
        self._state, metrics = fn(self._state, batch, self._rng)
        return metrics

    def matmul_peak(self) -> tuple[float, int]:
        """Best median GFLOP/s of a jitted square matmul in the compute dtype, and its size."""
        import jax
        import jax.numpy as jnp

        dtype = jnp.bfloat16 if self.model_cfg.dtype == "bfloat16" else jnp.float32
        best = (0.0, 0)
        for n in _ints(FLAGS.matmul_sizes, "matmul_sizes"):
            keys = jax.random.split(jax.random.key(FLAGS.seed), 2)
            a = jax.random.normal(keys[0], (n, n), dtype)
            b = jax.random.normal(keys[1], (n, n), dtype)
            dot, _ = _aot(jax.jit(jnp.dot), a, b)
            seconds, _ = median_time(
                lambda dot=dot, a=a, b=b: dot(a, b), warmup=2, repeats=8, sync=_block
            )
            gflops = 2.0 * n**3 / seconds / 1e9
            if gflops > best[0]:
                best = (gflops, n)
        return best

    # ----------------------------------------------------------------------------- train

    def train(self):
        import jax
        import numpy as np

        from transformer.model.flops import train_step_flops

        d, t = self.config.data, self.config.train
        rows, s_len, t_len = int(t.batch_size), int(d.max_source_len), int(d.max_target_len)
        parallel = self.train_setup()
        rng = np.random.default_rng(FLAGS.seed)
        batches = []
        for _ in range(2):
            batch = random_train_batch(rng, rows, s_len, t_len, self.model_cfg.vocab_size)
            batches.append(parallel.shard_batch(batch))
        compile_s = self.train_step(batches[0])
        counter = iter(range(10**9))

        def one_step():
            return self.run_step(batches[next(counter) % 2])

        step_s, times = median_time(one_step, warmup=1, repeats=self.steps, sync=_block)
        loss = float(jax.device_get(one_step()["loss"]))
        tokens = rows * (s_len + t_len)
        flops = train_step_flops(self.model_cfg, rows, s_len, t_len)
        peak_gflops, peak_n = self.matmul_peak()
        if FLAGS.peak_tflops:
            peak, peak_source = FLAGS.peak_tflops * 1e12, f"--peak_tflops={FLAGS.peak_tflops}"
        else:
            peak, peak_source = peak_gflops * 1e9, f"measured matmul {peak_n}x{peak_n}"
        extra = dict(batch=rows, source_len=s_len, target_len=t_len, warmup=1,
                     repeats=self.steps, min_s=round(min(times), 4),
                     max_s=round(max(times), 4), loss=round(loss, 3))  # fmt: skip
        self.emit("train_tokens_per_s", tokens / step_s, "tokens/s", **extra)
        self.emit("train_step_s", step_s, "s", **extra)
        self.emit("compile_s", compile_s, "s", what="train step", cached=compile_s == 0)
        self.emit("train_step_flops", flops, "FLOP", formula="3 x transformer.model.flops.forward")
        self.emit("matmul_peak_gflops", peak_gflops, "GFLOP/s", size=peak_n)
        achieved = flops / step_s
        self.emit("mfu", achieved / peak, "fraction", achieved_gflops=round(achieved / 1e9, 2),
                  peak=peak_source)  # fmt: skip

    # -------------------------------------------------------------------------- pipeline

    def pipeline(self):
        import ml_collections
        import numpy as np

        from transformer.data import make_datasets
        from transformer.training import run_config

        d = self.config.data
        if d.name == "parallel_text" and not os.path.isdir(d.path):
            message = (
                f"pipeline: skipped: data.path={d.path!r} is not a directory (pass "
                "--config.data.name=parallel_text --config.data.path=DIR of {split}.{lang} files)"
            )
            print(message, file=sys.stderr if self.as_json else sys.stdout, flush=True)
            return
        key = "|".join(str(x) for x in (d.name, os.path.abspath(d.path) if d.path else "",
                       d.source_lang, d.target_lang, d.reverse, d.vocab_type, d.shared_vocab,
                       d.vocab_path, d.vocab_size))  # fmt: skip
        workdir = os.path.join(FLAGS.workdir, hashlib.sha1(key.encode()).hexdigest()[:12])
        parallel = self.train_setup()
        quiet = contextlib.redirect_stdout(sys.stderr) if self.as_json else contextlib.nullcontext()

        def bundle(batching):
            config = ml_collections.ConfigDict(self.config.to_dict())
            config.data.batching = batching
            config.train.batch_tokens = 0
            return make_datasets(config, workdir, row_multiple=parallel.num_devices)

        with quiet:  # TFDS preparation prints to stdout
            packed_data = bundle("pack")
        run_config.resolve_vocab_size(
            ml_collections.ConfigDict(self.config.to_dict()),
            packed_data.source_tokenizer, packed_data.target_tokenizer,
        )  # fmt: skip  # the model's embedding rows must cover every piece

        def take(iterator, count, trim):
            out, seconds = [], []
            for _ in range(count):
                start = time.perf_counter()
                batch = next(iterator)
                if trim:
                    batch = _trim_to_longest(batch)
                seconds.append(time.perf_counter() - start)
                out.append(batch)
            return out, float(np.median(seconds))

        with quiet:
            packed, packed_batch_s = take(packed_data.train_iterator(), self.steps, False)
            padded, padded_batch_s = take(bundle("pad").train_iterator(), self.steps, True)

        def run(batches):
            """Compiles each distinct shape, runs batches[0] once untimed (warm-up), then times
            every batch."""
            sharded = [parallel.shard_batch(b) for b in batches]
            compile_s = sum(self.train_step(b) for b in sharded)
            _block(self.run_step(sharded[0]))
            rates, times, real_total, slots_total = [], [], 0, 0
            for host, batch in zip(batches, sharded, strict=True):
                start = time.perf_counter()
                _block(self.run_step(batch))
                seconds = time.perf_counter() - start
                real = int(np.count_nonzero(host["src_segments"]))
                real += int(np.count_nonzero(host["tgt_segments"]))
                real_total += real
                slots_total += host["src"].size + host["tgt"].size
                rates.append(real / seconds)
                times.append(seconds)
            shapes = {(b["src"].shape, b["tgt"].shape) for b in batches}
            return dict(
                rate=float(np.median(rates)),
                padding=1.0 - real_total / slots_total,
                step_s=round(float(np.median(times)), 4),
                shapes=len(shapes),
                compile_s=round(compile_s, 2),
                real_tokens_per_step=round(real_total / len(times), 1),
            )

        common = dict(warmup=1, repeats=self.steps, data=d.name)
        p = run(packed)
        self.emit("train_real_tokens_per_s", p["rate"], "tokens/s", batching="pack",
                  rows=packed[0]["src"].shape[0],
                  row_len=f"{packed[0]['src'].shape[1]}+{packed[0]['tgt'].shape[1]}",
                  step_s=p["step_s"], real_tokens_per_step=p["real_tokens_per_step"],
                  batch_s=round(packed_batch_s, 4), compile_s=p["compile_s"], **common)  # fmt: skip
        self.emit("padding_fraction", p["padding"], "fraction", batching="pack", **common)
        q = run(padded)
        self.emit("train_padded_real_tokens_per_s", q["rate"], "tokens/s",
                  batching="pad to longest", rows=padded[0]["src"].shape[0], step_s=q["step_s"],
                  real_tokens_per_step=q["real_tokens_per_step"], shapes=q["shapes"],
                  batch_s=round(padded_batch_s, 4), compile_s=q["compile_s"], **common)  # fmt: skip
        self.emit("padded_padding_fraction", q["padding"], "fraction", batching="pad to longest",
                  **common)  # fmt: skip

    # ---------------------------------------------------------------------------- decode

    def decode(self):
        import jax
        import jax.numpy as jnp
        import numpy as np

        from transformer.data import EOS_ID
        from transformer.inference.translator import DecodeSettings, Translator

        lengths = _ints(FLAGS.decode_lengths, "decode_lengths")
        if FLAGS.nocache_lengths is None:
            nocache = lengths
        elif FLAGS.nocache_lengths:
            nocache = _ints(FLAGS.nocache_lengths, "nocache_lengths")
        else:  # --nocache_lengths= (empty): no no-cache figures
            nocache = []
        for n in sorted(set(lengths) | set(nocache)):
            if n > self.model_cfg.max_len:
                raise UserError(
                    f"decode length {n} exceeds model.max_len={self.model_cfg.max_len}; raise "
                    "--config.model.max_len or shorten --decode_lengths/--nocache_lengths"
                )
        if FLAGS.decode_warmup < 0 or FLAGS.decode_repeats < 1:
            raise UserError("--decode_warmup must be >= 0 and --decode_repeats >= 1")
        rows, s_len = int(self.config.decode.batch_size), int(self.config.data.max_source_len)
        graphdef, state, _, _ = self.new_state()
        params = state.params
        del state
        src_np = random_sources(FLAGS.seed + 1, rows, s_len, self.model_cfg.vocab_size, EOS_ID)
        src, row_ids = jnp.asarray(src_np), jnp.arange(rows, dtype=jnp.int32)
        base = DecodeSettings.from_config(self.config.decode)
        timing = dict(warmup=FLAGS.decode_warmup, repeats=FLAGS.decode_repeats)
        greedy_tokens = {}

        def timed(fn):
            # The last timed call's output (handed to `sync`, as compare_torch.py collects
            # generate()'s) is the one checked: at 256 tokens an extra uncached call for the
            # check alone would cost ~17 minutes on 2 cores.
            last = []

            def sync(out):
                _block(out)
                last[:] = [out]

            seconds, times = median_time(fn, sync=sync, **timing)
            spread = dict(min_s=round(min(times), 4), max_s=round(max(times), 4))
            return seconds, spread, last[0]

        for n in lengths:
            for mode in FLAGS.decode_modes:
                figure = DECODE_MODES[mode][0]
                settings = dataclasses.replace(base, **forced_length_overrides(mode, n, rows))
                translator = Translator(graphdef, self.model_cfg, settings, None, None)
                fn, compile_s = _aot(translator._decode_fn, params, src, row_ids, max_out=n)
                seconds, spread, out = timed(lambda fn=fn: fn(params, src, row_ids))
                tokens = np.asarray(out[0])
                _check_forced_length(tokens, n, mode)
                if mode == "greedy":
                    greedy_tokens[n] = tokens[:, 0]
                extra = dict(batch=rows, source_len=s_len, output_tokens=n,
                             call_s=round(seconds, 4), compile_s=round(compile_s, 2),
                             **timing, **spread)  # fmt: skip
                name = _length_name(figure, n)
                if mode == "beam4":
                    extra["tokens_per_s"] = round(rows * n / seconds, 2)
                    self.emit(name, rows / seconds, "sentences/s", **extra)
                else:
                    self.emit(name, rows * n / seconds, "tokens/s", **extra)

        for n in nocache:
            jitted = jax.jit(
                lambda p, s, n=n: nocache_greedy(
                    graphdef, p, s, n, min_len=n, max_len_b=n, blocks=FLAGS.nocache_blocks
                )
            )
            fn, compile_s = _aot(jitted, params, src)
            seconds, spread, out = timed(lambda fn=fn: fn(params, src))
            tokens = np.asarray(out)
            _check_forced_length(tokens[:, None], n, "greedy without cache")
            extra = dict(batch=rows, source_len=s_len, output_tokens=n,
                         call_s=round(seconds, 4), compile_s=round(compile_s, 2),
                         blocks=len(nocache_blocks(n, FLAGS.nocache_blocks)),
                         **timing, **spread)  # fmt: skip
            if n in greedy_tokens:
                extra["agrees_with_cached"] = round(float(np.mean(tokens == greedy_tokens[n])), 4)
            self.emit(_length_name(NOCACHE_FIGURE, n), rows * n / seconds, "tokens/s", **extra)


# ------------------------------------------------------------------ no-cache greedy decoding


def nocache_blocks(n: int, blocks: int = NOCACHE_BLOCKS) -> list[tuple[int, int]]:
    """Splits steps 0..n-1 into up to `blocks` ranges [start, stop); the decoder input buffer
    of a block is `stop` long (step t reads positions 0..t)."""
    bounds = sorted({math.ceil(n * k / blocks) for k in range(1, blocks + 1)})
    starts = [0, *bounds[:-1]]
    return [(a, b) for a, b in zip(starts, bounds, strict=True) if b > a]


def nocache_greedy(
    graphdef,
    params,
    src,
    n: int,
    *,
    min_len: int = 0,
    max_len_b: int | None = None,
    blocks: int = NOCACHE_BLOCKS,
):
    """Greedy decoding without a KV cache: every step re-runs the whole decoder (teacher
    forcing) over the prefix so far and keeps the last position's logits. Same length rules
    as `inference.search.greedy` with every row limited to `max_len_b` (default n) tokens;
    rows are not stopped at EOS (fixed work; the benchmark forces EOS to the last position).
    Returns int32 [B, n] output tokens (no BOS)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from transformer.data import BOS_ID, EOS_ID

    model = nnx.merge(graphdef, params)
    src_segments = (src != 0).astype(jnp.int32)
    encoded = model.encode(src, src_segments=src_segments)
    cross = model.cross_kv(encoded)
    b = src.shape[0]
    limit = n if max_len_b is None else min(max_len_b, n)
    buf = jnp.zeros((b, n + 1), jnp.int32).at[:, 0].set(BOS_ID)  # decoder inputs
    for start, stop in nocache_blocks(n, blocks):

        def body(t, buf, width=stop):
            prefix = buf[:, :width]
            positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), prefix.shape)
            logits, _ = model.decode(
                None, src_segments, prefix, tgt_segments=jnp.ones_like(prefix),
                tgt_positions=positions, cross_kv=cross,
            )  # fmt: skip
            logits = jax.lax.dynamic_index_in_dim(logits, t, axis=1, keepdims=False)
            is_eos = jnp.arange(logits.shape[-1]) == EOS_ID
            forced = t + 1 >= limit
            logits = jnp.where(is_eos & (t < min_len) & ~forced, -jnp.inf, logits)
            tok = jnp.where(forced, EOS_ID, jnp.argmax(logits, axis=-1)).astype(jnp.int32)
            return jax.lax.dynamic_update_slice(buf, tok[:, None], (0, t + 1))

        buf = jax.lax.fori_loop(start, stop, body, buf)
    return buf[:, 1:]


def _check_forced_length(tokens, n: int, what: str) -> None:
    """tokens [B, R, n]: every row must hold exactly n tokens, EOS last (and only there)."""
    from transformer.data import EOS_ID

    body = tokens[..., :-1]
    if tokens.shape[-1] != n or not (tokens[..., -1] == EOS_ID).all() or (body == EOS_ID).any():
        raise RuntimeError(f"{what}: decoding did not produce exactly {n} tokens per row")


def _trim_to_longest(batch):
    """A 'pad' batch (one sentence per row, padded to max_*_len) cut to its longest source
    and longest target: what a default padding collator produces."""
    import numpy as np

    out = {}
    for side in ("src", "tgt"):
        width = max(1, int(np.count_nonzero(batch[f"{side}_segments"], axis=1).max()))
        for key in (side, f"{side}_segments", f"{side}_positions"):
            out[key] = np.ascontiguousarray(batch[key][:, :width])
    return out


# ------------------------------------------------------------------------------------ main


def _setup_info(model_cfg) -> dict:
    import jax
    import jaxlib

    from transformer.model.transformer import param_shapes

    n_params = sum(int(math.prod(x.shape)) for x in jax.tree.leaves(param_shapes(model_cfg)))
    device = jax.devices()[0]
    return {
        "cpus": os.cpu_count(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "device_kind": getattr(device, "device_kind", str(device)),
        "dtype": model_cfg.dtype,
        "params": n_params,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv):
    del argv
    from transformer.training import run_config

    config = load_config_flag()
    model_cfg = run_config.validate(config)
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
    info = _setup_info(model_cfg)
    if FLAGS.json:
        emit("setup", 0, "-", IMPL, True, **info)
    else:
        print(f"JAX Transformer throughput ({model_cfg.dtype}, random init)")
        print("  " + "  ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        print(f"{'figure':<36} {'value':>12} {'unit':<14} {'impl':<14} details", flush=True)
    bench = Bench(config, model_cfg)
    start = time.perf_counter()
    for part in WHAT:
        if part in what:
            getattr(bench, part)()
    emit("peak_rss_mib", round(peak_rss_mib(), 1), "MiB", IMPL, FLAGS.json,
         total_s=round(time.perf_counter() - start, 1), what=",".join(what),
         loadavg_1m=round(os.getloadavg()[0], 2))  # fmt: skip


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    run_cli(main)

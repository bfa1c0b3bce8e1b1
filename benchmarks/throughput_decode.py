"""The decode part of benchmarks/throughput.py: the Translator's compiled decoders and a
decoder without a KV cache for comparison.

Every call is forced to emit exactly N tokens per row (benchmarks/common's
`forced_length_overrides`), so a random model does fixed work; `nocache_greedy` re-runs the
whole decoder over the prefix at each step, in static-width blocks (`nocache_blocks`). The
figures are described in benchmarks/throughput.py.
"""

from __future__ import annotations

import dataclasses
import math
import time

from benchmarks import common
from benchmarks.throughput_train import Bench, aot, block, ints
from transformer.common.errors import UserError

NOCACHE_FIGURE = "decode_greedy_nocache_tokens_per_s"
NOCACHE_BLOCKS = 8


def decode(bench: Bench) -> None:
    import jax.numpy as jnp

    from transformer.data import EOS_ID

    lengths, nocache = _decode_lengths(bench)
    options = bench.options
    if options.decode_warmup < 0 or options.decode_repeats < 1:
        raise UserError("--decode_warmup must be >= 0 and --decode_repeats >= 1")
    rows, s_len = int(bench.config.decode.batch_size), int(bench.config.data.max_source_len)
    graphdef, state, _, _ = bench.new_state()
    params = state.params
    del state
    src_np = common.random_sources(
        options.seed + 1, rows, s_len, bench.model_cfg.vocab_size, EOS_ID
    )
    src = jnp.asarray(src_np)  # [B, S]
    timing = dict(warmup=options.decode_warmup, repeats=options.decode_repeats)
    greedy_tokens = _cached_decoders(bench, graphdef, params, src, lengths, timing)
    _nocache_decoders(bench, graphdef, params, src, nocache, timing, greedy_tokens)


def _decode_lengths(bench: Bench) -> tuple[list[int], list[int]]:
    """(output lengths of the cached decoders, of the no-cache decoder), checked."""
    options = bench.options
    lengths = ints(options.decode_lengths, "decode_lengths")
    if options.nocache_lengths is None:
        nocache = lengths
    elif options.nocache_lengths:
        nocache = ints(options.nocache_lengths, "nocache_lengths")
    else:  # --nocache_lengths= (empty): no no-cache figures
        nocache = []
    for n in sorted(set(lengths) | set(nocache)):
        if n > bench.model_cfg.max_len:
            raise UserError(
                f"decode length {n} exceeds model.max_len={bench.model_cfg.max_len}; raise "
                "--config.model.max_len or shorten --decode_lengths/--nocache_lengths"
            )
    return lengths, nocache


def _timed(fn, timing: dict):
    """(median seconds, {min_s, max_s}, output of the last timed call) of `fn()`."""
    # The last timed call's output (handed to `sync`, as compare_torch.py collects
    # generate()'s) is the one checked: at 256 tokens an extra uncached call for the
    # check alone would cost ~17 minutes on 2 cores.
    last = []

    def sync(out):
        block(out)
        last[:] = [out]

    seconds, times = common.median_time(fn, sync=sync, **timing)
    spread = common.spread(times)
    return seconds, spread, last[0]


def _cached_decoders(bench: Bench, graphdef, params, src, lengths, timing) -> dict:
    """Times each --decode_modes decoder at each length; returns {n: greedy tokens [B, n]}."""
    import jax.numpy as jnp
    import numpy as np

    from transformer.inference.translator import Translator

    rows, s_len = src.shape
    row_ids = jnp.arange(rows, dtype=jnp.int32)
    # int8 / bfloat16 decoding is its own implementation column beside float32 in the tables.
    impl = common.ours_impl(bench.decode.quantize)
    precision = dict(quantize=bench.decode.quantize, encoder_quantize=bench.decode.encoder_quantize)
    greedy_tokens = {}
    for n in lengths:
        for mode in bench.options.decode_modes:
            figure = common.DECODE_MODES[mode][0]
            overrides = common.forced_length_overrides(mode, n, rows)
            settings = dataclasses.replace(bench.decode, **overrides)
            translator = Translator(graphdef, bench.model_cfg, settings, None, None)
            prepared = translator.prepare(params)  # weight copies made once, as decode.py does
            start = time.perf_counter()
            fn = translator.lower(prepared, src, row_ids, n).compile()
            compile_s = time.perf_counter() - start
            seconds, spread, out = _timed(
                lambda fn=fn, state=prepared.state: fn(state, src, row_ids), timing
            )
            tokens = np.asarray(out[0])  # [B, R, n]
            _check_forced_length(tokens, n, mode)
            if mode == "greedy":
                greedy_tokens[n] = tokens[:, 0]
            extra = dict(
                batch=rows,
                source_len=s_len,
                output_tokens=n,
                call_s=round(seconds, 4),
                compile_s=round(compile_s, 2),
                **precision,
                **timing,
                **spread,
            )
            name = _length_name(figure, n)
            if mode == "beam4":
                extra["tokens_per_s"] = round(rows * n / seconds, 2)
                bench.emit(name, rows / seconds, "sentences/s", impl, **extra)
            else:
                bench.emit(name, rows * n / seconds, "tokens/s", impl, **extra)
    return greedy_tokens


def _nocache_decoders(bench: Bench, graphdef, params, src, nocache, timing, greedy_tokens):
    """Times the no-cache greedy decoder at each length, checked against `greedy_tokens`."""
    import jax
    import numpy as np

    rows, s_len = src.shape
    blocks = bench.options.nocache_blocks
    for n in nocache:
        jitted = jax.jit(
            lambda p, s, n=n: nocache_greedy(
                graphdef, p, s, n, min_len=n, max_len_b=n, blocks=blocks
            )
        )
        fn, compile_s = aot(jitted, params, src)
        seconds, spread, out = _timed(lambda fn=fn: fn(params, src), timing)
        tokens = np.asarray(out)  # [B, n]
        _check_forced_length(tokens[:, None], n, "greedy without cache")
        extra = dict(
            batch=rows,
            source_len=s_len,
            output_tokens=n,
            call_s=round(seconds, 4),
            compile_s=round(compile_s, 2),
            blocks=len(nocache_blocks(n, blocks)),
            **timing,
            **spread,
        )
        if n in greedy_tokens:
            extra["agrees_with_cached"] = round(float(np.mean(tokens == greedy_tokens[n])), 4)
        bench.emit(_length_name(NOCACHE_FIGURE, n), rows * n / seconds, "tokens/s", **extra)


def _length_name(figure: str, n: int) -> str:
    return figure if n == 64 else f"{figure}_{n}"


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
                None,
                src_segments,
                prefix,
                tgt_segments=jnp.ones_like(prefix),
                tgt_positions=positions,
                cross_kv=cross,
            )
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

"""CTranslate2, the CPU translation engine, on this project's own weights at benchmark sizes.

Our model of `--config` (default configs/bench_base.py: Transformer-base, Post-LN, sinusoidal,
tied embeddings, the MarianMT peer's shape) with random weights, written as a CTranslate2 model
(benchmarks/ctranslate2_weights.py) in float32 and int8, decodes decode.batch_size random
sources of data.max_source_len tokens: the same sources benchmarks/throughput.py decodes.
Every call is forced to exactly N output tokens (min_decoding_length = max_decoding_length =
N), as throughput.py and compare_torch.py force theirs, so the work per call is fixed.

Figures, impl `ctranslate2-float32` / `ctranslate2-int8`, named as throughput.py's and
compare_torch.py's so benchmarks/table.py puts them in the same rows:
`decode_greedy_tokens_per_s`, `decode_sample_tokens_per_s` (temperature 0.8, top-k 40, top-p
0.9), `decode_beam4_sentences_per_s` (4 beams, length penalty 0.6), with a `_N` suffix for
N other than 64; each the median of `--repeats` calls after one warm-up call. CTranslate2
runs one translation at a time (inter_threads 1) on `--threads` threads (default: the cores).

Usage:
    python -m benchmarks.compare_ctranslate2 [--config configs/bench_base.py] [--json]
        [--decode_lengths 64] [--decode_modes greedy,sample,beam4]
        [--precisions float32,int8] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from benchmarks import common
from benchmarks.common import emit, median_time, peak_rss_mib, spread
from benchmarks.ctranslate2_weights import QUANTIZATIONS, ids_of, load_translators, token
from transformer.common.errors import UserError, report_user_error
from transformer.common.machine import describe_machine

SEED = 1  # benchmarks/experiments/decode_setup's sources: the ones throughput.py decodes
# mode -> translate_batch options besides the forced length.
MODE_OPTIONS = {
    "greedy": {"beam_size": 1},
    "sample": {
        "beam_size": 1,
        "sampling_temperature": 0.8,
        "sampling_topk": 40,
        "sampling_topp": 0.9,
    },
    "beam4": {"beam_size": 4, "length_penalty": 0.6},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/bench_base.py", help="a config file's path")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--decode_lengths", default="64", help="comma list of output lengths")
    p.add_argument("--decode_modes", default=",".join(MODE_OPTIONS), help="greedy,sample,beam4")
    p.add_argument("--precisions", default=",".join(QUANTIZATIONS), help="float32,int8")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per figure (median)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the cores)")
    args = p.parse_args(argv)
    args.decode_modes = _choices(p, args.decode_modes, MODE_OPTIONS, "--decode_modes")
    args.precisions = _choices(p, args.precisions, QUANTIZATIONS, "--precisions")
    try:
        args.decode_lengths = [int(x) for x in args.decode_lengths.split(",") if x.strip()]
    except ValueError:
        p.error(f"--decode_lengths {args.decode_lengths!r}: expected integers such as 64,256")
    if not args.decode_lengths or min(args.decode_lengths) < 1 or args.repeats < 1:
        p.error("--decode_lengths and --repeats must be positive")
    return args


def _choices(p, text: str, allowed, flag: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or set(values) - set(allowed):
        p.error(f"{flag} {text!r}: choose from {', '.join(allowed)}")
    return values


def build_engines(config, precisions, threads: int, directory: str):
    """(model config, sources [B, S] as token lists, {impl: ctranslate2.Translator})."""
    from flax import nnx

    from transformer.data import EOS_ID
    from transformer.model.transformer import Transformer
    from transformer.training import run_config

    model_cfg = run_config.validate(config).model
    params = nnx.split(Transformer(model_cfg, rngs=nnx.Rngs(params=0)), nnx.Param)[1]
    rows, s_len = int(config.decode.batch_size), int(config.data.max_source_len)
    src = common.random_sources(SEED, rows, s_len, model_cfg.vocab_size, EOS_ID)
    sources = [[token(int(i)) for i in row] for row in src]
    engines = load_translators(model_cfg, params, precisions, directory, threads)
    return model_cfg, sources, engines


def bench_engine(impl: str, engine, sources, args) -> None:
    for length in args.decode_lengths:
        for mode in args.decode_modes:
            options = dict(MODE_OPTIONS[mode], min_decoding_length=length)
            options["max_decoding_length"] = length

            def call(options=options):
                return engine.translate_batch(sources, **options)

            seconds, times = median_time(call, warmup=1, repeats=args.repeats)
            _check_length(call(), length, mode)
            _emit_figure(impl, mode, length, seconds, times, len(sources), args)


def _check_length(results, length: int, mode: str) -> None:
    for result in results:
        ids = ids_of(result.hypotheses[0])
        if len(ids) != length:
            raise RuntimeError(f"{mode}: expected {length} tokens per row, got {len(ids)}")


def _emit_figure(impl, mode, length, seconds, times, rows, args) -> None:
    figure = common.DECODE_MODES[mode][0]
    name = figure if length == 64 else f"{figure}_{length}"
    extra = dict(
        batch=rows,
        output_tokens=length,
        call_s=round(seconds, 4),
        repeats=args.repeats,
        **spread(times),
    )
    if mode == "beam4":
        extra["tokens_per_s"] = round(rows * length / seconds, 2)
        emit(name, rows / seconds, "sentences/s", impl, args.json, **extra)
    else:
        emit(name, rows * length / seconds, "tokens/s", impl, args.json, **extra)


def main(argv=None) -> int:
    # Every precision's setup line records the load before this process's own work: the
    # int8 engine runs right after the float32 one, whose load is this run's, not another's.
    load_before = os.getloadavg()[0]
    args = parse_args(argv)
    try:
        import ctranslate2

        from transformer.training.run_config import load_config_file

        config = load_config_file(args.config)
        threads = args.threads or os.cpu_count() or 1
        with tempfile.TemporaryDirectory() as directory:
            _, sources, engines = build_engines(config, args.precisions, threads, directory)
            for impl, engine in engines.items():
                emit("setup", 0, "-", impl, args.json, **_setup(ctranslate2, threads, load_before))
                bench_engine(impl, engine, sources, args)
        for impl in engines:  # one process holds every precision: its peak is theirs
            emit("peak_rss_mib", round(peak_rss_mib(), 1), "MiB", impl, args.json, what="decode")
    except UserError as e:
        return report_user_error(e)
    return 0


def _setup(ctranslate2, threads: int, load_before: float) -> dict:
    return {
        "ctranslate2": ctranslate2.__version__,
        "threads": threads,
        "cpus": os.cpu_count(),
        "machine": describe_machine("cpu"),
        "loadavg_1m": round(load_before, 2),
    }


if __name__ == "__main__":
    sys.exit(main())

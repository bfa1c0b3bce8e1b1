"""PyTorch peer for the throughput benchmark: a Hugging Face MarianMT model on this CPU.

Built from `MarianConfig` with random weights (nothing is downloaded) at the sizes of
`configs/bench_base.py`: d_model 512, 8 heads, d_ff 2048, 6 + 6 layers, vocab 8000, one shared
embedding table tied to the output projection, post-LayerNorm, ReLU, Marian's static sinusoidal
positions, embeddings scaled by sqrt(d_model), dropout 0.1. Eager PyTorch (no torch.compile),
float32, the attention kernel transformers picks (SDPA).

Figures (each the MEDIAN of the measured repetitions, after warm-up):

- `train_tokens_per_s`, `train_step_s`: one full train step (forward, label-smoothed (0.1)
  cross-entropy ignoring pad, backward, AdamW step, zero_grad) on fixed random batches of
  32 sentences x 64 source + 64 target tokens (no padding); tokens/s counts source + target
  tokens (32 * 128 per step). Default: 2 warm-up + 10 measured steps.
- `decode_greedy_tokens_per_s`, `decode_sample_tokens_per_s` (temperature 0.8, top_k 40,
  top_p 0.9), `decode_beam4_sentences_per_s` (4 beams, length_penalty 0.6,
  early_stopping=True): `model.generate(use_cache=True)` under `torch.inference_mode()` and
  `model.eval()` on 32 random source sentences of 64 tokens. Every run is forced to produce
  exactly N output tokens (min_new_tokens = max_new_tokens = N): an untrained model emits EOS
  at random positions, which would make the work per call arbitrary; forcing the length makes
  the figure a fixed-work number comparable with our decoder's. tokens/s counts generated
  output tokens (32 * N; the decoder-start token is not counted). N = 64 gives the plain
  names, N = 256 the same names with a `_256` suffix. Decoding is slow on CPU, so it is the
  median of a few calls (see --decode-repeats; the count used is printed with each figure).

Usage:
    python -m benchmarks.compare_torch [--what train,decode] [--json] [--steps 10] [--threads N]

With --json, one JSON object per line: {"figure", "value", "unit", "impl": "torch-marian", ...};
otherwise a table. Torch/transformers versions, the thread count, the load average and the peak
RSS are printed too. Needs the `bench` extra (torch, transformers); runs offline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.common import PEER, emit, median_time, peak_rss_mib, spread
from transformer.common.machine import describe_machine
from transformer.common.special_ids import BOS_ID, EOS_ID, FIRST_WORD_ID, PAD_ID
from transformer.interop.marian import marian_config

IMPL = PEER

# Sizes of configs/bench_base.py.
VOCAB = 8000
D_MODEL = 512
HEADS = 8
D_FF = 2048
LAYERS = 6
DROPOUT = 0.1
MAX_POSITIONS = 512

BATCH = 32
SOURCE_LEN = 64
TARGET_LEN = 64
LABEL_SMOOTHING = 0.1
NUM_TRAIN_BATCHES = 4  # fixed random batches, cycled

DECODE_MODES = {
    "greedy": ("decode_greedy_tokens_per_s", {"do_sample": False, "num_beams": 1}),
    "sample": (
        "decode_sample_tokens_per_s",
        {"do_sample": True, "num_beams": 1, "temperature": 0.8, "top_k": 40, "top_p": 0.9},
    ),
    "beam4": (
        "decode_beam4_sentences_per_s",
        {"do_sample": False, "num_beams": 4, "length_penalty": 0.6, "early_stopping": True},
    ),
}
# (warm-up calls, measured calls) per output length. Decoding 64 tokens first warms up every
# kernel the 256-token run uses, so the long runs need no extra warm-up call of their own.
DEFAULT_DECODE_REPEATS = {64: (1, 3), 256: (0, 3)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--what", default="train,decode", help="comma list of: train, decode")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--steps", type=int, default=10, help="measured train steps (>= 8 advised)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up train steps")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = default)")
    p.add_argument(
        "--decode-modes", default=",".join(DECODE_MODES), help="comma list of greedy,sample,beam4"
    )
    p.add_argument("--decode-lengths", default="64,256", help="comma list of output lengths")
    p.add_argument(
        "--decode-repeats",
        type=int,
        default=0,
        help="measured generate() calls per figure (0 = 3, with 1 warm-up call at length 64)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.what = _split(args.what, {"train", "decode"}, "--what")
    args.decode_modes = _split(args.decode_modes, set(DECODE_MODES), "--decode-modes")
    args.decode_lengths = [int(n) for n in args.decode_lengths.split(",") if n.strip()]
    if any(n < 1 or n + 1 > MAX_POSITIONS for n in args.decode_lengths):
        p.error(f"--decode-lengths must be in [1, {MAX_POSITIONS - 1}]")
    if args.steps < 1 or args.warmup < 0 or args.decode_repeats < 0 or args.threads < 0:
        p.error("--steps must be >= 1; --warmup, --decode-repeats, --threads >= 0")
    return args


def _split(text: str, allowed: set[str], flag: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad:
        raise SystemExit(f"{flag}: unknown {bad}; choose from {sorted(allowed)}")
    return items


def build_model(seed: int):
    """MarianMTModel with random init at the bench_base sizes (no download)."""
    import torch
    from transformers import MarianMTModel

    from transformer.model.config import ModelConfig

    model_cfg = ModelConfig(
        vocab_size=VOCAB,
        d_model=D_MODEL,
        num_heads=HEADS,
        d_ff=D_FF,
        num_encoder_layers=LAYERS,
        num_decoder_layers=LAYERS,
        norm_position="post",
        activation="relu",
    )
    # forced_eos None: the decode figures force their lengths with min/max_new_tokens.
    config = marian_config(
        model_cfg, dropout=DROPOUT, max_positions=MAX_POSITIONS, forced_eos_token_id=None
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    shared = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight.data_ptr() == shared.data_ptr(), "untied head"
    assert model.model.decoder.embed_tokens.weight.data_ptr() == shared.data_ptr()
    return model


def random_tokens(generator, *shape):
    import torch

    return torch.randint(FIRST_WORD_ID, VOCAB, shape, generator=generator, dtype=torch.long)


def bench_train(model, args, meta) -> None:
    import torch

    gen = torch.Generator().manual_seed(args.seed + 1)
    batches = []
    for _ in range(NUM_TRAIN_BATCHES):
        src = random_tokens(gen, BATCH, SOURCE_LEN)
        tgt = random_tokens(gen, BATCH, TARGET_LEN)
        dec_in = torch.cat([torch.full((BATCH, 1), BOS_ID, dtype=torch.long), tgt[:, :-1]], 1)
        batches.append((src, torch.ones_like(src), dec_in, tgt))

    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0
    )
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_ID, label_smoothing=LABEL_SMOOTHING)
    counter = iter(range(10**9))
    losses: list[float] = []

    def step():
        src, mask, dec_in, tgt = batches[next(counter) % len(batches)]
        logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec_in).logits
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    # loss.item() waits for nothing on CPU (eager), but keeps the pattern honest elsewhere.
    step_s, times = median_time(
        step, warmup=args.warmup, repeats=args.steps, sync=lambda loss: losses.append(loss.item())
    )
    tokens = BATCH * (SOURCE_LEN + TARGET_LEN)
    extra = dict(
        meta,
        batch=BATCH,
        source_len=SOURCE_LEN,
        target_len=TARGET_LEN,
        warmup=args.warmup,
        repeats=args.steps,
        **spread(times),
        loss_last=round(losses[-1], 4),
    )
    emit("train_tokens_per_s", tokens / step_s, "tokens/s", IMPL, args.json, **extra)
    emit("train_step_s", step_s, "s", IMPL, args.json, **extra)


def bench_decode(model, args, meta) -> None:
    import torch

    gen = torch.Generator().manual_seed(args.seed + 2)
    src = random_tokens(gen, BATCH, SOURCE_LEN)
    mask = torch.ones_like(src)
    model.eval()
    torch.manual_seed(args.seed + 3)  # sampling draws from the global generator

    for length in args.decode_lengths:
        warmup, repeats = _decode_repeats(length, args)
        for mode in args.decode_modes:
            figure, kwargs = DECODE_MODES[mode]
            gen_config = _generation_config(length, kwargs)
            shapes = []

            def call(gen_config=gen_config):
                with torch.inference_mode():
                    return model.generate(
                        input_ids=src, attention_mask=mask, generation_config=gen_config
                    )

            call_s, times = median_time(
                call,
                warmup=warmup,
                repeats=repeats,
                sync=lambda out, shapes=shapes: shapes.append(out.shape),
            )
            for shape in shapes:  # decoder-start token + exactly `length` new tokens
                if tuple(shape) != (BATCH, length + 1):
                    raise RuntimeError(f"{mode}: expected {(BATCH, length + 1)}, got {shape}")
            new_tokens = BATCH * length
            name = figure if length == 64 else f"{figure}_{length}"
            extra = dict(
                meta,
                batch=BATCH,
                source_len=SOURCE_LEN,
                new_tokens=length,
                call_s=round(call_s, 4),
                warmup=warmup,
                repeats=repeats,
                **spread(times),
            )
            if mode == "beam4":
                extra["tokens_per_s"] = round(new_tokens / call_s, 2)
                emit(name, BATCH / call_s, "sentences/s", IMPL, args.json, **extra)
            else:
                emit(name, new_tokens / call_s, "tokens/s", IMPL, args.json, **extra)


def _decode_repeats(length: int, args) -> tuple[int, int]:
    """(warm-up calls, measured calls) of the generate() figures at output `length`."""
    warmup, repeats = DEFAULT_DECODE_REPEATS.get(length, (1, 3))
    if args.decode_repeats:
        repeats = args.decode_repeats
    if length == min(args.decode_lengths):
        warmup = max(warmup, 1)  # the first (shortest) length always warms up
    return warmup, repeats


def _generation_config(length: int, mode_kwargs: dict):
    """generate() settings of one decoding mode that emit exactly `length` new tokens."""
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=length,
        min_new_tokens=length,  # EOS masked until `length`: fixed work per call
        use_cache=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        bos_token_id=None,
        forced_eos_token_id=None,
        **mode_kwargs,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    model = build_model(args.seed)
    params = sum(p.numel() for p in model.parameters())
    meta = {"threads": threads, "torch": torch.__version__}
    info = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": threads,
        "interop_threads": torch.get_num_interop_threads(),
        "cpus": os.cpu_count(),
        "machine": describe_machine("torch-cpu"),
        "params": params,
        "attn": model.config._attn_implementation,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        emit("setup", 0, "-", IMPL, True, **info)
    else:
        print("PyTorch peer (MarianMT, random init, float32, eager)")
        print("  " + "  ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        print(f"{'figure':<36} {'value':>12} {'unit':<14} {'impl':<14} details", flush=True)

    start = time.perf_counter()
    if "train" in args.what:
        bench_train(model, args, meta)
    if "decode" in args.what:
        bench_decode(model, args, meta)
    total_s = time.perf_counter() - start
    emit(
        "peak_rss_mib",
        round(peak_rss_mib(), 1),
        "MiB",
        IMPL,
        args.json,
        total_s=round(total_s, 1),
        what=",".join(part for part in ("train", "decode") if part in args.what),
        loadavg_1m=round(os.getloadavg()[0], 2),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

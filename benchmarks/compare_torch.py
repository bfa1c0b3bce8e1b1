"""PyTorch peer for the throughput benchmark: a Hugging Face MarianMT model, on the CPU or a GPU.

Built from `MarianConfig` with random weights (nothing is downloaded) at the sizes of a
benchmark config (--config, default `configs/bench_base.py`: d_model 512, 8 heads, d_ff 2048,
6 + 6 layers, vocab 8000; `configs/bench_big.py`: Transformer big), one shared embedding table
tied to the output projection, post-LayerNorm, ReLU, Marian's static sinusoidal positions,
embeddings scaled by sqrt(d_model), the config's dropout (0.1). The attention kernel is the one
transformers picks (SDPA). By default eager PyTorch, float32, on the CPU; --device cuda runs on
a GPU (fused AdamW), --bf16 under bfloat16 autocast (parameters and optimizer stay float32),
--compile trains `torch.compile(model)` (its figures then carry impl "torch-marian-compiled";
decoding always runs the eager model).

Figures (each the MEDIAN of the measured repetitions, after warm-up):

- `train_tokens_per_s`, `train_step_s`: one full train step (forward, label-smoothed (0.1)
  cross-entropy ignoring pad, backward, AdamW step, zero_grad) on fixed random batches of
  --batch sentences (default the config's train.batch_size, 32) x data.max_source_len source
  + data.max_target_len target tokens (64 + 64, no padding); tokens/s counts source + target
  tokens. Default: 2 warm-up steps (5 with --compile, which compiles in the first) + 10
  measured steps.
- `decode_greedy_tokens_per_s`, `decode_sample_tokens_per_s` (temperature 0.8, top_k 40,
  top_p 0.9), `decode_beam4_sentences_per_s` (4 beams, length_penalty 0.6,
  early_stopping=True): `model.generate(use_cache=True)` under `torch.inference_mode()` and
  `model.eval()` on decode.batch_size (32) random source sentences of data.max_source_len
  tokens. Every run is forced to produce
  exactly N output tokens (min_new_tokens = max_new_tokens = N): an untrained model emits EOS
  at random positions, which would make the work per call arbitrary; forcing the length makes
  the figure a fixed-work number comparable with our decoder's. tokens/s counts generated
  output tokens (32 * N; the decoder-start token is not counted). N = 64 gives the plain
  names, N = 256 the same names with a `_256` suffix. Decoding is slow on CPU, so it is the
  median of a few calls (see --decode-repeats; the count used is printed with each figure).

Usage:
    python -m benchmarks.compare_torch [--what train,decode] [--json] [--steps 10] [--threads N]
        [--config configs/bench_big.py] [--batch 256] [--device cuda] [--bf16] [--compile]
        [--size_label big]

With --json, one JSON object per line: {"figure", "value", "unit", "impl": "torch-marian", ...};
otherwise a table. --size_label adds `"size": LABEL` to every figure (benchmarks/table.py keys
rows by it). Torch/transformers versions, the device, the thread count, the load average and
the peak RSS (and, on a GPU, the allocator's peak) are printed too. Needs the `bench` extra
(torch, transformers); runs offline. JAX is kept on the CPU in this process (it only reads the
config), so it takes no GPU memory from PyTorch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the config's checks import JAX; keep it off GPUs

from benchmarks.common import PEER, PEER_COMPILED, emit, median_time, peak_rss_mib, spread
from transformer.common.machine import describe_machine
from transformer.common.special_ids import BOS_ID, EOS_ID, FIRST_WORD_ID, PAD_ID
from transformer.interop.marian import marian_config

IMPL = PEER
DEFAULT_CONFIG = "configs/bench_base.py"
MAX_POSITIONS = 512  # Marian's position table: room for 256-token outputs
LABEL_SMOOTHING = 0.1
NUM_TRAIN_BATCHES = 4  # fixed random batches, cycled
COMPILED_WARMUP = 5  # warm-up steps with --compile: the first compiles forward and backward


class Sizes:
    """What the peer takes from a benchmark config: model sizes, batch rows and lengths."""

    def __init__(self, config, batch: int | None):
        from transformer.model.config import ModelConfig

        self.model = ModelConfig.from_dict(config.model.to_dict())
        if self.model.vocab_size is None:
            raise SystemExit("--config: set model.vocab_size (random-id batches need one)")
        self.batch = int(batch or config.train.batch_size)
        self.decode_batch = int(config.decode.batch_size)
        self.source_len = int(config.data.max_source_len)
        self.target_len = int(config.data.max_target_len)


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
    p.add_argument("--config", default=DEFAULT_CONFIG, help="benchmark config giving the sizes")
    p.add_argument("--batch", type=int, default=0, help="train rows (0 = train.batch_size)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--compile", action="store_true", help="train torch.compile(model)")
    p.add_argument("--size_label", default="", help="a 'size' field on every figure")
    args = p.parse_args(argv)
    args.what = _split(args.what, {"train", "decode"}, "--what")
    args.decode_modes = _split(args.decode_modes, set(DECODE_MODES), "--decode-modes")
    args.decode_lengths = [int(n) for n in args.decode_lengths.split(",") if n.strip()]
    if any(n < 1 or n + 1 > MAX_POSITIONS for n in args.decode_lengths):
        p.error(f"--decode-lengths must be in [1, {MAX_POSITIONS - 1}]")
    if args.steps < 1 or args.warmup < 0 or args.decode_repeats < 0 or args.threads < 0:
        p.error("--steps must be >= 1; --warmup, --decode-repeats, --threads >= 0")
    if args.batch < 0:
        p.error("--batch must be >= 0 (0 = the config's train.batch_size)")
    if not os.path.isfile(args.config):
        p.error(f"--config {args.config} does not exist")
    return args


def _split(text: str, allowed: set[str], flag: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad:
        raise SystemExit(f"{flag}: unknown {bad}; choose from {sorted(allowed)}")
    return items


def build_model(sizes: Sizes, seed: int):
    """MarianMTModel with random init at the config's sizes (no download)."""
    import dataclasses

    import torch
    from transformers import MarianMTModel

    # The peer's architecture: Post-LN, ReLU, sinusoidal, tied, the config's sizes and dropout.
    model_cfg = dataclasses.replace(
        sizes.model, norm_position="post", activation="relu", position="sinusoidal"
    )
    # forced_eos None: the decode figures force their lengths with min/max_new_tokens.
    config = marian_config(
        model_cfg, dropout=None, max_positions=MAX_POSITIONS, forced_eos_token_id=None
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    shared = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight.data_ptr() == shared.data_ptr(), "untied head"
    assert model.model.decoder.embed_tokens.weight.data_ptr() == shared.data_ptr()
    return model


def random_tokens(generator, vocab: int, *shape):
    import torch

    return torch.randint(FIRST_WORD_ID, vocab, shape, generator=generator, dtype=torch.long)


def precision(args):
    """The autocast context of the run: bfloat16 with --bf16, else none (float32)."""
    import torch

    if args.bf16:
        return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(args) -> None:
    import torch

    if torch.device(args.device).type == "cuda":
        torch.cuda.synchronize()


def bench_train(model, sizes: Sizes, args, meta) -> None:
    import torch

    gen = torch.Generator().manual_seed(args.seed + 1)
    rows, vocab = sizes.batch, sizes.model.vocab_size
    batches = []
    for _ in range(NUM_TRAIN_BATCHES):
        src = random_tokens(gen, vocab, rows, sizes.source_len)
        tgt = random_tokens(gen, vocab, rows, sizes.target_len)
        dec_in = torch.cat([torch.full((rows, 1), BOS_ID, dtype=torch.long), tgt[:, :-1]], 1)
        batch = (src, torch.ones_like(src), dec_in, tgt)
        batches.append(tuple(t.to(args.device) for t in batch))

    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=5e-4,
        betas=(0.9, 0.98),
        eps=1e-9,
        weight_decay=0.0,
        fused=torch.device(args.device).type == "cuda",
    )
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_ID, label_smoothing=LABEL_SMOOTHING)
    forward = torch.compile(model) if args.compile else model
    counter = iter(range(10**9))
    losses: list[float] = []

    def step():
        src, mask, dec_in, tgt = batches[next(counter) % len(batches)]
        with precision(args):
            logits = forward(input_ids=src, attention_mask=mask, decoder_input_ids=dec_in).logits
            loss = loss_fn(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync(loss):
        synchronize(args)
        losses.append(loss.item())

    warmup = max(args.warmup, COMPILED_WARMUP) if args.compile else args.warmup
    step_s, times = median_time(step, warmup=warmup, repeats=args.steps, sync=sync)
    tokens = rows * (sizes.source_len + sizes.target_len)
    extra = dict(
        meta,
        batch=rows,
        source_len=sizes.source_len,
        target_len=sizes.target_len,
        warmup=warmup,
        repeats=args.steps,
        **spread(times),
        loss_last=round(losses[-1], 4),
    )
    impl = PEER_COMPILED if args.compile else IMPL
    emit("train_tokens_per_s", tokens / step_s, "tokens/s", impl, args.json, **extra)
    emit("train_step_s", step_s, "s", impl, args.json, **extra)


def bench_decode(model, sizes: Sizes, args, meta) -> None:
    import torch

    gen = torch.Generator().manual_seed(args.seed + 2)
    rows = sizes.decode_batch
    src = random_tokens(gen, sizes.model.vocab_size, rows, sizes.source_len).to(args.device)
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
                with torch.inference_mode(), precision(args):
                    return model.generate(
                        input_ids=src, attention_mask=mask, generation_config=gen_config
                    )

            def sync(out, shapes=shapes):
                synchronize(args)
                shapes.append(out.shape)

            call_s, times = median_time(
                call,
                warmup=warmup,
                repeats=repeats,
                sync=sync,
            )
            for shape in shapes:  # decoder-start token + exactly `length` new tokens
                if tuple(shape) != (rows, length + 1):
                    raise RuntimeError(f"{mode}: expected {(rows, length + 1)}, got {shape}")
            new_tokens = rows * length
            name = figure if length == 64 else f"{figure}_{length}"
            extra = dict(
                meta,
                batch=rows,
                source_len=sizes.source_len,
                new_tokens=length,
                call_s=round(call_s, 4),
                warmup=warmup,
                repeats=repeats,
                **spread(times),
            )
            if mode == "beam4":
                extra["tokens_per_s"] = round(new_tokens / call_s, 2)
                emit(name, rows / call_s, "sentences/s", IMPL, args.json, **extra)
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

    from transformer.training.run_config import load_config_file

    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    sizes = Sizes(load_config_file(args.config), args.batch)
    model = build_model(sizes, args.seed).to(args.device)
    params = sum(p.numel() for p in model.parameters())
    meta = {"threads": threads, "torch": torch.__version__, "device": args.device}
    meta.update(dtype="bfloat16" if args.bf16 else "float32", compiled=args.compile)
    if args.size_label:
        meta["size"] = args.size_label
    info = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": threads,
        "interop_threads": torch.get_num_interop_threads(),
        "cpus": os.cpu_count(),
        "machine": describe_machine(f"torch-{args.device}"),
        "device_kind": _device_kind(args.device),
        "params": params,
        "attn": model.config._attn_implementation,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        **meta,
    }
    impl = PEER_COMPILED if args.compile else IMPL
    if args.json:
        emit("setup", 0, "-", impl, True, **info)
    else:
        print(f"PyTorch peer (MarianMT, random init, {meta['dtype']}, {args.device})")
        print("  " + "  ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        print(f"{'figure':<36} {'value':>12} {'unit':<14} {'impl':<14} details", flush=True)

    start = time.perf_counter()
    if "train" in args.what:
        bench_train(model, sizes, args, meta)
    if "decode" in args.what:
        bench_decode(model, sizes, args, meta)
    total_s = time.perf_counter() - start
    if torch.device(args.device).type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
        emit("device_peak_mib", round(peak, 1), "MiB", impl, args.json, **meta)
    emit(
        "peak_rss_mib",
        round(peak_rss_mib(), 1),
        "MiB",
        impl,
        args.json,
        total_s=round(total_s, 1),
        what=",".join(part for part in ("train", "decode") if part in args.what),
        loadavg_1m=round(os.getloadavg()[0], 2),
        **({"size": args.size_label} if args.size_label else {}),
    )
    return 0


def _device_kind(device: str) -> str:
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"


if __name__ == "__main__":
    sys.exit(main())

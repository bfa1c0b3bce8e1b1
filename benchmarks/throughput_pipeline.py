"""The pipeline part of benchmarks/throughput.py: the train step on real data.

Batches come from `transformer.data.make_datasets` on the config's data, once packed
(data.batching='pack') and once one sentence per row cut to the longest source and target of
each batch (what a default padding collator produces); the shared `Bench` train step runs on
both, and only the step is timed. The figures are described in benchmarks/throughput.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time

from benchmarks.throughput_train import Bench, block


def pipeline(bench: Bench) -> None:
    import ml_collections

    from transformer.training import run_config

    d = bench.config.data
    if d.name == "parallel_text" and not os.path.isdir(d.path):
        message = (
            f"pipeline: skipped: data.path={d.path!r} is not a directory (pass "
            "--config.data.name=parallel_text --config.data.path=DIR of {split}.{lang} files)"
        )
        print(message, file=sys.stderr if bench.as_json else sys.stdout, flush=True)
        return
    workdir = _cache_dir(bench)
    parallel = bench.train_setup()
    quiet = contextlib.redirect_stdout(sys.stderr) if bench.as_json else contextlib.nullcontext()
    with quiet:  # TFDS preparation prints to stdout
        packed_data = _datasets(bench, workdir, parallel, "pack")
    # The model's embedding rows must cover every piece.
    run_config.resolve_vocab_size(
        ml_collections.ConfigDict(bench.config.to_dict()),
        packed_data.source_tokenizer,
        packed_data.target_tokenizer,
    )
    with quiet:
        packed, packed_batch_s = _take(packed_data.train_iterator(), bench.steps, False)
        padded_data = _datasets(bench, workdir, parallel, "pad")
        padded, padded_batch_s = _take(padded_data.train_iterator(), bench.steps, True)

    shared = dict(warmup=1, repeats=bench.steps, data=d.name)
    p = _time_steps(bench, parallel, packed)
    bench.emit(
        "train_real_tokens_per_s",
        p["rate"],
        "tokens/s",
        batching="pack",
        rows=packed[0]["src"].shape[0],
        row_len=f"{packed[0]['src'].shape[1]}+{packed[0]['tgt'].shape[1]}",
        step_s=p["step_s"],
        real_tokens_per_step=p["real_tokens_per_step"],
        batch_s=round(packed_batch_s, 4),
        compile_s=p["compile_s"],
        **shared,
    )
    bench.emit("padding_fraction", p["padding"], "fraction", batching="pack", **shared)
    q = _time_steps(bench, parallel, padded)
    bench.emit(
        "train_padded_real_tokens_per_s",
        q["rate"],
        "tokens/s",
        batching="pad to longest",
        rows=padded[0]["src"].shape[0],
        step_s=q["step_s"],
        real_tokens_per_step=q["real_tokens_per_step"],
        shapes=q["shapes"],
        batch_s=round(padded_batch_s, 4),
        compile_s=q["compile_s"],
        **shared,
    )
    bench.emit(
        "padded_padding_fraction", q["padding"], "fraction", batching="pad to longest", **shared
    )


def _cache_dir(bench: Bench) -> str:
    """Where the vocabulary and tokenized data of this data config are kept between runs."""
    d = bench.config.data
    key = "|".join(
        str(x)
        for x in (
            d.name,
            os.path.abspath(d.path) if d.path else "",
            d.source_lang,
            d.target_lang,
            d.reverse,
            d.vocab_type,
            d.shared_vocab,
            d.vocab_path,
            d.vocab_size,
        )
    )
    return os.path.join(bench.options.workdir, hashlib.sha1(key.encode()).hexdigest()[:12])


def _datasets(bench: Bench, workdir: str, parallel, batching: str):
    """The config's data with `batching` and sentence-count batches (no token budget)."""
    import ml_collections

    from transformer.data import make_datasets

    config = ml_collections.ConfigDict(bench.config.to_dict())
    config.data.batching = batching
    config.train.batch_tokens = 0
    return make_datasets(config, workdir, row_multiple=parallel.num_devices)


def _take(iterator, count: int, trim: bool) -> tuple[list[dict], float]:
    """`count` batches (cut to their longest sentences when `trim`), and the median seconds
    to prepare one."""
    import numpy as np

    out, seconds = [], []
    for _ in range(count):
        start = time.perf_counter()
        batch = next(iterator)
        if trim:
            batch = _trim_to_longest(batch)
        seconds.append(time.perf_counter() - start)
        out.append(batch)
    return out, float(np.median(seconds))


def _time_steps(bench: Bench, parallel, batches: list[dict]) -> dict:
    """Compiles each distinct shape, runs batches[0] once untimed (warm-up), then times
    every batch."""
    import numpy as np

    sharded = [parallel.shard_batch(b) for b in batches]
    compile_s = sum(bench.train_step(b) for b in sharded)
    block(bench.run_step(sharded[0]))
    rates, times, real_total, slots_total = [], [], 0, 0
    for host, batch in zip(batches, sharded, strict=True):
        start = time.perf_counter()
        block(bench.run_step(batch))
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

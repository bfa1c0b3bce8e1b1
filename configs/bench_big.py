"""Throughput benchmark at Transformer-big size (the GPU side-by-side's second size).

Model: configs/bench_base.py's with d_model 1024, 16 heads, d_ff 4096 (6 + 6 layers, vocab
8000, tied embeddings, Post-LN, ReLU, sinusoidal positions, dropout 0.1: the sizes of Vaswani
et al.'s big model, whose own dropout is 0.3, kept at 0.1 here as the peer's). Batches as in
bench_base: 64 source + 64 target tokens per sentence, 32 sentences unless
--config.train.batch_size says otherwise (the GPU script trains 256).

Command:   python -m benchmarks.throughput --config configs/bench_big.py --what train,decode
               --config.model.dtype=bfloat16 --config.model.attention_impl=cudnn
               --config.train.batch_size=256 --peak_tflops=989.5 --json
           (benchmarks/gpu_side_by_side.sh runs it beside the MarianMT peer at the same sizes)
Expected:  figures train_tokens_per_s, mfu, decode_*_tokens_per_s (one JSON line each); no
           accuracy target: this config is for timing.
Run time:  about a minute on one H200; far too slow for a 2-core CPU beyond a step or two.
"""

from pathlib import Path

from transformer import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("bench_base.py"))
    config.model.d_model = 1024
    config.model.num_heads = 16
    config.model.d_ff = 4096
    return config

"""Throughput benchmark at Transformer-base size (the model of the PyTorch MarianMT peer).

Model: d_model 512, 8 heads, d_ff 2048, 6 + 6 layers, vocab 8000, one shared embedding table
tied to the output projection, Post-LN, ReLU, sinusoidal positions, dropout 0.1. Training
batches: 32 sentences of 64 source + 64 target tokens ('pad' batching); decoding batches: 32
sentences of 64 source tokens. The model and the 64-token length limits are the base config's
defaults, so only the batching and the data differ below. The real-data figures (`--what
pipeline`) read Multi30k from ../shared/data/multi30k (skipped with a message if absent).

Command:   python -m benchmarks.throughput --config configs/bench_base.py [--json]
               [--what train,decode,pipeline] [--config.model.dtype=bfloat16 --peak_tflops=X]
Expected:  figures train_tokens_per_s, mfu, train_real_tokens_per_s, decode_*_tokens_per_s, ...
           (one table row or JSON line each); no accuracy target: this config is for timing.
Run time:  about 30-40 minutes on 2 CPU cores without the no-cache 256-token decode (which
           alone takes tens of minutes there: --nocache_lengths=64 skips it); a few minutes on
           a GPU.
"""

from transformer import get_base_config


def get_config():
    config = get_base_config()
    config.model.vocab_size = 8000  # random-id batches need a size without a tokenizer
    config.data.name = "parallel_text"
    config.data.path = "../shared/data/multi30k"
    config.data.batching = "pad"
    config.train.batch_size = 32
    config.decode.batch_size = 32
    return config

"""Analytic model FLOPs (multiply-adds count 2) of the Transformer, from its config alone.

Per source token, per encoder layer: Q, K, V, O projections, the attention scores and the
weighted sum over S keys, and the FFN. Per target token, per decoder layer: the same for
causal self-attention over T keys (counted in full, as the dense kernels compute it), cross-
attention's Q and O projections and its scores over S keys (its K and V are projected once per
source token), and the FFN; then the output projection to the vocabulary. A training step
costs 3x the forward pass (backward = 2x forward). Norms, softmax and embeddings are ignored.
"""

from __future__ import annotations

from transformer.model.config import ModelConfig


def forward_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    d, hd, h, kv = cfg.d_model, cfg.head_dim, cfg.num_heads, cfg.kv_heads
    qo = 2 * 2 * d * h * hd  # query and output projections, per token
    kv_proj = 2 * 2 * d * kv * hd  # key and value projections, per token
    ffn = 2 * d * cfg.d_ff * (3 if cfg.gated else 2)

    def scores(keys):  # QK^T and PV for one query token over `keys` keys
        return 2 * 2 * h * hd * keys

    encoder = src_len * (qo + kv_proj + scores(src_len) + ffn)
    decoder_self = tgt_len * (qo + kv_proj + scores(tgt_len))
    cross = tgt_len * (qo + scores(src_len)) + src_len * kv_proj
    decoder = decoder_self + cross + tgt_len * ffn
    logits = tgt_len * 2 * d * cfg.vocab_size
    per_example = cfg.num_encoder_layers * encoder + cfg.num_decoder_layers * decoder + logits
    return float(batch * per_example)


def train_step_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    return 3.0 * forward_flops(cfg, batch, src_len, tgt_len)

"""The network: `ModelConfig` (config), dense/embedding/norm/feed-forward layers (layers),
multi-head attention with its KV cache (attention), positional schemes (position), padding,
causal and packed-segment masks (masks), dropout (dropout), the encoder-decoder
`Transformer` with `encode`/`decode` (transformer), the analytic FLOP count (flops) and
int8 copies of the decoder's products for decoding (quantize).
It sees arrays and a config only: no files, tokenizers or training state.

Imports from: transformer.common.
"""

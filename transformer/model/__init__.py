"""The network: `ModelConfig` (config), dense/embedding/norm/feed-forward layers (layers),
multi-head attention with its KV cache (attention), the positional schemes as classes chosen
by name (position_schemes) and their formulas (position), padding,
causal and packed-segment masks (masks), dropout (dropout), the encoder-decoder
`Transformer` with `encode`/`decode` (transformer), the analytic FLOP count (flops),
decode-time copies of the decoder's weights in the layout a decode step multiplies fastest
(decode_weights) and their int8 form (quantize).
It sees arrays and a config only: no files, tokenizers or training state.

Imports from: transformer.common.
"""

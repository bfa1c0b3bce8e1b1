"""The network: `ModelConfig` (config), dense/embedding/norm/feed-forward layers (layers),
multi-head attention with its KV cache (attention), the positional schemes as classes chosen
by name (position_schemes) and their formulas (position), padding,
causal and packed-segment masks (masks), dropout (dropout), the encoder-decoder
`Transformer` with `encode`/`decode` (transformer), the analytic FLOP count (flops),
what the linear layers hold, chosen at construction: trainable parameters or decode-time
copies in the layout a decode step multiplies fastest (projection_policy), the network a
translator decodes with, built from the trained one's parameters (decoding_network), and
the int8 products (quantize).
It sees arrays and a config only: no files, tokenizers or training state.

Imports from: transformer.common.
"""

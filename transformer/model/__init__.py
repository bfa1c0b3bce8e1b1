"""The network: `ModelConfig` (config), dense/embedding/feed-forward layers (layers),
multi-head attention with its KV cache (attention), the variation points as classes in
registries, chosen by name: positional schemes (position_schemes, their formulas in
position), activations (activations), normalisations and their placement (normalization);
padding, causal and packed-segment masks (masks), dropout (dropout), the encoder-decoder
`Transformer` with `encode`/`decode` (transformer), the analytic FLOP count (flops),
what the linear layers hold, chosen at construction: trainable parameters or decode-time
copies in the layout a decode step multiplies fastest (projection_policy), the network a
translator decodes with, built from the trained one's parameters (decoding_network), the
int8 products (quantize) and several networks decoding as one (ensemble).
It sees arrays and a config only: no files, tokenizers or training state.

Imports from: transformer.common.
"""

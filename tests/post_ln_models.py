"""Tiny random Post-LN models the weight-mapping tests (Hugging Face Marian, CTranslate2)
share: every parameter moved away from its init, so a transposed, unpermuted or misplaced
weight cannot pass, and padded batches of random word ids."""

from __future__ import annotations

import numpy as np

from transformer.common.special_ids import FIRST_WORD_ID

VOCAB = 50


def post_ln_config(**overrides):
    from transformer.model.config import ModelConfig

    values = dict(
        vocab_size=VOCAB,
        d_model=32,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=64,
        max_len=32,
        dropout_rate=0.0,
        norm_position="post",
    )
    return ModelConfig(**{**values, **overrides})


def random_model(cfg, seed=0):
    """(graphdef, params) of cfg with every parameter moved by N(0, 0.1^2) noise: biases and
    norm offsets non-zero, norm scales away from one."""
    import jax
    from flax import nnx

    from transformer.model.transformer import Transformer

    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(seed)), nnx.Param)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    noisy = [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return graphdef, jax.tree.unflatten(tree, noisy)


def padded_rows(rng, lengths, *, first=None, end=None) -> np.ndarray:
    """[len(lengths), max length] int32 random word ids, PAD after each row's length; `first`
    replaces column 0 and `end` each row's last token."""
    rows = np.zeros((len(lengths), max(lengths)), np.int32)
    for r, n in enumerate(lengths):
        rows[r, :n] = rng.integers(FIRST_WORD_ID, VOCAB, n)
        if first is not None:
            rows[r, 0] = first
        if end is not None:
            rows[r, n - 1] = end
    return rows

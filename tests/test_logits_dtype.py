"""model.logits_dtype: the tied output projection's product in the compute dtype with float32
sums. In a float32 model it changes nothing; in a bfloat16 model the logits move by bfloat16
rounding of the operands only (float32 sums, float32 logits); an untied output is refused."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import tiny_model_config
from transformer import Transformer

SRC = jnp.asarray([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]], jnp.int32)
TGT = jnp.asarray([[2, 11, 12, 13], [2, 14, 15, 0]], jnp.int32)


def logits(**overrides) -> np.ndarray:
    model = Transformer(tiny_model_config(d_model=64, **overrides), rngs=nnx.Rngs(0))
    return np.asarray(model(SRC, TGT))


def test_a_float32_model_is_unchanged_bit_for_bit():
    np.testing.assert_array_equal(logits(logits_dtype="compute"), logits())


def test_a_bfloat16_model_moves_by_bfloat16_rounding_only():
    """Against the float32 projection of the same bfloat16 network: the logits are float32,
    differ (the setting is not ignored), and by less than 5% of the largest logit (operands
    rounded to 8 significant bits, 2^-8 relative each, summed over d = 64 terms in float32)."""
    base = logits(dtype="bfloat16")
    fast = logits(dtype="bfloat16", logits_dtype="compute")
    assert fast.dtype == np.float32 and not np.array_equal(fast, base)
    assert np.max(np.abs(fast - base)) < 0.05 * np.max(np.abs(base))


def test_an_untied_output_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="set tie_output=True or logits_dtype='float32'"):
        tiny_model_config(tie_output=False, share_embeddings=False, logits_dtype="compute")

"""KERPLE's logarithmic attention bias with one learned slope per head:
model.position = "kerple_log"."""

import jax
import jax.numpy as jnp
from flax import nnx

from transformer.model.position_schemes import SCHEMES, PositionScheme


@SCHEMES.register("kerple_log")
class KerpleLog(PositionScheme):
    """bias[h, i, j] = -softplus(w_h) * log(1 + |i - j|) (Chi et al., 2022, the logarithmic
    kernel with its inner scale fixed at 1): like ALiBi a penalty growing with distance, but
    logarithmically, and each head learns how steep its own is. No length limit."""

    def __init__(self, cfg, *, causal: bool, rngs: nnx.Rngs):
        # softplus(0) = log 2: every head starts with the same gentle slope; softplus keeps
        # the slope positive whatever the weight becomes.
        self.slope_weight = nnx.Param(jnp.zeros((cfg.num_heads,), jnp.float32))  # [H]

    def bias(self, q_positions, k_positions):
        """q [B, Tq], k [B, Tk] -> [B, H, Tq, Tk]."""
        distance = jnp.abs(q_positions[:, :, None] - k_positions[:, None, :])  # [B, Tq, Tk]
        slopes = jax.nn.softplus(self.slope_weight[...])  # [H]
        return -slopes[None, :, None, None] * jnp.log1p(distance.astype(jnp.float32))[:, None]

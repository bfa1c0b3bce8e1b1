"""Min-p sampling: decode.filters = "min_p=0.1"."""

import math

import jax.numpy as jnp

from transformer.inference.filters import FILTERS, NEG_INF, Filter


@FILTERS.register("min_p")
class MinP(Filter):
    """Keeps the tokens whose probability is at least p times the most likely one's (Nguyen
    et al., 2024): p = 0 keeps every token, p = 1 only the most likely ones.

    The rule reads only the best finite entry, which the candidate path keeps, so both paths
    of a chain keep the same tokens; it never drops the best token, so greedy and beam
    search skip it (`sampling_only`).
    """

    sampling_only = True

    def __init__(self, p: float):
        if not 0 <= p <= 1:
            raise ValueError(f"min_p needs p in [0, 1], got {p}")
        self.p = float(p)

    def __call__(self, logits, ids, step):
        if self.p == 0:
            return logits
        best = jnp.max(logits, axis=-1, keepdims=True)  # [..., 1]
        # p_i >= p * p_best  <=>  logit_i >= logit_best + log p (the softmax's sum cancels)
        return jnp.where(logits >= best + math.log(self.p), logits, NEG_INF)

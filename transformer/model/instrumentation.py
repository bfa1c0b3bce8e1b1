"""What analysis a model is built for: `Instrumentation`, chosen at construction.

- capture_attention: every attention module sows its probabilities [B, H, T, S] as
  nnx.Intermediate 'probabilities', which `nnx.capture` collects (research/attention_stats);
- head_masks: every attention module holds a `HeadMask` [H] of ones that multiplies each
  head's output; analysis writes 0 into it to silence a head (research/head_masking). The
  masks are state, so one compiled program serves every mask set.

The default builds neither, so training and decoding trace neither. A model is never switched
into or out of these after it is built.
"""

from __future__ import annotations

import dataclasses

from flax import nnx


@dataclasses.dataclass(frozen=True)
class Instrumentation:
    capture_attention: bool = False
    head_masks: bool = False


PLAIN = Instrumentation()


class HeadMask(nnx.Variable):
    """[H] of 0/1 multiplying each head's output (head-pruning studies)."""

"""Subword regularisation (Kudo 2018): training pairs segmented afresh each time they are drawn.

With ``data.spm_alpha > 0`` the training stream draws a new segmentation of both sides of a
pair every time it draws the pair (`SegmentSampler`, SentencePiece's distributions): for
unigram vocabularies one of the ``data.spm_nbest`` best segmentations (-1: any) with
probability proportional to P(segmentation) ** alpha, for BPE vocabularies BPE-dropout with
drop probability alpha. Validation, test and decoding keep the best segmentation;
``data.spm_alpha = 0`` builds the stream without any of this.

* A draw starts from the cached best ids (the split is not read again). A side whose best
  ids hold an unknown or byte piece keeps them (its text is not the pieces' concatenation).
* A draw depends only on (train.seed, epoch, example index, side), which seed its own
  `random.Random`, so a restored iterator state gives exactly the batches an uninterrupted
  run gets, in any process.
* A drawn side longer than ``data.max_source_len`` / ``max_target_len`` falls back to its best
  segmentation, which fits (pairs are kept or dropped by their best lengths): the kept pairs
  and the epochs are those of the stream without sampling, and no text is cut.

The stream then carries positions in the shuffled, repeated sequence of example ids (a
position names an epoch and an example) instead of example ids, and each iterator keeps the
segmentations its planner has looked at in a `Draws` until a plan places them.
"""

from __future__ import annotations

import math
import random

import numpy as np

from transformer.common.errors import UserError
from transformer.common.special_ids import EOS_ID
from transformer.data.segment_sampler import SegmentSampler
from transformer.data.tokenized import TokenizedPairs
from transformer.data.tokenizer import Tokenizer

_MASK64 = (1 << 64) - 1


def check_subword_sampling(data_config) -> None:
    """data.spm_alpha and data.spm_nbest; `UserError` names the key and the fix."""
    alpha, nbest = data_config.spm_alpha, data_config.spm_nbest
    number = isinstance(alpha, (int, float)) and not isinstance(alpha, bool)
    if not number or not math.isfinite(alpha) or alpha < 0:
        raise UserError(
            f"data.spm_alpha={alpha!r} must be a number >= 0 (0: no subword sampling; "
            "0.1-0.5 are usual)"
        )
    if data_config.vocab_type == "bpe" and alpha > 1:
        raise UserError(
            f"data.spm_alpha={alpha} is BPE-dropout's drop probability with "
            "data.vocab_type='bpe'; use a value in [0, 1], e.g. 0.1"
        )
    if isinstance(nbest, bool) or not isinstance(nbest, int) or not (nbest == -1 or nbest >= 2):
        raise UserError(
            f"data.spm_nbest={nbest!r} must be -1 (sample from every segmentation) or an "
            "integer >= 2 (from the n best); to turn sampling off set data.spm_alpha=0"
        )


def sampling_on(data_config) -> bool:
    return data_config.spm_alpha > 0


def stream_position(position: int, _example: int) -> int:
    """The stream item when sampling: its position (a Grain ``map_with_index`` function)."""
    return position


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a cheap bijection of 64-bit ints that spreads every input bit."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def draw_seed(*parts: int) -> int:
    """A 64-bit seed from non-negative ints (SplitMix64 over the parts)."""
    h = 0
    for p in parts:
        h = _mix64(h ^ (p & _MASK64))
    return h


class SubwordSampler:
    """The segmentations of stream position ``k``: a pure function of ``k`` and the settings.

    Args:
      tokens: the training split's best segmentations (EOS appended).
      example_ids: position -> example index (the shuffled, repeated Grain MapDataset).
      num_kept: example ids per epoch.
      data_config: ``config.data`` (spm_alpha, spm_nbest, max_source_len, max_target_len).
      seed: the stream's seed (``train.seed``).
    """

    def __init__(
        self,
        tokens: TokenizedPairs,
        example_ids,
        num_kept: int,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        data_config,
        seed: int,
    ):
        self.example_ids = example_ids
        self.num_kept = int(num_kept)
        self.seed = int(seed)
        alpha, nbest = float(data_config.spm_alpha), int(data_config.spm_nbest)
        self.settings = [alpha, nbest]  # what a saved iterator state must have been drawn with
        src = SegmentSampler(src_tok, alpha, nbest)
        tgt = src if tgt_tok is src_tok else SegmentSampler(tgt_tok, alpha, nbest)
        self.sides = (
            (src, tokens.src, int(data_config.max_source_len)),
            (tgt, tokens.tgt, int(data_config.max_target_len)),
        )

    def draw(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source ids, target ids)``, EOS appended, of stream position ``position``."""
        example = int(self.example_ids[position])
        epoch = position // self.num_kept
        return tuple(
            self._side(side, example, random.Random(draw_seed(self.seed, epoch, example, s)))
            for s, side in enumerate(self.sides)
        )

    def _side(self, side, example: int, rng: random.Random) -> np.ndarray:
        sampler, best_of, limit = side
        best = best_of(example)
        ids = sampler.sample(best[:-1].tolist(), rng)
        if ids is None or len(ids) >= limit:  # with EOS over the limit: the best one fits
            return best
        return np.array([*ids, EOS_ID], dtype=best.dtype)


class Draws:
    """One iterator's segmentations by stream position: drawn when the planner first asks for
    a length, handed on with the plan that places them, then forgotten."""

    def __init__(self, sampler: SubwordSampler):
        self._sampler = sampler
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.src_lengths = _Lengths(self, 0)
        self.tgt_lengths = _Lengths(self, 1)

    def get(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        pair = self._cache.get(position)
        if pair is None:
            pair = self._cache[position] = self._sampler.draw(position)
        return pair

    def attach(self, plan: dict) -> dict:
        """``plan`` with ``'tokens'``: position -> (source ids, target ids) of its rows."""
        tokens = {k: self.get(k) for row in plan["ids"] for k in row}
        for k in tokens:
            self._cache.pop(k, None)
        return {**plan, "tokens": tokens}


class _Lengths:
    """``lengths[position]`` of one side, as `BatchPlanner` indexes its length arrays."""

    def __init__(self, draws: Draws, side: int):
        self._draws = draws
        self._side = side

    def __getitem__(self, position: int) -> int:
        return len(self._draws.get(int(position))[self._side])

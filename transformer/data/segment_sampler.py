"""SentencePiece's subword sampling, re-implemented on a generator the caller seeds.

SentencePiece's own sampler (``encode(..., enable_sampling=True)``) is not reproducible across
processes: seeded alike, sentencepiece 0.2.3 draws differently in every new process, so a
resumed run would not see the batches an uninterrupted one sees. `SegmentSampler` draws from
the same distributions with a `random.Random` the caller seeds, from a model's pieces and
scores:

* unigram, ``nbest_size = -1``: forward-filtering backward-sampling over the lattice of every
  segmentation into vocabulary pieces, P(segmentation) ** alpha (SentencePiece's
  ``Lattice::Sample``);
* unigram, ``nbest_size > 1``: SentencePiece's (deterministic) n best, one drawn with
  probability proportional to exp(alpha * score);
* BPE: BPE-dropout, merges applied best first as in SentencePiece's BPE encoder, each skipped
  with probability alpha.

The input is a best segmentation (the ids of the training cache): its pieces concatenated are
SentencePiece's normalized text (whitespace as U+2581), so nothing is normalized again and
every draw spells the same text. Models with user-defined or unused pieces are refused.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence

from sentencepiece import sentencepiece_model_pb2 as model_pb2

from transformer.common.errors import UserError
from transformer.data.tokenizer import Tokenizer

_PIECE = model_pb2.ModelProto.SentencePiece
_UNIGRAM, _BPE = model_pb2.TrainerSpec.UNIGRAM, model_pb2.TrainerSpec.BPE
_UNK_PENALTY = 10.0  # SentencePiece's unigram lattice: an unknown character scores min - 10


class SegmentSampler:
    """Draws segmentations of one model's best segmentations (see the module docstring).

    ``sample(best, rng)`` returns piece ids spelling what ``best`` spells, or None when
    ``best`` holds a piece that is not a plain vocabulary piece (unknown, byte, control: its
    text is not the pieces' concatenation) or the draw would hold an unknown piece (a
    character with no piece of its own): such a side keeps its best segmentation.
    """

    def __init__(self, tokenizer: Tokenizer, alpha: float, nbest_size: int):
        model = model_pb2.ModelProto()
        model.ParseFromString(tokenizer.model_proto)
        where = tokenizer.path or "the SentencePiece model"
        self.kind = model.trainer_spec.model_type
        if self.kind not in (_UNIGRAM, _BPE):
            raise UserError(
                f"{where} is not a unigram or BPE model, which data.spm_alpha > 0 needs; set "
                "data.spm_alpha=0"
            )
        odd = [p.piece for p in model.pieces if p.type in (_PIECE.USER_DEFINED, _PIECE.UNUSED)]
        if odd:
            raise UserError(
                f"{where} has user-defined or unused pieces ({', '.join(odd[:3])}), which "
                "subword sampling does not handle; set data.spm_alpha=0"
            )
        normal = [(i, p) for i, p in enumerate(model.pieces) if p.type == _PIECE.NORMAL]
        self.piece_ids = {p.piece: i for i, p in normal}
        self.scores = [p.score for p in model.pieces]
        self.plain = [p.type == _PIECE.NORMAL for p in model.pieces]
        self.pieces = [p.piece for p in model.pieces]
        self.prefixes = {p.piece[:k] for _, p in normal for k in range(1, len(p.piece) + 1)}
        self.unk_score = min((p.score for _, p in normal), default=0.0) - _UNK_PENALTY
        self.unk_id = next(i for i, p in enumerate(model.pieces) if p.type == _PIECE.UNKNOWN)
        self.alpha = float(alpha)
        self.nbest_size = int(nbest_size)
        self.tokenizer = tokenizer

    def sample(self, best: Sequence[int], rng: random.Random) -> list[int] | None:
        if not all(self.plain[i] for i in best):
            return None
        surface = "".join(self.pieces[i] for i in best)
        if self.kind == _BPE:
            ids = self._bpe_dropout(surface, rng)
        elif self.nbest_size > 1:
            ids = self._from_nbest(best, rng)
        else:
            ids = self._from_lattice(surface, rng)
        return None if self.unk_id in ids else ids

    # -- unigram ----------------------------------------------------------------------

    def _lattice(self, surface: str) -> list[list[tuple[int, int, float]]]:
        """``ends[e]``: ``(begin, id, alpha * score)`` of every piece spanning [begin, e); an
        unknown-piece node where no one-character piece starts (as SentencePiece builds it)."""
        n, theta = len(surface), self.alpha
        ends: list[list[tuple[int, int, float]]] = [[] for _ in range(n + 1)]
        for b in range(n):
            single = False
            for e in range(b + 1, n + 1):
                sub = surface[b:e]
                if sub not in self.prefixes:
                    break
                i = self.piece_ids.get(sub)
                if i is not None:
                    ends[e].append((b, i, theta * self.scores[i]))
                    single = single or e == b + 1
            if not single:
                ends[b + 1].append((b, self.unk_id, theta * self.unk_score))
        return ends

    def _from_lattice(self, surface: str, rng: random.Random) -> list[int]:
        """Forward filtering (log-sum of every path to each position), backward sampling."""
        ends = self._lattice(surface)
        forward = [0.0] * len(ends)
        for e in range(1, len(ends)):
            forward[e] = _logsumexp([forward[b] + s for b, _, s in ends[e]])
        out, e = [], len(ends) - 1
        while e > 0:
            nodes = ends[e]
            weights = [math.exp(forward[b] + s - forward[e]) for b, _, s in nodes]
            b, i, _ = nodes[_choose(weights, rng)]
            out.append(i)
            e = b
        out.reverse()
        return out

    def _from_nbest(self, best: Sequence[int], rng: random.Random) -> list[int]:
        """SentencePiece's n best segmentations of the text, one drawn ~ exp(alpha * score)."""
        nbest = self.tokenizer.nbest_tokenize(self.tokenizer.text_of(best), self.nbest_size)
        logits = [self.alpha * sum(self.scores[i] for i in ids) for ids in nbest]
        top = max(logits)
        return nbest[_choose([math.exp(x - top) for x in logits], rng)]

    # -- BPE --------------------------------------------------------------------------

    def _bpe_dropout(self, surface: str, rng: random.Random) -> list[int]:
        """SentencePiece's BPE encoder: the best-scoring adjacent pair that is a piece merges
        first (the leftmost among equals); each merge is skipped with probability alpha."""
        symbols = list(surface)
        prev = list(range(-1, len(symbols) - 1))
        nxt = [*range(1, len(symbols)), -1]
        agenda: list[tuple[float, int, int, int]] = []

        def add_pair(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            i = self.piece_ids.get(symbols[left] + symbols[right])
            if i is not None:
                size = len(symbols[left]) + len(symbols[right])
                heapq.heappush(agenda, (-self.scores[i], left, right, size))

        for k in range(1, len(symbols)):
            add_pair(k - 1, k)
        while agenda:
            _, left, right, size = heapq.heappop(agenda)
            if not symbols[left] or not symbols[right]:
                continue
            if len(symbols[left]) + len(symbols[right]) != size:
                continue  # a neighbour merged since this pair was queued
            if rng.random() < self.alpha:
                continue
            symbols[left] += symbols[right]
            symbols[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            add_pair(prev[left], left)
            add_pair(left, nxt[left])
        return [self.piece_ids.get(s, self.unk_id) for s in symbols if s]


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _choose(weights: list[float], rng: random.Random) -> int:
    """An index drawn with probability proportional to ``weights``."""
    x = rng.random() * sum(weights)
    for k, w in enumerate(weights):
        x -= w
        if x < 0:
            return k
    return len(weights) - 1

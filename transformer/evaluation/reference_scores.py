"""Reference scoring (forced decoding, as fairseq's --score-reference): each reference's
log-probability under the model given its source, teacher forced without dropout.

The reference is tokenized like a training target (its pieces + EOS, cut to model.max_len),
so its log-probability is the sum over those tokens and the test perplexity is
exp(total NLL / total tokens), the figure the training log's validation `ppl` reports on the
validation split.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import numpy as np

from transformer.data import source_batch, tokenize_sources
from transformer.training.steps import sentence_log_probs


@dataclasses.dataclass(frozen=True)
class ReferenceScores:
    log_probs: list[float]  # per sentence, natural log, EOS included
    tokens: list[int]  # per sentence, EOS included
    truncated: int  # references cut to model.max_len tokens

    @property
    def nll_per_token(self) -> float:
        return -sum(self.log_probs) / sum(self.tokens)

    def summary(self) -> dict:
        return {
            "sentences": len(self.tokens),
            "tokens": int(sum(self.tokens)),
            "nll_per_token": self.nll_per_token,
            "perplexity": math.exp(self.nll_per_token),
            "truncated_references": self.truncated,
        }


@functools.lru_cache(maxsize=8)
def _compiled(graphdef):
    return jax.jit(functools.partial(sentence_log_probs, graphdef))


def score_ids(graphdef, params, src_ids, tgt_ids, *, batch_size: int, length_multiple: int = 8):
    """EOS-terminated source and target id lists -> ([n] log-probabilities, [n] tokens)."""
    log_probs, tokens = np.zeros(len(src_ids)), np.zeros(len(src_ids), np.int64)
    for start in range(0, len(src_ids), batch_size):
        rows = range(start, min(start + batch_size, len(src_ids)))
        batch = _pair_batch(
            [src_ids[i] for i in rows], [tgt_ids[i] for i in rows], batch_size, length_multiple
        )
        lp, count = jax.device_get(_compiled(graphdef)(params, batch))
        log_probs[start : rows.stop] = lp[: len(rows)]
        tokens[start : rows.stop] = count[: len(rows)]
    return log_probs.tolist(), tokens.tolist()


def _pair_batch(src_ids, tgt_ids, rows: int, multiple: int) -> dict:
    """One (source, target) pair per row, widths rounded up to `multiple` (fewer shapes)."""

    def width(lists):
        return -(-max(len(x) for x in lists) // multiple) * multiple

    batch = source_batch(src_ids, rows, width(src_ids))
    target = source_batch(tgt_ids, rows, width(tgt_ids))
    batch.update(
        tgt=target["src"],
        tgt_segments=target["src_segments"],
        tgt_positions=target["src_positions"],
    )
    return batch


def score_references(run, sources: Sequence[str], references: Sequence[str]) -> ReferenceScores:
    """Each reference's log-probability given its source, with a restored run."""
    max_len = run.model_cfg.max_len
    src_ids, _ = tokenize_sources(sources, run.data.source_tokenizer, max_len)
    tgt_ids, truncated = tokenize_sources(references, run.data.target_tokenizer, max_len)
    log_probs, tokens = score_ids(
        run.graphdef, run.params, src_ids, tgt_ids, batch_size=run.translator.settings.batch_size
    )
    return ReferenceScores(log_probs, tokens, truncated)

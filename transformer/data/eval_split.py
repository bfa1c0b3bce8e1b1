"""Evaluation splits: a whole split as fixed-shape batches, in order, nothing dropped.

`EvalSplit` encodes a split's sources and targets once (cutting sentences longer than
``max_len`` and counting them), fixes the batch widths for the whole split and serves global
batch ``k`` (examples ``[k * batch_size, (k + 1) * batch_size)``, the last one padded with
empty rows) as this process's share of its rows, together with the example index of every
row for matching hypotheses to references.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import grain
import numpy as np
from absl import logging

from transformer.data.layout import check_rows
from transformer.data.stream import empty_batch, fill_row
from transformer.data.text_splits import TextPairs
from transformer.data.tokenized import tokenize_sources
from transformer.data.tokenizer import Tokenizer


def _width(id_lists: list[list[int]], max_len: int, multiple: int) -> int:
    """The longest sequence rounded up to ``multiple``, at most ``max_len``."""
    longest = max((len(x) for x in id_lists), default=1)
    return min(max_len, -(-longest // multiple) * multiple)


class EvalSplit:
    """A whole split as fixed-shape batches, in order, nothing dropped.

    Global batch ``k`` holds examples ``[k * batch_size, (k + 1) * batch_size)``; the last
    one is padded with empty rows (all-zero segments). This process gets rows
    ``[shard_index * batch_size / shard_count, ...)`` of each global batch. Sentences longer
    than ``max_len`` tokens (EOS included) are cut to ``max_len - 1`` tokens + EOS and
    counted (``num_truncated_sources`` / ``num_truncated_targets``). Widths are the longest
    (cut) sentence rounded up to a multiple of 8, at most ``max_len``: fixed for the split.

    Attributes:
      name: the split's description.
      sources, targets: the raw texts (references for BLEU), indexed like the split.
      indices: ``np.arange(len(self.sources))``, the example indices in the split.
      line_numbers: 1-based line numbers in the corpus files (local corpora) or None.
      batch_size: global rows per batch; ``rows``: this process's rows per batch.
    """

    def __init__(
        self,
        pairs: TextPairs | Sequence[tuple[str, str]],
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        *,
        batch_size: int,
        max_len: int,
        max_sentences: int | None = None,
        shard_index: int = 0,
        shard_count: int = 1,
        row_divisor: int = 1,
        length_multiple: int = 8,
    ):
        check_rows(batch_size, row_divisor, "eval batch size (decode.batch_size)")
        n = len(pairs) if max_sentences is None else min(len(pairs), int(max_sentences))
        texts = pairs.get_many(range(n)) if hasattr(pairs, "get_many") else list(pairs[:n])
        self.name = getattr(pairs, "name", "eval")
        self.sources = [s for s, _ in texts]
        self.targets = [t for _, t in texts]
        self.indices = np.arange(n)
        self.line_numbers = (
            pairs.line_numbers(range(n)) if hasattr(pairs, "line_numbers") and n else None
        )
        self.batch_size = batch_size
        self.rows = batch_size // shard_count
        self.shard_index = shard_index
        self.src_ids, self.num_truncated_sources = tokenize_sources(self.sources, src_tok, max_len)
        self.tgt_ids, self.num_truncated_targets = tokenize_sources(self.targets, tgt_tok, max_len)
        if self.num_truncated_sources or self.num_truncated_targets:
            logging.warning(
                "%s: truncated %d of %d sources and %d targets longer than max_len=%d tokens",
                self.name,
                self.num_truncated_sources,
                n,
                self.num_truncated_targets,
                max_len,
            )
        self.src_len = _width(self.src_ids, max_len, length_multiple)
        self.tgt_len = _width(self.tgt_ids, max_len, length_multiple)
        self.num_batches = -(-n // batch_size)
        self.dataset = grain.MapDataset.range(self.num_batches).map(self.batch)

    def __len__(self) -> int:
        return self.num_batches

    def batch_indices(self, k: int) -> np.ndarray:
        """Example index of each of this process's rows in batch ``k`` (-1 = padding row)."""
        start = k * self.batch_size + self.shard_index * self.rows
        idx = np.arange(start, start + self.rows)
        return np.where(idx < len(self.sources), idx, -1)

    def batch(self, k: int) -> dict[str, np.ndarray]:
        """This process's part of global batch ``k``."""
        if not 0 <= k < self.num_batches:
            raise IndexError(f"batch {k} out of range ({self.num_batches} batches)")
        out = empty_batch(self.rows, self.src_len, self.tgt_len)
        for r, i in enumerate(self.batch_indices(k)):
            if i < 0:
                break
            fill_row(out["src"], out["src_segments"], out["src_positions"], r, [self.src_ids[i]])
            fill_row(out["tgt"], out["tgt_segments"], out["tgt_positions"], r, [self.tgt_ids[i]])
        return out

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.dataset)

    def batches_with_indices(self) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        """Yields ``(batch, example_index_per_row)`` (-1 marks padding rows)."""
        for k in range(self.num_batches):
            yield self.batch(k), self.batch_indices(k)

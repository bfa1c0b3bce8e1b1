"""The data side of a run: `make_datasets` and the `DataBundle` it returns.

The bundle holds the tokenizers, the training stream (the train split tokenized once and
cached in ``<workdir>/data_cache``, pairs longer than ``data.max_source_len`` /
``max_target_len`` dropped, segmented afresh at every draw with ``data.spm_alpha > 0`` as in
`sampling`, batched as in `stream`) and the eval splits. Typical use from a
training loop::

    data = make_datasets(config, workdir, row_multiple=jax.device_count(),
                         shard_index=jax.process_index(), shard_count=jax.process_count())
    train_iter = data.train_iterator()
    if restored_state is not None:
        train_iter.set_state(restored_state)
    for step in range(...):
        batch = next(train_iter)              # this process's rows of the global batch
        ...
        save(..., data_state=train_iter.get_state())
    valid = data.eval_split("valid")
    for batch, rows in valid.batches_with_indices():  # rows: example index per row, -1 = pad
        ...
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any

import grain
import numpy as np
from absl import logging

from transformer.common.errors import UserError
from transformer.data.eval_split import EvalSplit
from transformer.data.layout import make_layout
from transformer.data.sampling import (
    SubwordSampler,
    check_subword_sampling,
    sampling_on,
    stream_position,
)
from transformer.data.stream import batch_stream
from transformer.data.text_splits import TextPairs, load_split
from transformer.data.tokenized import TokenizedPairs, tokenize_pairs_cached
from transformer.data.tokenizer import build_tokenizers

CACHE_DIR = "data_cache"


@dataclasses.dataclass(frozen=True)
class TrainStats:
    num_pairs: int  # pairs in the train split (after the empty lines skipped at preparation)
    num_kept: int  # pairs in the training stream
    num_dropped_long: int  # longer than max_source_len / max_target_len
    num_dropped_empty: int  # an empty side (TFDS datasets; local corpora skip them earlier)
    num_empty_lines_skipped: int  # local corpora: line pairs skipped at preparation


class DataBundle:
    """Everything a run needs from the data: tokenizers, training stream, eval splits.

    Build it with `make_datasets`. Training data is tokenized on first use (so eval and
    decode runs never touch the train split once the vocabulary exists).

    Attributes:
      config: the full config; ``source_tokenizer`` / ``target_tokenizer``: the
      `Tokenizer` s (the same object when the vocabulary is shared); ``layout``: the
      `BatchLayout` of training batches (``layout.shapes()`` lists the global shapes);
      ``row_multiple``, ``shard_index``, ``shard_count``: as given to `make_datasets`.
    """

    def __init__(
        self, config, workdir, src_tok, tgt_tok, layout, *, row_multiple, shard_index, shard_count
    ):
        self.config = config
        self.workdir = workdir
        self.source_tokenizer = src_tok
        self.target_tokenizer = tgt_tok
        self.layout = layout
        self.row_multiple = row_multiple
        self.shard_index = shard_index
        self.shard_count = shard_count

    @functools.cached_property
    def train_pairs(self) -> TextPairs:
        return load_split(self.config.data, self.config.data.train_split, self.workdir)

    def fingerprint(self) -> dict:
        """What the run's data is, for its provenance: the vocabularies' fingerprints and a
        SHA-256 of the tokenized training split (its pairs' token ids in order)."""
        tokens = self.train_tokens
        digest = hashlib.sha256()
        for array in (tokens.src_offsets, tokens.src_flat, tokens.tgt_offsets, tokens.tgt_flat):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        return {
            "source_vocab": self.source_tokenizer.fingerprint,
            "target_vocab": self.target_tokenizer.fingerprint,
            "train_pairs": len(tokens),
            "train_tokens_sha256": digest.hexdigest(),
        }

    @functools.cached_property
    def train_tokens(self) -> TokenizedPairs:
        cache = os.path.join(self.workdir, CACHE_DIR) if self.workdir else None
        return tokenize_pairs_cached(
            self.train_pairs, self.source_tokenizer, self.target_tokenizer, cache
        )

    @functools.cached_property
    def _kept(self) -> tuple[np.ndarray, TrainStats]:
        tok = self.train_tokens
        d = self.config.data
        ls, lt = tok.src_lengths, tok.tgt_lengths
        nonempty = (ls > 1) & (lt > 1)  # a sentence is more than its EOS
        short = (ls <= d.max_source_len) & (lt <= d.max_target_len)
        kept = np.flatnonzero(nonempty & short)
        stats = TrainStats(
            num_pairs=len(tok),
            num_kept=int(kept.size),
            num_dropped_long=int(np.sum(nonempty & ~short)),
            num_dropped_empty=int(np.sum(~nonempty)),
            num_empty_lines_skipped=int(getattr(self.train_pairs, "num_empty_skipped", 0)),
        )
        logging.info(
            "dropped %d of %d training pairs longer than max_source_len=%d or "
            "max_target_len=%d tokens (EOS included)",
            stats.num_dropped_long,
            stats.num_pairs,
            d.max_source_len,
            d.max_target_len,
        )
        if stats.num_dropped_empty:
            logging.info("dropped %d training pairs with an empty side", stats.num_dropped_empty)
        if not kept.size:
            raise UserError(
                f"no training pair of {self.train_pairs.name} fits data.max_source_len="
                f"{d.max_source_len} and max_target_len={d.max_target_len}; raise them"
            )
        return kept, stats

    @property
    def train_stats(self) -> TrainStats:
        return self._kept[1]

    def train_dataset(self, num_epochs: int | None = None) -> grain.IterDataset:
        """The training stream as a Grain IterDataset (``num_epochs=None``: forever; a
        finite stream ends with partial batches padded with empty rows). With
        ``data.spm_alpha > 0`` each draw of a pair is segmented afresh (`sampling`)."""
        kept, _ = self._kept
        seed = int(self.config.train.seed) % 2**32
        ids = grain.MapDataset.source(kept).shuffle(seed=seed).repeat(num_epochs)
        sampler = self._sampler(ids, kept.size, seed)
        if sampler is not None:
            ids = ids.map_with_index(stream_position)
        stream = ids.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        layout = self.layout
        check = {
            "layout": [
                layout.batching,
                layout.max_source_len,
                layout.max_target_len,
                layout.batch_rows,
                layout.batch_tokens,
                layout.row_divisor,
            ],
            "num_kept": int(kept.size),
            "seed": seed,
            "num_epochs": num_epochs,
        }
        if sampler is not None:  # absent otherwise: states saved before sampling existed load
            check["spm_sampling"] = sampler.settings
        ds = batch_stream(
            stream,
            self.train_tokens,
            layout,
            shard_index=self.shard_index,
            shard_count=self.shard_count,
            check=check,
            sampler=sampler,
        )
        workers = int(self.config.data.num_workers)
        if workers > 0:
            ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=workers)
        return ds

    def _sampler(self, ids: grain.MapDataset, num_kept: int, seed: int) -> SubwordSampler | None:
        if not sampling_on(self.config.data):
            return None
        tokens, d = self.train_tokens, self.config.data
        src_tok, tgt_tok = self.source_tokenizer, self.target_tokenizer
        return SubwordSampler(tokens, ids, num_kept, src_tok, tgt_tok, d, seed)

    def train_iterator(self, num_epochs: int | None = None) -> grain.DatasetIterator:
        """An iterator of this process's training batches with ``get_state``/``set_state``
        (JSON-serialisable state; restoring it continues with exactly the next batch)."""
        return iter(self.train_dataset(num_epochs))

    def split_name(self, which: str) -> str:
        """'train' | 'valid' | 'test' -> the configured split name."""
        d = self.config.data
        return {"train": d.train_split, "valid": d.valid_split, "test": d.test_split}.get(
            which, which
        )

    def eval_split(
        self,
        split: str = "valid",
        *,
        batch_size: int | None = None,
        max_len: int | None = None,
        max_sentences: int | None = None,
    ) -> EvalSplit:
        """A whole split as fixed-shape, in-order eval batches (see `EvalSplit`).

        ``split``: 'valid', 'test', 'train' (the configured names) or any split name;
        ``batch_size``: global rows, default ``decode.batch_size``; ``max_len``: default
        ``model.max_len``; ``max_sentences``: only the first N pairs (e.g. for BLEU).
        """
        pairs = load_split(self.config.data, self.split_name(split), self.workdir)
        return EvalSplit(
            pairs,
            self.source_tokenizer,
            self.target_tokenizer,
            batch_size=int(batch_size or self.config.decode.batch_size),
            max_len=int(max_len or self.config.model.max_len),
            max_sentences=max_sentences,
            shard_index=self.shard_index,
            shard_count=self.shard_count,
            row_divisor=self.layout.row_divisor,
        )


def make_datasets(
    config,
    workdir: str,
    *,
    row_multiple: int = 1,
    shard_index: int = 0,
    shard_count: int = 1,
) -> DataBundle:
    """Builds the data side of a run.

    Args:
      config: the full config (sections ``data``, ``train``, ``model``, ``decode``).
      workdir: the run directory: ``vocab/`` (tokenizers), ``tfds/`` (prepared datasets,
        unless ``data.data_dir``), ``data_cache/`` (tokenized training split),
        ``synthetic_corpus/``.
      row_multiple: the total device count; every global batch's row count must be a
        multiple of it (and of ``shard_count``), else `UserError`.
      shard_index, shard_count: this process's index and the process count
        (``jax.process_index()``, ``jax.process_count()``); each process gets its
        ``1/shard_count`` of every global batch's rows.

    Returns:
      A `DataBundle`: ``.source_tokenizer``, ``.target_tokenizer``, ``.train_iterator()``,
      ``.train_stats``, ``.eval_split('valid' | 'test', ...)``, ``.layout``.
    """
    if not isinstance(shard_count, int) or shard_count < 1:
        raise ValueError(f"shard_count must be a positive int, got {shard_count!r}")
    if not isinstance(shard_index, int) or not 0 <= shard_index < shard_count:
        raise ValueError(f"shard_index must be in [0, {shard_count}), got {shard_index!r}")
    layout = make_layout(config, row_multiple, shard_count)
    d = config.data
    check_subword_sampling(d)
    train_pairs: list[Any] = []

    def load_train():
        if not train_pairs:
            train_pairs.append(load_split(d, d.train_split, workdir))
        return train_pairs[0]

    src_tok, tgt_tok = build_tokenizers(d, int(d.vocab_size), workdir, load_train)
    bundle = DataBundle(
        config,
        workdir,
        src_tok,
        tgt_tok,
        layout,
        row_multiple=row_multiple,
        shard_index=shard_index,
        shard_count=shard_count,
    )
    if train_pairs:
        bundle.__dict__["train_pairs"] = train_pairs[0]  # seed the cached_property
    return bundle

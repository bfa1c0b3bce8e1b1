"""The batch format and the shape rules of training batches.

Every batch is a dict of int32 numpy arrays with exactly the keys of `BATCH_KEYS`: ``src``
[B, S] and ``tgt`` [B, T] hold token ids, each sentence followed by EOS, 0 = padding (no
decoder inputs: the model shifts targets right itself, per segment); ``src_segments`` /
``tgt_segments`` number the sentences packed in a row 1, 2, 3, ... with 0 on padding
(unpacked rows: 1 on every real token); ``src_positions`` / ``tgt_positions`` count 0, 1,
2, ... restarting at each segment, 0 on padding. `make_layout` validates the batching
settings of a config into a `BatchLayout`: the batching mode (pack, bucket or pad), the
maximum lengths and the global row count of every batch shape.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from transformer.common.errors import UserError

BATCH_KEYS = ("src", "tgt", "src_segments", "tgt_segments", "src_positions", "tgt_positions")
BATCHING_MODES = ("pack", "bucket", "pad")
BUCKET_STEP = 8  # bucket boundaries are multiples of this (plus the max length itself)


def bucket_boundaries(max_source_len: int, max_target_len: int) -> list[int]:
    """Bucket lengths: multiples of `BUCKET_STEP` below the longer max length, then it."""
    top = max(max_source_len, max_target_len)
    return [*range(BUCKET_STEP, top, BUCKET_STEP), top]


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    """The shape rules of training batches (global rows; see `rows_per_process`)."""

    batching: str
    max_source_len: int
    max_target_len: int
    batch_rows: int  # pack / pad: global rows per batch; bucket without batch_tokens too
    batch_tokens: int  # bucket: rows per bucket = batch_tokens // bucket_len (rounded down)
    row_divisor: int  # every global row count is a multiple of this

    @functools.cached_property
    def buckets(self) -> list[int]:
        return bucket_boundaries(self.max_source_len, self.max_target_len)

    def rows(self, bucket: int) -> int:
        """Global rows of a batch of bucket length ``bucket`` (0 = pack/pad layout)."""
        if self.batching != "bucket" or not self.batch_tokens:
            return self.batch_rows
        rows = self.batch_tokens // bucket // self.row_divisor * self.row_divisor
        return rows

    def widths(self, bucket: int) -> tuple[int, int]:
        """``(S, T)`` of a batch of bucket length ``bucket``."""
        if self.batching != "bucket":
            return self.max_source_len, self.max_target_len
        return min(bucket, self.max_source_len), min(bucket, self.max_target_len)

    def shapes(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Every possible global ``(src_shape, tgt_shape)``."""
        keys = self.buckets if self.batching == "bucket" else [0]
        out = []
        for b in keys:
            s, t = self.widths(b)
            out.append(((self.rows(b), s), (self.rows(b), t)))
        return out


def check_rows(rows: int, divisor: int, what: str) -> None:
    """`UserError` unless ``rows`` is a positive multiple of ``divisor`` (``what`` names it)."""
    if not isinstance(rows, int) or rows <= 0:
        raise UserError(f"{what}={rows!r} must be a positive integer")
    if rows % divisor:
        raise UserError(
            f"{what}={rows} is not a multiple of {divisor} (the device count, and the process "
            f"count); use e.g. {max(divisor, rows // divisor * divisor)}"
        )


def _check_lengths(config) -> None:
    """data.batching and data.max_source_len / max_target_len (at most model.max_len)."""
    d = config.data
    if d.batching not in BATCHING_MODES:
        raise UserError(f"data.batching={d.batching!r} is not one of {', '.join(BATCHING_MODES)}")
    for name in ("max_source_len", "max_target_len"):
        value = d[name]
        if not isinstance(value, int) or value < 2:
            raise UserError(f"data.{name}={value!r} must be an integer >= 2")
        if value > config.model.max_len:
            raise UserError(
                f"data.{name}={value} exceeds model.max_len={config.model.max_len}; lower it "
                "or raise model.max_len"
            )


def _check_batch_tokens(tokens: int, batching: str) -> None:
    if tokens < 0:
        raise UserError(f"train.batch_tokens={tokens} must be >= 0")
    if tokens and batching != "bucket":
        raise UserError(
            f"train.batch_tokens={tokens} only applies to data.batching='bucket' (it is "
            f"{batching!r}); set train.batch_tokens=0 or data.batching='bucket'"
        )


def make_layout(config, row_multiple: int = 1, shard_count: int = 1) -> BatchLayout:
    """Validates the batching settings; `UserError` names the field to fix."""
    d, t = config.data, config.train
    _check_lengths(config)
    if not isinstance(row_multiple, int) or row_multiple < 1:
        raise ValueError(f"row_multiple must be a positive int, got {row_multiple!r}")
    divisor = math.lcm(row_multiple, shard_count)
    tokens = int(t.batch_tokens)
    _check_batch_tokens(tokens, d.batching)
    layout = BatchLayout(
        batching=d.batching,
        max_source_len=int(d.max_source_len),
        max_target_len=int(d.max_target_len),
        batch_rows=int(t.batch_size),
        batch_tokens=tokens,
        row_divisor=divisor,
    )
    if tokens:
        top = layout.buckets[-1]
        if layout.rows(top) == 0:
            raise UserError(
                f"train.batch_tokens={tokens} gives no rows for the longest bucket ({top} "
                f"tokens) once rounded down to a multiple of {divisor} (device/process "
                f"count); raise it to at least {divisor * top}"
            )
    else:
        check_rows(layout.batch_rows, divisor, "train.batch_size")
    return layout

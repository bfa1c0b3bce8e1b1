"""Tokenized text: whole splits as flat token arrays, and source batches for decoding.

`tokenize_pairs` encodes every ``(source, target)`` pair of a split (EOS appended to each
sentence) into a `TokenizedPairs` of flat arrays plus offsets, uint16 when both vocabularies
fit; `tokenize_pairs_cached` stores the result in a cache directory keyed by the data's and
the vocabularies' fingerprints, so the training split is tokenized once per run directory.
`tokenize_sources` and `source_batch` turn raw lines into the ``src`` batch of a decoding run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
from collections.abc import Sequence

import numpy as np
from absl import logging

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.common.special_ids import EOS_ID
from transformer.data.text_splits import TextPairs
from transformer.data.tokenizer import Tokenizer


@dataclasses.dataclass
class TokenizedPairs:
    """All pairs of a split as flat token arrays (EOS appended to every sentence).

    ``src_flat[src_offsets[i]:src_offsets[i + 1]]`` is the source of pair ``i``.
    """

    src_flat: np.ndarray
    src_offsets: np.ndarray
    tgt_flat: np.ndarray
    tgt_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def src(self, i: int) -> np.ndarray:
        return self.src_flat[self.src_offsets[i] : self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_flat[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]


def _flatten(id_lists: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(flat, offsets)`` of the id lists, each followed by EOS."""
    lengths = np.fromiter((len(x) + 1 for x in id_lists), dtype=np.int64, count=len(id_lists))
    offsets = np.zeros(len(id_lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.full(int(offsets[-1]), EOS_ID, dtype=dtype)
    for i, ids in enumerate(id_lists):
        flat[offsets[i] : offsets[i + 1] - 1] = ids
    return flat, offsets


def _join_chunks(parts: list[tuple[np.ndarray, np.ndarray]], dtype) -> tuple[np.ndarray, ...]:
    """One ``(flat, offsets)`` from the chunks' own, shifting each chunk's offsets."""
    if not parts:
        return np.zeros(0, dtype), np.zeros(1, np.int64)
    flats = [p[0] for p in parts]
    offsets = [parts[0][1]]
    base = parts[0][1][-1]
    for _, off in parts[1:]:
        offsets.append(off[1:] + base)
        base += off[-1]
    return np.concatenate(flats), np.concatenate(offsets)


def tokenize_pairs(
    pairs: Sequence[tuple[str, str]],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    *,
    chunk_size: int = 20_000,
) -> TokenizedPairs:
    """Tokenizes every pair (source and target, EOS appended) into flat arrays."""
    big = max(src_tok.vocab_size, tgt_tok.vocab_size) > np.iinfo(np.uint16).max
    dtype = np.int32 if big else np.uint16
    src_parts, tgt_parts = [], []
    if hasattr(pairs, "iter_chunks"):
        chunks = pairs.iter_chunks(chunk_size)
    else:
        chunks = (pairs[i : i + chunk_size] for i in range(0, len(pairs), chunk_size))
    for chunk in chunks:
        chunk = list(chunk)
        src_parts.append(_flatten(src_tok.tokenize_batch([p[0] for p in chunk]), dtype))
        tgt_parts.append(_flatten(tgt_tok.tokenize_batch([p[1] for p in chunk]), dtype))
    src_flat, src_off = _join_chunks(src_parts, dtype)
    tgt_flat, tgt_off = _join_chunks(tgt_parts, dtype)
    return TokenizedPairs(src_flat, src_off, tgt_flat, tgt_off)


def tokenize_pairs_cached(
    pairs: TextPairs, src_tok: Tokenizer, tgt_tok: Tokenizer, cache_dir: str | None
) -> TokenizedPairs:
    """`tokenize_pairs`, stored in ``cache_dir`` keyed by data and vocabulary fingerprints.
    A cache stored under one of the data's legacy fingerprints is renamed to the current key
    (a run tokenized by an older version keeps its cache, and keeps it once moved)."""
    if not cache_dir or not hasattr(pairs, "fingerprint"):
        return tokenize_pairs(pairs, src_tok, tgt_tok)
    path = _cache_path(cache_dir, pairs.fingerprint, pairs, src_tok, tgt_tok)
    for legacy in getattr(pairs, "legacy_fingerprints", ()):
        _adopt(_cache_path(cache_dir, legacy, pairs, src_tok, tgt_tok), path)
    if os.path.isfile(path):
        try:
            with np.load(path) as z:
                return TokenizedPairs(*(z[k] for k in ("sf", "so", "tf", "to")))
        except Exception as e:  # a truncated cache file: rebuild it
            logging.warning("ignoring unreadable token cache %s (%s)", path, e)
    tokens = tokenize_pairs(pairs, src_tok, tgt_tok)
    os.makedirs(cache_dir, exist_ok=True)
    buf = io.BytesIO()
    np.savez(
        buf, sf=tokens.src_flat, so=tokens.src_offsets, tf=tokens.tgt_flat, to=tokens.tgt_offsets
    )
    atomic_write(path, buf.getvalue())
    return tokens


def _adopt(old: str, path: str) -> None:
    """Renames the cache file `old` to `path` unless `path` exists (a process beside this
    one may have renamed it first)."""
    if os.path.isfile(path) or not os.path.isfile(old):
        return
    try:
        os.replace(old, path)
    except FileNotFoundError:
        pass


def _cache_path(cache_dir: str, fingerprint: str, pairs, src_tok, tgt_tok) -> str:
    key = "|".join((fingerprint, str(len(pairs)), src_tok.fingerprint, tgt_tok.fingerprint))
    return os.path.join(cache_dir, f"tokens-{hashlib.sha1(key.encode()).hexdigest()[:20]}.npz")


def tokenize_sources(
    lines: Sequence[str], tokenizer: Tokenizer, max_len: int
) -> tuple[list[list[int]], int]:
    """Source ids for decoding: ``tokenize(line) + [EOS]``, cut to ``max_len`` tokens.

    A line longer than ``max_len`` keeps its first ``max_len - 1`` tokens and the EOS.
    Returns ``(id_lists, num_truncated)``.
    """
    if max_len < 1:
        raise UserError(f"max_len={max_len} must be at least 1")
    out, truncated = [], 0
    for ids in tokenizer.tokenize_batch([line.strip() for line in lines]):
        if len(ids) + 1 > max_len:
            truncated += 1
            ids = ids[: max_len - 1]
        out.append([*ids, EOS_ID])
    return out, truncated


def source_batch(id_lists: Sequence[Sequence[int]], rows: int, length: int) -> dict:
    """``{'src', 'src_segments', 'src_positions'}`` [rows, length] for decoding; rows past
    ``len(id_lists)`` are empty (all zeros). Sequences must fit in ``length``."""
    if len(id_lists) > rows:
        raise ValueError(f"{len(id_lists)} sequences do not fit in {rows} rows")
    src = np.zeros((rows, length), np.int32)
    seg = np.zeros((rows, length), np.int32)
    pos = np.zeros((rows, length), np.int32)
    for r, ids in enumerate(id_lists):
        n = len(ids)
        if n > length:
            raise ValueError(f"sequence of {n} tokens does not fit in length {length}")
        src[r, :n] = ids
        seg[r, :n] = 1
        pos[r, :n] = np.arange(n)
    return {"src": src, "src_segments": seg, "src_positions": pos}

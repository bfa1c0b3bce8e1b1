"""Raw parallel text of one split: the `load_split` entry point and its `TextPairs`.

Three kinds of `data.name`: ``'parallel_text'`` (a directory ``data.path`` of line-aligned
``{split}.{lang}`` files, prepared by the `text_builder`), ``'synthetic'`` (the embedded
corpus of `transformer.data.synthetic`, written once as such files and then handled the same
way) and any other name, a TFDS translation dataset such as ``'wmt14_translate/de-en'``,
prepared with ``file_format='array_record'`` (``data.manual_dir`` / ``data.download_dir`` go
to TFDS) and read with ``as_data_source``, never through TensorFlow. `load_split` returns a
`TextPairs` (random access, ``len``) of ``(source_text, target_text)`` in the configured
direction (``data.reverse`` swaps it); bad data raises a one-line `UserError`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

from absl import logging

from transformer.common.errors import UserError
from transformer.data.text_builder import import_tfds, is_prepared, parallel_text_builder

PARALLEL_TEXT = "parallel_text"
SYNTHETIC = "synthetic"
# Split names that map onto each other when a dataset only has one of them.
_SPLIT_ALIASES = {"valid": ("validation", "dev"), "validation": ("valid", "dev")}


class TextPairs(Sequence):
    """Random-access ``(source_text, target_text)`` pairs of one split.

    Attributes:
      name: a description, e.g. ``'parallel_text:/data/corpus[valid] en->de'``.
      fingerprint: a string that changes when the underlying data changes (cache key); it
        names the prepared dataset, never where it lies, so a copied run keeps its caches.
      legacy_fingerprints: the keys older versions gave the same data (absolute paths), under
        which a run's existing caches are still found.
      num_empty_skipped: line pairs skipped at preparation because a side was empty (local
        corpora; 0 for TFDS datasets, whose empty pairs the training pipeline drops).
    """

    def __init__(
        self,
        data_source: Any,
        source_key: str,
        target_key: str,
        *,
        name: str,
        fingerprint: str,
        legacy_fingerprints: Sequence[str] = (),
        num_empty_skipped: int = 0,
        line_key: str | None = None,
    ):
        self._source = data_source
        self._src_key = source_key
        self._tgt_key = target_key
        self._line_key = line_key
        self.name = name
        self.fingerprint = fingerprint
        self.legacy_fingerprints = tuple(legacy_fingerprints)
        self.num_empty_skipped = num_empty_skipped

    def __len__(self) -> int:
        return len(self._source)

    def _pair(self, record) -> tuple[str, str]:
        return _text(record[self._src_key]), _text(record[self._tgt_key])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.get_many(range(*index.indices(len(self))))
        n = len(self)
        index = int(index)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {self.name} of length {n}")
        return self._pair(self._source[index])

    def get_many(self, indices) -> list[tuple[str, str]]:
        """Pairs at ``indices`` (one batched read)."""
        indices = [int(i) for i in indices]
        if not indices:
            return []
        return [self._pair(r) for r in self._source.__getitems__(indices)]

    def iter_chunks(self, chunk_size: int = 10_000) -> Iterator[list[tuple[str, str]]]:
        """Yields all pairs in order, ``chunk_size`` at a time."""
        for start in range(0, len(self), chunk_size):
            yield self.get_many(range(start, min(start + chunk_size, len(self))))

    def line_numbers(self, indices) -> list[int] | None:
        """1-based line numbers in the corpus files (local corpora only, else None)."""
        if self._line_key is None:
            return None
        indices = [int(i) for i in indices]
        return [int(r[self._line_key]) for r in self._source.__getitems__(indices)]

    def __repr__(self) -> str:
        return f"TextPairs({self.name}, {len(self)} pairs)"


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "item"):  # numpy scalar / 0-d array
        return _text(value.item())
    return str(value)


def data_dir_for(data_config, workdir: str | None) -> str:
    """The TFDS data dir: ``data.data_dir`` or ``<workdir>/tfds``."""
    if data_config.data_dir:
        return os.path.abspath(os.path.expanduser(data_config.data_dir))
    if not workdir:
        raise UserError("set data.data_dir or pass a workdir: prepared datasets are stored there")
    return os.path.join(os.path.abspath(os.path.expanduser(workdir)), "tfds")


def languages(data_config) -> tuple[str, str]:
    """``(source_lang, target_lang)`` after applying ``data.reverse``."""
    src, tgt = data_config.source_lang, data_config.target_lang
    return (tgt, src) if data_config.reverse else (src, tgt)


def synthetic_corpus_dir(data_config, workdir: str | None) -> str:
    """Writes the embedded synthetic corpus once (if needed); returns its directory."""
    params = {
        "num_train": int(data_config.synthetic_train_size),
        "num_eval": int(data_config.synthetic_eval_size),
        "seed": int(data_config.synthetic_seed),
    }
    if data_config.data_dir:
        tag = "n{num_train}_e{num_eval}_s{seed}".format(**params)
        out_dir = os.path.join(data_dir_for(data_config, workdir), "synthetic_corpus", tag)
    elif workdir:
        out_dir = os.path.join(os.path.abspath(os.path.expanduser(workdir)), "synthetic_corpus")
    else:
        raise UserError("data.name='synthetic' needs a workdir or data.data_dir to write into")
    marker = os.path.join(out_dir, "params.json")
    if os.path.isfile(marker):
        with open(marker) as f:
            if json.load(f) == params:
                return out_dir
    from transformer.data import synthetic  # noqa: PLC0415 (only needed here)

    tmp_dir = f"{out_dir}.tmp-{os.getpid()}"
    os.makedirs(tmp_dir, exist_ok=True)
    synthetic.write_corpus(tmp_dir, params["num_train"], params["num_eval"], params["seed"])
    with open(os.path.join(tmp_dir, "params.json"), "w") as f:
        json.dump(params, f)
    if os.path.isdir(out_dir):  # stale corpus with other parameters
        shutil.rmtree(out_dir)
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    try:
        os.rename(tmp_dir, out_dir)
    except OSError:  # another process won the race; its corpus is identical
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_dir


def _resolve_split(split: str, available: Sequence[str], where: str) -> str:
    """Maps a requested split onto the dataset's names ('valid' <-> 'validation')."""
    base, bracket, rest = split.partition("[")
    if base in available:
        return split
    for alias in _SPLIT_ALIASES.get(base, ()):
        if alias in available:
            return alias + bracket + rest
    raise UserError(
        f"{where} has no split {base!r}; available splits: {', '.join(sorted(available))} "
        "(set data.train_split / valid_split / test_split)"
    )


def _local_corpus_path(data_config, workdir) -> str:
    if data_config.name == SYNTHETIC:
        return synthetic_corpus_dir(data_config, workdir)
    return data_config.path


def load_split(data_config, split: str, workdir: str | None) -> TextPairs:
    """``(source_text, target_text)`` pairs of ``split`` for `data_config` (the ``data``
    section of the config), preparing the dataset first if needed.

    Args:
      data_config: ``config.data``.
      split: a split name such as ``'train'``, ``'valid'`` (also found as TFDS's
        ``'validation'``) or ``'test'``; TFDS slicing like ``'train[:1000]'`` works for
        TFDS datasets.
      workdir: the run's directory (prepared data goes to ``<workdir>/tfds`` unless
        ``data.data_dir`` is set).
    """
    data_dir = data_dir_for(data_config, workdir)
    src_lang, tgt_lang = languages(data_config)
    if data_config.name in (PARALLEL_TEXT, SYNTHETIC):
        path = _local_corpus_path(data_config, workdir)
        builder = parallel_text_builder(path, (src_lang, tgt_lang), data_dir)
        where = f"data.path={os.path.abspath(path)}"
        resolved = _resolve_split(split, list(builder.info.splits.keys()), where)
        empty = builder.info.metadata.get("empty_lines", {}).get(resolved.partition("[")[0], 0)
        if empty:
            logging.info(
                "%s split %s: skipped %d line pairs with an empty side", path, resolved, empty
            )
        source = builder.as_data_source(split=resolved)
        direction = f"{resolved}|{src_lang}->{tgt_lang}"
        return TextPairs(
            source,
            src_lang,
            tgt_lang,
            name=f"{data_config.name}:{os.path.abspath(path)}[{resolved}] {src_lang}->{tgt_lang}",
            fingerprint=f"{PARALLEL_TEXT}/{builder.builder_config.name}|{direction}",
            legacy_fingerprints=[f"{builder.data_dir}|{direction}"],
            num_empty_skipped=int(empty),
            line_key="line",
        )
    return _load_tfds_split(data_config, split, data_dir, src_lang, tgt_lang)


def _tfds_builder(data_config, data_dir: str):
    tfds = import_tfds()
    name = data_config.name
    try:  # the catalog's translation datasets (registered on import)
        import tensorflow_datasets.translate  # noqa: F401, PLC0415
    except Exception as e:  # noqa: BLE001 (optional: local builders work without it)
        logging.info("could not import tensorflow_datasets.translate: %s", e)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as e:  # DatasetNotFoundError, bad config name, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"data.name={name!r} is neither 'synthetic', 'parallel_text' nor a TFDS dataset "
            f"that can be built ({first}); check the name, e.g. 'wmt14_translate/de-en'"
        ) from None
    if not is_prepared(builder):
        download_config = tfds.download.DownloadConfig(manual_dir=data_config.manual_dir or None)
        logging.info("preparing TFDS dataset %s as ArrayRecord in %s", name, data_dir)
        try:
            builder.download_and_prepare(
                download_dir=data_config.download_dir or None,
                file_format="array_record",
                download_config=download_config,
            )
        except UserError:
            raise
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UserError(
                f"could not download and prepare TFDS dataset {name!r} into {data_dir}: "
                f"{type(e).__name__}: {first[:300]} (put manual downloads in data.manual_dir, "
                "or prepare it elsewhere and set data.data_dir)"
            ) from e
    file_format = getattr(builder.info, "file_format", None)
    fmt = getattr(file_format, "value", file_format)
    if fmt is not None and str(fmt) != "array_record":
        raise UserError(
            f"TFDS dataset {name!r} in {builder.data_dir} was prepared as {fmt}, but random "
            "access needs array_record: delete that directory or set data.data_dir to a new one"
        )
    return builder


def _load_tfds_split(data_config, split, data_dir, src_lang, tgt_lang) -> TextPairs:
    name = data_config.name
    builder = _tfds_builder(data_config, data_dir)
    features = builder.info.features
    keys = list(getattr(features, "languages", None) or features.keys())
    for lang, field in ((src_lang, "source_lang"), (tgt_lang, "target_lang")):
        if lang not in keys:
            raise UserError(
                f"TFDS dataset {name!r} has no language {lang!r} (data.{field}"
                f"{', after data.reverse' if data_config.reverse else ''}); "
                f"its languages: {', '.join(map(str, keys))}"
            )
    resolved = _resolve_split(split, list(builder.info.splits.keys()), f"TFDS dataset {name!r}")
    source = builder.as_data_source(split=resolved)
    direction = f"{resolved}|{src_lang}->{tgt_lang}"
    return TextPairs(
        source,
        src_lang,
        tgt_lang,
        name=f"{name}[{resolved}] {src_lang}->{tgt_lang}",
        fingerprint=f"{builder.info.full_name}|{direction}",
        legacy_fingerprints=[f"{builder.data_dir}|{builder.info.version}|{direction}"],
    )

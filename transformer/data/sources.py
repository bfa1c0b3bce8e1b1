"""Raw parallel text: TFDS builders prepared as ArrayRecord and read by random access.

Three kinds of `data.name`:

* ``'parallel_text'``: a directory (``data.path``) of line-aligned ``{split}.{lang}`` files,
  e.g. ``train.en``/``train.de``, ``valid.en``/``valid.de``. The `ParallelText` TFDS builder
  prepares every split that has both files into ``<data_dir>/parallel_text/<config>/``; the
  config name is derived from the absolute path, the language pair and the files' sizes and
  modification times, so two corpora never collide and changed files are prepared again.
* ``'synthetic'``: the embedded corpus (`transformer.data.synthetic`), written once as
  ``{split}.{lang}`` files and then handled exactly like ``'parallel_text'``.
* any other name: a TFDS translation dataset, e.g. ``'wmt14_translate/de-en'``, prepared with
  ``file_format='array_record'`` (``data.manual_dir`` / ``data.download_dir`` are passed to
  TFDS) and read with ``as_data_source`` -- never through TensorFlow.

The single entry point is `load_split`, which returns a `TextPairs` (random access, ``len``)
of ``(source_text, target_text)`` in the configured direction (``data.reverse`` swaps it).
Bad data raises `UserError` with a one-line message naming the file (and line).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from absl import logging

from transformer.common.errors import UserError

# TFDS is imported lazily (it takes about a second); see `_tfds()`.

PARALLEL_TEXT = "parallel_text"
SYNTHETIC = "synthetic"
# Split names that map onto each other when a dataset only has one of them.
_SPLIT_ALIASES = {"valid": ("validation", "dev"), "validation": ("valid", "dev")}
_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_LANG_RE = re.compile(r"^[A-Za-z0-9_\-]+$")


def _tfds():
    # TFDS (4.9.x) needs the `importlib_resources` backport to locate builder code; the
    # standard library's `importlib.resources` is the same API (Python >= 3.11).
    try:
        import importlib_resources  # noqa: F401, PLC0415
    except ImportError:
        import importlib.resources  # noqa: PLC0415

        sys.modules.setdefault("importlib_resources", importlib.resources)
    import tensorflow_datasets as tfds  # noqa: PLC0415 (lazy: slow import)

    return tfds


# --------------------------------------------------------------------------------------
# Reading and validating local {split}.{lang} files.
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The two aligned files of one split of a local corpus."""

    split: str
    files: dict[str, str]  # language -> absolute file path


def find_parallel_splits(path: str, languages: Sequence[str]) -> dict[str, SplitFiles]:
    """Returns ``{split: SplitFiles}`` for every ``{split}.{lang}`` pair in directory ``path``.

    Raises `UserError` if the directory is missing, if a split has the file of one language
    but not the other, or if no split has both files.
    """
    if not path:
        raise UserError(
            "data.name='parallel_text' needs data.path: set it to a directory of "
            f"{{split}}.{{lang}} files (e.g. train.{languages[0]}, train.{languages[1]})"
        )
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise UserError(
            f"data.path={path} is not a directory; it must hold aligned {{split}}.{{lang}} "
            f"files such as train.{languages[0]} and train.{languages[1]}"
        )
    by_split: dict[str, dict[str, str]] = {}
    for entry in sorted(os.listdir(path)):
        stem, dot, lang = entry.rpartition(".")
        if not dot or lang not in languages or not _SPLIT_NAME_RE.match(stem):
            continue
        full = os.path.join(path, entry)
        if os.path.isfile(full):
            by_split.setdefault(stem, {})[lang] = full
    splits = {}
    for split, files in by_split.items():
        missing = [lang for lang in languages if lang not in files]
        if missing:
            have = os.path.basename(next(iter(files.values())))
            want = os.path.join(path, f"{split}.{missing[0]}")
            raise UserError(
                f"{want} is missing: {have} exists, and every split needs one file per "
                f"language ({split}.{languages[0]} and {split}.{languages[1]})"
            )
        splits[split] = SplitFiles(split, files)
    if not splits:
        raise UserError(
            f"data.path={path} has no {{split}}.{{lang}} files for languages "
            f"{languages[0]}/{languages[1]}: expected e.g. train.{languages[0]} and "
            f"train.{languages[1]} (and valid.*, test.*)"
        )
    return splits


def _count_lines(filename: str) -> int:
    """Lines in a file; a last line without a trailing newline counts."""
    count = 0
    last = b"\n"
    with open(filename, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _decode_lines(filename: str) -> Iterator[str]:
    """Yields the stripped lines of a UTF-8 file; UserError names the first bad line."""
    with open(filename, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{filename}:{number}: invalid UTF-8 ({e.reason} at byte {e.start} of the "
                    "line); convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
                ) from None
            if number == 1:
                text = text.removeprefix("\ufeff")  # byte order mark
            yield text.strip()


def read_parallel_files(
    source_file: str, target_file: str
) -> Iterator[tuple[int, str, str] | tuple[None, int, int]]:
    """Yields ``(line_number, source, target)`` for every line pair where both sides are
    non-empty, then one final ``(None, num_lines, num_empty_skipped)``.

    Checks, before yielding anything, that both files are non-empty and have the same
    number of lines; checks UTF-8 line by line. All failures raise `UserError`.
    """
    counts = {}
    for filename in (source_file, target_file):
        if not os.path.isfile(filename):
            raise UserError(f"{filename} does not exist; it is needed for this split")
        if os.path.getsize(filename) == 0:
            raise UserError(f"{filename} is empty; give it one sentence per line")
        counts[filename] = _count_lines(filename)
    if counts[source_file] != counts[target_file]:
        raise UserError(
            f"{source_file} has {counts[source_file]} lines but {target_file} has "
            f"{counts[target_file]}; the two files must be line-aligned translations"
        )
    empty = 0
    number = 0
    for number, (src, tgt) in enumerate(
        zip(_decode_lines(source_file), _decode_lines(target_file), strict=True), start=1
    ):
        if not src or not tgt:
            empty += 1
            continue
        yield number, src, tgt
    if empty == number:
        raise UserError(
            f"{source_file} and {target_file} have no line where both sides are non-empty"
        )
    yield None, number, empty


def validate_parallel_files(source_file: str, target_file: str) -> dict[str, int]:
    """Reads both files completely; returns ``{'lines': n, 'empty': n_empty_skipped}``."""
    for line, *rest in read_parallel_files(source_file, target_file):
        if line is None:
            return {"lines": rest[0], "empty": rest[1]}
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------
# The ParallelText TFDS builder (defined lazily, so importing this module stays cheap).
# --------------------------------------------------------------------------------------

_PARALLEL_TEXT_BUILDER = None


def _parallel_text_builder_cls():
    """Returns the `ParallelText` builder class, defining (and registering) it once."""
    global _PARALLEL_TEXT_BUILDER
    if _PARALLEL_TEXT_BUILDER is not None:
        return _PARALLEL_TEXT_BUILDER
    tfds = _tfds()

    @dataclasses.dataclass(eq=False)
    class ParallelTextConfig(tfds.core.BuilderConfig):
        """One local corpus: its split files and the (sorted) language pair."""

        languages: tuple[str, ...] = ()
        split_files: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict, repr=False)
        stats: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict, repr=False)

    class ParallelText(tfds.core.GeneratorBasedBuilder):
        """Local line-aligned ``{split}.{lang}`` files as a TFDS dataset.

        Features: one Text feature per language, plus ``line`` (1-based line number in the
        files). Empty line pairs (either side empty) are skipped; their count per split is
        kept in ``info.metadata['empty_lines']``. Shuffling is disabled so records keep the
        file order.
        """

        VERSION = tfds.core.Version("1.0.0")
        RELEASE_NOTES = {"1.0.0": "Initial release."}
        BUILDER_CONFIGS = []

        def _info(self):
            features = {lang: tfds.features.Text() for lang in self.builder_config.languages}
            features["line"] = tfds.features.Scalar(dtype=np.int64)
            return self.dataset_info_from_configs(
                features=tfds.features.FeaturesDict(features),
                metadata=tfds.core.MetadataDict(),
                disable_shuffling=True,
            )

        def _split_generators(self, dl_manager):
            del dl_manager
            cfg = self.builder_config
            self.info.metadata["empty_lines"] = {s: v["empty"] for s, v in cfg.stats.items()}
            self.info.metadata["lines"] = {s: v["lines"] for s, v in cfg.stats.items()}
            return {split: self._generate_examples(split) for split in cfg.split_files}

        def _generate_examples(self, split):
            cfg = self.builder_config
            lang_a, lang_b = cfg.languages
            files = cfg.split_files[split]
            for line, a, b in read_parallel_files(files[lang_a], files[lang_b]):
                if line is None:
                    return
                yield line, {lang_a: a, lang_b: b, "line": line}

    ParallelText.ParallelTextConfig = ParallelTextConfig
    _PARALLEL_TEXT_BUILDER = ParallelText
    return ParallelText


def parallel_text_builder(path: str, languages: Sequence[str], data_dir: str):
    """Returns the (prepared) `ParallelText` builder for corpus directory ``path``.

    The config name hashes the absolute path, the language pair and each file's size and
    mtime; if no prepared copy exists under ``data_dir``, the files are validated
    (`UserError` on bad data) and prepared as ArrayRecord.
    """
    languages = tuple(sorted(languages))
    for lang in languages:
        if not _LANG_RE.match(lang):
            raise UserError(
                f"language code {lang!r} (data.source_lang/target_lang) may only contain "
                "letters, digits, '_' and '-'"
            )
    if languages[0] == languages[1]:
        raise UserError(
            f"data.source_lang and data.target_lang are both {languages[0]!r}; "
            "they must name the two different file suffixes"
        )
    splits = find_parallel_splits(path, languages)
    fingerprint = {
        "path": os.path.abspath(os.path.expanduser(path)),
        "languages": languages,
        "files": {
            s: {lang: _file_identity(f) for lang, f in sf.files.items()} for s, sf in splits.items()
        },
    }
    digest = hashlib.sha1(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
    name = f"{languages[0]}_{languages[1]}_{digest}".lower().replace("-", "_")
    cls = _parallel_text_builder_cls()
    config = cls.ParallelTextConfig(
        name=name,
        version=cls.VERSION,
        description=f"{fingerprint['path']} ({languages[0]}, {languages[1]})",
        languages=languages,
        split_files={s: dict(sf.files) for s, sf in splits.items()},
    )
    builder = cls(config=config, data_dir=data_dir)
    if not _is_prepared(builder):
        stats = {}
        for split, sf in splits.items():
            stats[split] = validate_parallel_files(sf.files[languages[0]], sf.files[languages[1]])
        config.stats.update(stats)
        logging.info("preparing %s as ArrayRecord in %s", fingerprint["path"], builder.data_dir)
        builder.download_and_prepare(file_format="array_record")
    return builder


def _file_identity(filename: str) -> list[int]:
    st = os.stat(filename)
    return [st.st_size, st.st_mtime_ns]


def _is_prepared(builder) -> bool:
    return os.path.isfile(os.path.join(builder.data_dir, "dataset_info.json"))


# --------------------------------------------------------------------------------------
# Reading.
# --------------------------------------------------------------------------------------


class TextPairs(Sequence):
    """Random-access ``(source_text, target_text)`` pairs of one split.

    Attributes:
      name: a description, e.g. ``'parallel_text:/data/corpus[valid] en->de'``.
      fingerprint: a string that changes when the underlying data changes (cache key).
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
        num_empty_skipped: int = 0,
        line_key: str | None = None,
    ):
        self._source = data_source
        self._src_key = source_key
        self._tgt_key = target_key
        self._line_key = line_key
        self.name = name
        self.fingerprint = fingerprint
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
        import shutil  # noqa: PLC0415

        shutil.rmtree(out_dir)
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    try:
        os.rename(tmp_dir, out_dir)
    except OSError:  # another process won the race; its corpus is identical
        import shutil  # noqa: PLC0415

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
        return TextPairs(
            source,
            src_lang,
            tgt_lang,
            name=f"{data_config.name}:{os.path.abspath(path)}[{resolved}] {src_lang}->{tgt_lang}",
            fingerprint=f"{builder.data_dir}|{resolved}|{src_lang}->{tgt_lang}",
            num_empty_skipped=int(empty),
            line_key="line",
        )
    return _load_tfds_split(data_config, split, data_dir, src_lang, tgt_lang)


def _tfds_builder(data_config, data_dir: str):
    tfds = _tfds()
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
    if not _is_prepared(builder):
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
    return TextPairs(
        source,
        src_lang,
        tgt_lang,
        name=f"{name}[{resolved}] {src_lang}->{tgt_lang}",
        fingerprint=f"{builder.data_dir}|{builder.info.version}|{resolved}|{src_lang}->{tgt_lang}",
    )

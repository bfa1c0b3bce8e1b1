"""The ``ParallelText`` TFDS builder: a local corpus prepared as ArrayRecord.

`parallel_text_builder` turns a directory of ``{split}.{lang}`` files into a prepared TFDS
builder under ``<data_dir>/parallel_text/<config>/``. The config name hashes the language
pair and the files' contents (not where they are), so two corpora never collide, changed
files are prepared again, and a run directory copied or moved elsewhere finds its prepared
data under the same name. Content hashes are kept in ``<data_dir>/parallel_text/
file_hashes.json`` beside the file's size and modification time, so unchanged files are read
once. A dataset prepared under the older name (which hashed the absolute path and the files'
modification times) is still used where it is. The builder class is defined lazily on first
use (`import_tfds` takes about a second), so importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Sequence

import numpy as np
from absl import logging

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.data.parallel_files import (
    find_parallel_splits,
    read_parallel_files,
    validate_parallel_files,
)

_LANG_RE = re.compile(r"^[A-Za-z0-9_\-]+$")
_PARALLEL_TEXT_BUILDER = None


def import_tfds():
    """``tensorflow_datasets``, imported on first use (it is slow to import)."""
    # TFDS (4.9.x) needs the `importlib_resources` backport to locate builder code; the
    # standard library's `importlib.resources` is the same API (Python >= 3.11).
    try:
        import importlib_resources  # noqa: F401, PLC0415
    except ImportError:
        import importlib.resources  # noqa: PLC0415

        sys.modules.setdefault("importlib_resources", importlib.resources)
    import tensorflow_datasets as tfds  # noqa: PLC0415 (lazy: slow import)

    _quiet_progress_bars(tfds)
    return tfds


def _quiet_progress_bars(tfds) -> None:
    """TFDS draws tqdm bars while it prepares a dataset: carriage returns and cursor moves
    that turn a log file (train.py > log) into noise. They stay on a terminal only."""
    if not sys.stderr.isatty():
        tfds.disable_progress_bar()


def is_prepared(builder) -> bool:
    """Whether ``builder``'s dataset has been prepared in its data dir."""
    return os.path.isfile(os.path.join(builder.data_dir, "dataset_info.json"))


def _define_config_cls(tfds):
    @dataclasses.dataclass(eq=False)
    class ParallelTextConfig(tfds.core.BuilderConfig):
        """One local corpus: its split files and the (sorted) language pair."""

        languages: tuple[str, ...] = ()
        split_files: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict, repr=False)
        stats: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict, repr=False)

    return ParallelTextConfig


def _define_builder_cls(tfds):
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

    return ParallelText


def _parallel_text_builder_cls():
    """Returns the `ParallelText` builder class, defining (and registering) it once."""
    global _PARALLEL_TEXT_BUILDER
    if _PARALLEL_TEXT_BUILDER is not None:
        return _PARALLEL_TEXT_BUILDER
    tfds = import_tfds()
    config_cls = _define_config_cls(tfds)
    builder_cls = _define_builder_cls(tfds)
    builder_cls.ParallelTextConfig = config_cls
    _PARALLEL_TEXT_BUILDER = builder_cls
    return builder_cls


def _check_languages(languages: tuple[str, ...]) -> None:
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


HASH_CACHE = "file_hashes.json"


def _legacy_name(path: str, languages: tuple[str, ...], splits) -> str:
    """The config name older versions gave a corpus: the absolute path, the languages and
    each file's size and mtime (prepared data under it stays usable where it is)."""
    fingerprint = {
        "path": os.path.abspath(os.path.expanduser(path)),
        "languages": languages,
        "files": {
            s: {lang: _file_identity(f) for lang, f in sf.files.items()} for s, sf in splits.items()
        },
    }
    return _config_name(languages, fingerprint)


def _content_name(languages: tuple[str, ...], splits, data_dir: str) -> str:
    """The config name of a corpus: its languages and its files' contents, by split."""
    hashes = _HashCache(os.path.join(data_dir, "parallel_text", HASH_CACHE))
    fingerprint = {
        "languages": languages,
        "files": {
            s: {lang: hashes.digest(f) for lang, f in sf.files.items()} for s, sf in splits.items()
        },
    }
    hashes.save()
    return _config_name(languages, fingerprint)


def _config_name(languages: tuple[str, ...], fingerprint: dict) -> str:
    digest = hashlib.sha1(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
    return f"{languages[0]}_{languages[1]}_{digest}".lower().replace("-", "_")


def _file_identity(filename: str) -> list[int]:
    st = os.stat(filename)
    return [st.st_size, st.st_mtime_ns]


class _HashCache:
    """SHA-256 digests of files by absolute path, reused while a file's size and mtime are
    the ones it was hashed at: a large corpus is read once, not on every run. A cache that
    cannot be read or written only costs hashing again."""

    def __init__(self, path: str):
        self.path = path
        self.entries = self._read()
        self.changed = False

    def _read(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                entries = json.load(f)
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def digest(self, filename: str) -> str:
        key, stamp = os.path.abspath(filename), _file_identity(filename)
        entry = self.entries.get(key)
        if isinstance(entry, dict) and entry.get("stamp") == stamp:
            return entry["sha256"]
        self.entries[key] = {"stamp": stamp, "sha256": _sha256(filename)}
        self.changed = True
        return self.entries[key]["sha256"]

    def save(self) -> None:
        if not self.changed:
            return
        # Files gone from their hashed place (a moved run's old paths) are dropped.
        kept = {k: v for k, v in self.entries.items() if os.path.isfile(k)}
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            atomic_write(self.path, json.dumps(kept, sort_keys=True))
        except OSError as e:
            logging.info("could not write %s (%s); file hashes are computed again", self.path, e)


def _sha256(filename: str) -> str:
    digest = hashlib.sha256()
    with open(filename, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _builder(name: str, path: str, languages: tuple[str, ...], splits, data_dir: str):
    cls = _parallel_text_builder_cls()
    config = cls.ParallelTextConfig(
        name=name,
        version=cls.VERSION,
        description=f"{os.path.abspath(path)} ({languages[0]}, {languages[1]})",
        languages=languages,
        split_files={s: dict(sf.files) for s, sf in splits.items()},
    )
    return cls(config=config, data_dir=data_dir)


def parallel_text_builder(path: str, languages: Sequence[str], data_dir: str):
    """Returns the (prepared) `ParallelText` builder for corpus directory ``path``.

    The config name hashes the language pair and the files' contents (module docstring); if
    no prepared copy exists under ``data_dir``, the files are validated (`UserError` on bad
    data) and prepared as ArrayRecord.
    """
    languages = tuple(sorted(languages))
    _check_languages(languages)
    splits = find_parallel_splits(path, languages)
    legacy = _builder(_legacy_name(path, languages, splits), path, languages, splits, data_dir)
    if is_prepared(legacy):
        return legacy
    name = _content_name(languages, splits, data_dir)
    builder = _builder(name, path, languages, splits, data_dir)
    if not is_prepared(builder):
        _prepare(builder, path, languages, splits)
    return builder


def _prepare(builder, path: str, languages: tuple[str, ...], splits) -> None:
    stats = {}
    for split, sf in splits.items():
        stats[split] = validate_parallel_files(sf.files[languages[0]], sf.files[languages[1]])
    builder.builder_config.stats.update(stats)
    logging.info("preparing %s as ArrayRecord in %s", path, builder.data_dir)
    builder.download_and_prepare(file_format="array_record")

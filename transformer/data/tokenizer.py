"""SentencePiece tokenizers with fixed special ids, trained in-process and kept in the workdir.

Special ids are the same in every vocabulary this code trains or accepts: those of
`transformer.common.special_ids` (padding is never produced by `tokenize`).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm
from absl import logging

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID
from transformer.data.text_splits import languages

MODEL_TYPES = ("unigram", "bpe")
VOCAB_DIR = "vocab"
# Sentences longer than this (in bytes) are ignored by SentencePiece training.
_MAX_SENTENCE_BYTES = 1 << 14
# The fixed special pieces; every sentence in its given order; a soft vocabulary size.
_TRAINER_OPTIONS = dict(
    pad_id=PAD_ID,
    unk_id=UNK_ID,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_piece="<pad>",
    unk_piece="<unk>",
    bos_piece="<s>",
    eos_piece="</s>",
    character_coverage=1.0,
    hard_vocab_limit=False,
    input_sentence_size=0,
    shuffle_input_sentence=False,
    max_sentence_length=_MAX_SENTENCE_BYTES,
    minloglevel=2,
)


class Tokenizer:
    """A SentencePiece model with the special ids of `transformer.common.special_ids`.

    `tokenize` returns ids without BOS/EOS; `detokenize` stops at the first EOS and ignores PAD
    and BOS (and ids outside the vocabulary, which a model whose ``vocab_size`` is larger
    than the tokenizer's can emit).
    """

    def __init__(self, model_proto: bytes, path: str | None = None):
        self._proto = bytes(model_proto)
        self.path = path
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        where = path or "the SentencePiece model"
        got = {
            "pad": self._sp.pad_id(),
            "unk": self._sp.unk_id(),
            "bos": self._sp.bos_id(),
            "eos": self._sp.eos_id(),
        }
        if got != SPECIAL_IDS:
            needs = ", ".join(f"{k}={v}" for k, v in SPECIAL_IDS.items())
            flags = " ".join(f"{k}_id={v}" for k, v in SPECIAL_IDS.items())
            raise UserError(
                f"{where} has special ids {got}, but this code needs {needs}; retrain it "
                f"with {flags} (or clear data.vocab_path to train one)"
            )

    # -- construction -----------------------------------------------------------------

    @classmethod
    def load(cls, path: str) -> Tokenizer:
        """Loads a ``.model`` file; `UserError` if missing, unreadable or wrong special ids."""
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(path):
            raise UserError(f"SentencePiece model {path} does not exist; check data.vocab_path")
        with open(path, "rb") as f:
            proto = f.read()
        try:
            return cls(proto, path=path)
        except UserError:
            raise
        except Exception as e:  # sentencepiece raises RuntimeError/OSError on bad protos
            raise UserError(
                f"{path} is not a valid SentencePiece model ({type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})"
            ) from None

    @classmethod
    def train(
        cls,
        sentences_or_files: Iterable[str] | str | os.PathLike | Sequence[os.PathLike],
        model_path: str | None,
        vocab_size: int,
        model_type: str = "unigram",
        max_sentences: int | None = None,
        num_threads: int | None = None,
    ) -> Tokenizer:
        """Trains a model in-process and (if ``model_path``) writes it there atomically.

        Args:
          sentences_or_files: an iterable of sentences, or a file path (``str`` /
            ``os.PathLike``), or a list of ``os.PathLike`` files (one sentence per line).
          model_path: where to write the ``.model`` file (``None``: keep it in memory).
          vocab_size: the requested vocabulary size; a soft limit (``hard_vocab_limit``
            is off), so small corpora give smaller vocabularies instead of failing.
          model_type: ``'unigram'`` or ``'bpe'``.
          max_sentences: use at most this many (non-empty) sentences.
          num_threads: training threads (default: CPU count, at most 16). The result does
            not depend on it.
        """
        if model_type not in MODEL_TYPES:
            raise UserError(
                f"data.vocab_type={model_type!r} is not one of {', '.join(MODEL_TYPES)}"
            )
        if not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_IDS):
            raise UserError(
                f"vocab_size={vocab_size!r} must be an integer > {len(SPECIAL_IDS)} "
                "(data.vocab_size)"
            )
        sentences = _sentence_stream(sentences_or_files, max_sentences)
        proto, seen = _train_model_proto(sentences, vocab_size, model_type, num_threads)
        tok = cls(proto)
        if model_path:
            tok.save(model_path)
        logging.info(
            "trained a %s SentencePiece vocabulary of %d pieces on %d sentences%s",
            model_type,
            tok.vocab_size,
            seen,
            f" -> {tok.path}" if tok.path else "",
        )
        return tok

    def save(self, path: str) -> None:
        """Writes the model to ``path`` atomically (safe with several processes)."""
        path = os.path.abspath(os.path.expanduser(path))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, self._proto)
        self.path = path

    # -- use --------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def model_proto(self) -> bytes:
        return self._proto

    @property
    def fingerprint(self) -> str:
        """A short hash of the serialized model (changes iff the vocabulary changes)."""
        return hashlib.sha1(self._proto).hexdigest()[:16]

    def id_to_piece(self, token_id: int) -> str:
        return self._sp.id_to_piece(int(token_id))

    def piece_to_id(self, piece: str) -> int:
        return self._sp.piece_to_id(piece)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS)."""
        return self._sp.encode(text)

    def tokenize_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
        """`tokenize` for many texts, using SentencePiece's thread pool."""
        if not texts:
            return []
        return self._sp.encode(list(texts), num_threads=num_threads)

    def unknown_characters(self, text: str) -> list[str]:
        """The characters of ``text`` that the vocabulary lacks (each once, in order of
        appearance): `tokenize` turns them into UNK, which detokenizes to no trace of them."""
        if UNK_ID not in self._sp.encode(text):
            return []
        pieces = self._sp.encode(text, return_type="proto").pieces
        surfaces = "".join(p.surface for p in pieces if p.id == UNK_ID)
        return list(dict.fromkeys(c for c in surfaces if not c.isspace()))

    def nbest_tokenize(self, text: str, nbest_size: int) -> list[list[int]]:
        """The ``nbest_size`` most probable segmentations of ``text`` (unigram models)."""
        return self._sp.nbest_encode(text, nbest_size=nbest_size)

    def text_of(self, ids: Sequence[int]) -> str:
        """The text that piece ids spell (no special ids among them), without the checks of
        `detokenize`."""
        return self._sp.decode(ids)

    def detokenize(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: stops at the first EOS, skips PAD, BOS and out-of-range ids."""
        keep = []
        n = self.vocab_size
        for i in np.asarray(list(ids) if not hasattr(ids, "__array__") else ids).reshape(-1):
            i = int(i)
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID) or not 0 <= i < n:
                continue
            keep.append(i)
        return self._sp.decode(keep)

    def __repr__(self) -> str:
        return f"Tokenizer({self.path or '<in memory>'}, vocab_size={self.vocab_size})"


def _train_model_proto(
    sentences: Iterable[str], vocab_size: int, model_type: str, num_threads: int | None
) -> tuple[bytes, int]:
    """Trains SentencePiece in-process; returns ``(model proto, sentences trained on)``."""
    seen = 0

    def counted():
        nonlocal seen
        for s in sentences:
            seen += 1
            yield s

    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=counted(),
            model_writer=buf,
            vocab_size=vocab_size,
            model_type=model_type,
            num_threads=num_threads or max(1, min(16, os.cpu_count() or 1)),
            **_TRAINER_OPTIONS,
        )
    except RuntimeError as e:
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        if seen == 0:
            raise UserError(
                "no non-empty sentences to train the SentencePiece vocabulary on; check "
                "the training split"
            ) from None
        raise UserError(
            f"SentencePiece training on {seen} sentences failed: {msg}; a smaller "
            "data.vocab_size or more data usually fixes it"
        ) from None
    return buf.getvalue(), seen


def _sentence_stream(sentences_or_files, max_sentences: int | None):
    if isinstance(sentences_or_files, (str, os.PathLike)):
        files = [sentences_or_files]
    elif (
        isinstance(sentences_or_files, (list, tuple))
        and sentences_or_files
        and all(isinstance(x, os.PathLike) for x in sentences_or_files)
    ):
        files = list(sentences_or_files)
    else:
        files = None

    def from_files():
        for filename in files:
            if not os.path.isfile(filename):
                raise UserError(f"{filename} does not exist (tokenizer training input)")
            with open(filename, encoding="utf-8", errors="replace") as f:
                yield from f

    count = 0
    for s in from_files() if files is not None else sentences_or_files:
        s = s.strip()
        if not s:
            continue
        if max_sentences is not None and count >= max_sentences:
            return
        count += 1
        yield s


def _sample_indices(n: int, k: int, seed: int = 0) -> np.ndarray:
    """``k`` of ``range(n)``, spread over the whole split, sorted (all if ``k >= n``)."""
    if k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def _load_or_train(
    model_path: str, spec: dict, vocab_size: int, texts: Callable[[], Iterable[str]]
) -> Tokenizer:
    """Reuses ``model_path`` if it was trained with ``spec``; else trains and writes it."""
    spec_path = model_path[: -len(".model")] + ".json"
    if os.path.isfile(model_path):
        if os.path.isfile(spec_path):
            with open(spec_path) as f:
                old = json.load(f)
            changed = {k: (old.get(k), v) for k, v in spec.items() if old.get(k) != v}
            if changed:
                what = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                raise UserError(
                    f"{model_path} was trained with other settings ({what}); use a new "
                    f"workdir or delete {os.path.dirname(model_path)} to retrain the vocabulary"
                )
        logging.info("reusing vocabulary %s", model_path)
        return Tokenizer.load(model_path)
    tok = Tokenizer.train(
        texts(), None, vocab_size, model_type=spec["vocab_type"], max_sentences=None
    )
    os.makedirs(os.path.dirname(model_path), exist_ok=True)
    atomic_write(spec_path, json.dumps(spec, sort_keys=True))
    tok.save(model_path)
    return tok


def check_vocab_config(data_config) -> None:
    """The vocabulary fields of the `data` section (run_config.validate calls it first)."""
    d = data_config
    if d.vocab_type not in MODEL_TYPES:
        raise UserError(f"data.vocab_type={d.vocab_type!r} is not one of {', '.join(MODEL_TYPES)}")
    if not isinstance(d.vocab_size, int) or d.vocab_size <= len(SPECIAL_IDS):
        raise UserError(
            f"data.vocab_size={d.vocab_size!r} must be an integer > {len(SPECIAL_IDS)} (the "
            "special pieces)"
        )
    if not isinstance(d.vocab_train_sentences, int) or d.vocab_train_sentences <= 0:
        raise UserError(f"data.vocab_train_sentences={d.vocab_train_sentences!r} must be positive")


def build_tokenizers(
    data_config,
    vocab_size: int,
    workdir: str,
    train_texts: Sequence[tuple[str, str]] | Callable[[], Sequence[tuple[str, str]]],
) -> tuple[Tokenizer, Tokenizer]:
    """Returns ``(source_tokenizer, target_tokenizer)`` for a run.

    * ``data.vocab_path`` set: one ``.model`` path (used for both sides) or two paths
      separated by a comma (``source.model,target.model``); a relative path names a file in
      the run directory where one is there, else in the current directory
      (`resolve_vocab_path`).
    * otherwise, ``data.shared_vocab=True`` (default): one model trained on the source and
      target text of the training split, saved as ``<workdir>/vocab/shared.model`` and
      returned as the same object for both sides; ``False``: ``source.model`` and
      ``target.model`` trained separately. Existing models there are reused (resume, eval,
      decode) if trained with the same vocab_type / vocab_size / data, else `UserError`.

    Args:
      data_config: ``config.data`` (uses vocab_path, shared_vocab, vocab_type,
        vocab_train_sentences, name, source_lang, target_lang, reverse).
      vocab_size: ``config.data.vocab_size``, the size asked of a trained vocabulary (a soft
        limit; unused with ``vocab_path``). The model's size follows the tokenizer
        (`transformer.training.run_config.resolve_vocab_size`).
      workdir: the run's directory.
      train_texts: the training split as ``(source, target)`` pairs (e.g. from
        `transformer.data.text_splits.load_split`), or a zero-argument callable returning it,
        called only if a vocabulary has to be trained.
    """
    if data_config.vocab_path:
        return _load_vocab_paths(data_config.vocab_path, workdir)
    return _train_or_reuse(data_config, vocab_size, workdir, train_texts)


def _train_or_reuse(data_config, vocab_size, workdir, train_texts) -> tuple[Tokenizer, Tokenizer]:
    """The run's vocabularies in ``<workdir>/vocab``: reused if there, else trained."""
    if not workdir:
        raise UserError("a workdir is needed to store the trained vocabulary (or set vocab_path)")
    vocab_dir = os.path.join(os.path.abspath(os.path.expanduser(workdir)), VOCAB_DIR)
    check_vocab_config(data_config)
    limit = int(data_config.vocab_train_sentences)
    # Loaded at most once, and only if a vocabulary has to be trained.
    pairs = functools.cache(train_texts if callable(train_texts) else lambda: train_texts)
    base_spec = {
        "vocab_size": int(vocab_size),
        "vocab_type": data_config.vocab_type,
        "vocab_train_sentences": limit,
        "data": data_config.name,
        "languages": [data_config.source_lang, data_config.target_lang],
    }
    if data_config.shared_vocab:
        spec = dict(base_spec, side="shared")
        texts = _sampled_texts(pairs, (0, 1), limit)
        tok = _load_or_train(os.path.join(vocab_dir, "shared.model"), spec, vocab_size, texts)
        return tok, tok
    # Source/target are named by direction; with reverse=True the languages swap roles.
    src_lang, tgt_lang = languages(data_config)
    src = _load_or_train(
        os.path.join(vocab_dir, "source.model"),
        dict(base_spec, side="source", language=src_lang),
        vocab_size,
        _sampled_texts(pairs, (0,), limit),
    )
    tgt = _load_or_train(
        os.path.join(vocab_dir, "target.model"),
        dict(base_spec, side="target", language=tgt_lang),
        vocab_size,
        _sampled_texts(pairs, (1,), limit),
    )
    return src, tgt


def _load_vocab_paths(vocab_path, workdir: str | None) -> tuple[Tokenizer, Tokenizer]:
    """``data.vocab_path``: one ``.model`` for both sides, or ``source.model,target.model``."""
    paths = [resolve_vocab_path(p.strip(), workdir) for p in str(vocab_path).split(",")]
    if len(paths) == 1:
        tok = Tokenizer.load(paths[0])
        return tok, tok
    if len(paths) != 2 or not all(paths):
        raise UserError(
            f"data.vocab_path={vocab_path!r} must be one .model path or two "
            "separated by a comma (source,target)"
        )
    return tuple(Tokenizer.load(p) for p in paths)


def resolve_vocab_path(path: str, workdir: str | None) -> str:
    """One ``data.vocab_path`` entry as a file. Relative: the run directory's file where it
    exists (imported runs store ``vocab/source.model`` so, and then travel with their
    vocabulary), else the current directory's. Absolute and gone, below a ``vocab/``
    directory: the run's own ``vocab/`` file of that name (a run that stored absolute paths
    and moved since; the checkpoint's tokenizer fingerprints still check it)."""
    if not path or not workdir:
        return path
    path = os.path.expanduser(path)
    run_dir = os.path.abspath(os.path.expanduser(workdir))
    if not os.path.isabs(path):
        inside = os.path.join(run_dir, path)
        return inside if os.path.isfile(inside) else path
    moved = os.path.join(run_dir, VOCAB_DIR, os.path.basename(path))
    parent = os.path.basename(os.path.dirname(path))
    if not os.path.isfile(path) and parent == VOCAB_DIR and os.path.isfile(moved):
        return moved
    return path


def _sampled_texts(
    pairs: Callable[[], Sequence[tuple[str, str]]], sides: tuple[int, ...], max_sentences: int
) -> Callable[[], Iterator[str]]:
    """Sides ``sides`` of ``max_sentences // len(sides)`` pairs spread over the split."""

    def texts():
        data = pairs()
        idx = _sample_indices(len(data), max(1, max_sentences // len(sides)))
        get_many = getattr(data, "get_many", None)
        for start in range(0, len(idx), 10_000):
            chunk = idx[start : start + 10_000]
            batch = get_many(chunk) if get_many else [data[int(i)] for i in chunk]
            for pair in batch:
                for side in sides:
                    yield pair[side]

    return texts

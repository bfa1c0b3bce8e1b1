"""The synthetic corpus as data: distinct sentence pairs and the six split files.

`generate_pairs` draws sentences until it has the requested number of pairs with distinct
English sides of `MIN_WORDS`-`MAX_WORDS` words, checking that no English sentence gets two
German translations. `write_corpus` writes them as ``{train,valid,test}.{en,de}`` with a
``corpus.json`` of parameters and SHA-256 hashes, and skips the work when that record and the
files on disk still match (the freshness check).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

from transformer.common.fileio import atomic_write
from transformer.data.synthetic.grammar import PUNCTUATION, join_tokens
from transformer.data.synthetic.sentences import make_sentence

# Any change to the lexicon or the rules changes the output: bump it so corpora regenerate.
GENERATOR_VERSION = 1
MIN_WORDS = 4
MAX_WORDS = 25
SPLITS = ("train", "valid", "test")


def word_count(sentence: str) -> int:
    """Number of words, punctuation not counted."""
    return sum(1 for w in sentence.split() if w not in PUNCTUATION)


def generate_pairs(num: int, seed: int) -> list[tuple[str, str]]:
    """Return ``num`` (English, German) pairs with pairwise distinct English sides.

    Deterministic for a given seed; ``generate_pairs(n, s)`` is a prefix of
    ``generate_pairs(m, s)`` for ``n <= m``.
    """
    if num < 0:
        raise ValueError(f"num must be >= 0, got {num}")
    rng = random.Random(f"synthetic-translation-v{GENERATOR_VERSION}-{seed}")
    seen: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < num:
        attempts += 1
        if attempts > 50 * num + 1000:
            raise RuntimeError("synthetic generator cannot produce enough distinct sentences")
        en_toks, de_toks = make_sentence(rng)
        n_en = len(en_toks) - sum(map(PUNCTUATION.__contains__, en_toks))
        n_de = len(de_toks) - sum(map(PUNCTUATION.__contains__, de_toks))
        if not (MIN_WORDS <= n_en <= MAX_WORDS and MIN_WORDS <= n_de <= MAX_WORDS):
            continue
        en, de = join_tokens(en_toks), join_tokens(de_toks)
        prev = seen.get(en)
        if prev is not None:
            if prev != de:
                raise AssertionError(f"ambiguous translation for {en!r}: {prev!r} vs {de!r}")
            continue
        seen[en] = de
        pairs.append((en, de))
    return pairs


# ---------------------------------------------------------------------------
# Corpus files
# ---------------------------------------------------------------------------


def _file_names() -> list[str]:
    return [f"{split}.{lang}" for split in SPLITS for lang in ("en", "de")]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _corpus_is_current(out: Path, params: dict) -> bool:
    meta_path = out / "corpus.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or meta.get("params") != params:
        return False
    hashes = meta.get("sha256", {})
    for name in _file_names():
        path = out / name
        if not path.is_file() or hashes.get(name) != _sha256(path):
            return False
    return True


def write_corpus(
    out_dir: str | os.PathLike[str],
    num_train: int = 20000,
    num_eval: int = 500,
    seed: int = 0,
) -> None:
    """Write train/valid/test .en/.de files (UTF-8, one sentence per line).

    valid and test hold ``num_eval`` lines each; no English sentence occurs in
    two splits.  Files are written atomically, and nothing is rewritten when
    ``corpus.json`` records the same parameters and the files' hashes match.
    """
    if num_train < 0 or num_eval < 0:
        raise ValueError("num_train and num_eval must be >= 0")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    params = {
        "generator": "transformer.data.synthetic",
        "version": GENERATOR_VERSION,
        "num_train": num_train,
        "num_eval": num_eval,
        "seed": seed,
    }
    if _corpus_is_current(out, params):
        return
    pairs = generate_pairs(num_train + 2 * num_eval, seed)
    splits = {
        "test": pairs[:num_eval],
        "valid": pairs[num_eval : 2 * num_eval],
        "train": pairs[2 * num_eval :],
    }
    hashes: dict[str, str] = {}
    for split in SPLITS:
        for idx, lang in enumerate(("en", "de")):
            name = f"{split}.{lang}"
            data = "".join(p[idx] + "\n" for p in splits[split]).encode("utf-8")
            atomic_write(out / name, data)
            hashes[name] = hashlib.sha256(data).hexdigest()
    meta = {"params": params, "sha256": hashes}
    atomic_write(out / "corpus.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())

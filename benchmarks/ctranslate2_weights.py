"""One of our trained models as a CTranslate2 model directory, as the benchmarks feed it.

CTranslate2 is the engine users pick for CPU translation; its row in the speed tables shows
how far this project is from it on the same weights. The weight mapping is the package's
(`transformer.interop.ctranslate2_model`: exact weights, the decoder starting from BOS as
ours does); here the vocabulary is the ids written as decimal strings, so sources go in as
our ids (EOS included) and outputs come back as ids, and the two precisions the benchmarks
compare.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.common import ct2_impl
from transformer.interop.ctranslate2_model import save_ctranslate2 as save_model

# CTranslate2's weight types for the two precisions the benchmarks compare.
QUANTIZATIONS = ("float32", "int8")


def token(i: int) -> str:
    """The vocabulary entry of id i."""
    return str(i)


def ids_of(tokens: list[str]) -> list[int]:
    return [int(t) for t in tokens]


def save_ctranslate2(model_cfg, params: Any, out_dir: str, quantization: str = "float32"):
    """Writes the CTranslate2 model of our parameters into out_dir (created), its weights
    stored as `quantization` (float32 or int8), its vocabulary our ids; returns out_dir."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}: expected one of {QUANTIZATIONS}")
    vocabulary = [token(i) for i in range(model_cfg.vocab_size)]
    return save_model(model_cfg, params, out_dir, vocabulary, quantization=quantization)


def search_options(limit: int, beam_size: int = 1) -> dict:
    """translate_batch options decoding as our searches do when a row may emit `limit` tokens,
    EOS included: EOS may win from the first step (CTranslate2's default minimum is one
    token), and our search forces EOS at the limit, which CTranslate2 expresses by stopping
    one token earlier (its outputs carry no EOS)."""
    return dict(beam_size=beam_size, min_decoding_length=0, max_decoding_length=limit - 1)


def load_translators(model_cfg, params: Any, precisions, directory: str, threads: int) -> dict:
    """{'ctranslate2-<precision>': ctranslate2.Translator} of our parameters, each written
    into directory/<precision>; one translation at a time (inter_threads 1) on `threads`."""
    import ctranslate2

    translators = {}
    for precision in precisions:
        path = save_ctranslate2(model_cfg, params, os.path.join(directory, precision), precision)
        translators[ct2_impl(precision)] = ctranslate2.Translator(
            path, device="cpu", inter_threads=1, intra_threads=threads
        )
    return translators

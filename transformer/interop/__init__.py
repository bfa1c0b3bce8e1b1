"""Pretrained weights in and out: Hugging Face `MarianMTModel` directories (OPUS-MT) as run
directories and back (runs), the weight and config mapping both ways (marian), Marian's
vocabulary reordered into this project's fixed special ids as SentencePiece models
(marian_vocab), a run as a CTranslate2 model (ctranslate2_model), and the optional packages they
import on first use (extras).

Imports from: transformer.common, transformer.model, transformer.data, transformer.training.
"""

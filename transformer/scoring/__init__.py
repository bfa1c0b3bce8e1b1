"""Scores of text against text: corpus BLEU and chrF through sacreBLEU with their
signatures, and reading/writing the one-sentence-per-line files they are computed on
(metrics). Used by validation during training and by evaluation alike.

Imports from: transformer.common.
"""

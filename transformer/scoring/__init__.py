"""Scores of text against text: corpus BLEU and chrF through sacreBLEU with their
signatures, and reading/writing the one-sentence-per-line files they are computed on
(metrics); scores per source-length bucket (length_buckets); whether two systems' gap
exceeds the test set's sampling noise (significance: sacreBLEU's paired bootstrap, Holm's
correction, seed intervals) and the noise of drawing other training runs too
(seed_significance: Welch's t over runs plus a test-set term, its power and planning).
Used by validation during training, by evaluation and by the sweeps.

Imports from: transformer.common.
"""

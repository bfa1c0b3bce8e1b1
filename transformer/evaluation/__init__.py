"""Scoring a finished run: restore its config, tokenizers and (averaged) parameters from
the workdir (restore), translate a split or a file and write the eval JSON with sacreBLEU
scores (evaluator).

Imports from: transformer.common, transformer.model, transformer.data, transformer.scoring,
transformer.inference, transformer.training.
"""

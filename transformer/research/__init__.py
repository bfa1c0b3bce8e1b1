"""Research tools built on whole runs: sweeps of config variants x seeds with their tables
and plots (sweep), attention analysis (analysis, over attention_stats, head_masking and
attention_plots), the README/result tables rendered from eval JSON files (report), and a
study's or a run's self-contained HTML page (html).

Imports from: transformer.common, transformer.model, transformer.data, transformer.scoring,
transformer.inference, transformer.training, transformer.evaluation.
"""

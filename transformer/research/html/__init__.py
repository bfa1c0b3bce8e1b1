"""Self-contained HTML pages of a study and of a run: `transformer-report --html DIR`, and
the page transformer-sweep writes beside results.md.

- study_page: a study's results table (sortable), forest plots, learning-rate searches,
  curves, BLEU by length, test sentences side by side and provenance, from the files the
  sweep wrote (study_files reads them);
- run_page: one run's curves, evaluation, BLEU by length, translations and attention;
- pages: which of the two a directory is;
- forest, lr_chart, charts, samples: the plots and the sentence table; svg and markup: the
  SVG and HTML they are written in (escaping, the inline style and script).
"""

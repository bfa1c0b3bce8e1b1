"""Sweeps: train and evaluate named config variants x seeds, then tabulate and plot them.

    transformer-sweep --config configs/sweeps/architecture.py --workdir runs/sweep \
        [--only VARIANT ...] [--dry_run] [--report_only] [--parallel N] [--retry_failed]
        [--executor ray [--ray_address HOST:PORT] [--cpus_per_run C] [--gpus_per_run G]]

A sweep config is a Python file whose `get_config()` returns a dict (or a ConfigDict built with
``allow_dotted_keys=True``) with:

  base            path of a run config file, e.g. 'configs/default.py'
  overrides       {'section.field': value} applied to every run (e.g. a shorter schedule)
  variants        {name: {'section.field': value, ...}}; a bare field name ('norm_position')
                  is accepted when exactly one section has it; `grid(...)` builds products
  seeds           [0, 1, ...]: each (variant, seed) is one run with train.seed = seed
  eval_split      split scored by eval.py after training (default 'test')
  eval_overrides  decode settings for that evaluation, e.g. {'decode.strategy': 'greedy'}
  eval_longer_than  also score the test sentences whose source is longer than this many
                  tokens, or 'train' (longer than data.max_source_len, i.e. than any training
                  example): eval.py --longer_than, a length-generalisation column
  parallel        runs at once (default 1); >1 starts that many subprocesses, one GPU each
                  when GPUs are visible
  baseline        the variant every other one is compared with (default: the first): the
                  seed-aware test of test BLEU/chrF (Welch's t over the runs plus the test
                  set's sampling noise; p-values Holm-corrected over the variants) beside
                  sacreBLEU's paired bootstrap over the pooled seeds, which holds the runs
                  fixed (research/sweep/versus_baseline.py, scoring/seed_significance.py)
  aa_arm          True: the baseline again under the sweep's seeds + 1000, its learning-rate
                  search included, compared like a variant: the table's own false-positive
                  check
  matched         {name: {'variant': V, 'match': 'params' | 'flops', 'solve': 'model.d_ff'}}:
                  compute-matched arms, V resized to the baseline's parameter count or FLOPs
                  per token within 1% (research/sweep/matching.py), listed after V
  lr_grid         {'scales': [0.5, 1.0, 2.0], 'variants': [...], 'min_scale': 1/16,
                  'max_scale': 16, 'tune_seeds': [999] | 'first' | 'all'}: each variant
                  (default all) searched over multiples of its learning rate, the grid
                  widened while its best point is at an edge (up to the caps), on tuning
                  seeds of its own (default [999], none of them compared; or its first
                  compared seed, or every seed), and reported at the point with the lowest
                  final validation loss;
                  variants left out are untuned and marked so (research/sweep/lr_grid.py)

Each run trains in its own subprocess (`python -m transformer.cli.train --config BASE
--config.k=v ...`, so a crash or divergence ends only that run and its memory is released) in
``DIR/<variant>/<seed>`` and is then scored by ``python -m transformer.cli.evaluate --split
<eval_split>``. The sweep skips finished runs (``eval/<split>.json`` exists with step ==
train.num_steps), resumes interrupted ones (train.py resumes from the latest checkpoint) and
records failed or diverged runs in ``DIR/<variant>/<seed>/status.json`` without stopping (rerun
them with --retry_failed). Logs of each attempt go to ``train.log`` / ``eval.log`` beside it.

The learning-rate search adds runs as runs finish, so transformer-sweep plans and runs in
rounds until the plan stops growing. ``--plan GAP`` reads the finished runs of the workdir as
a pilot and prints the seeds per arm a study needs to detect GAP BLEU (planning.py).

At the end (or with --report_only) it writes ``DIR/results.csv`` and ``DIR/results.md``, one
row per variant, the columns defined once in columns.py (BLEU mean, 95% t interval and
between-seed sd, chrF, the seed-aware difference to the baseline with its interval, (Holm)
p-value and minimum detectable difference, sacreBLEU's test-set-only difference, best
validation loss, the learning rate and its search, parameters, FLOPs per token, training
tokens/s, wall time, failures), ``DIR/runs.csv`` (one row per run),
``DIR/valid_loss.png``, ``DIR/bleu.png`` and ``DIR/length_bleu.png`` (BLEU per source-length
bucket); with an lr_grid, the grid's table in results.md, ``DIR/lr_grid.csv`` and
``DIR/lr_valid_loss.png``; ``DIR/sweep.json``, the Sweep the tables were written for. The
command line then renders the study's page, ``DIR/results.html``, from these files
(research/html).

The parts: the config format, `grid` and `load_sweep` (spec), one `Run` per (variant, seed)
and its files in the run directory, planned as the learning-rate search proceeds (runs), the
subprocesses that train and evaluate them (execution), the learning-rate search (lr_grid),
the comparisons with the baseline (versus_baseline), the study planner (planning), the
table columns (columns) and the tables and plots (results).
"""

from transformer.research.sweep.execution import DEFAULT_POLL_S, execute
from transformer.research.sweep.results import readme_block, write_report
from transformer.research.sweep.runs import Run, is_finished, plan_runs, read_status
from transformer.research.sweep.spec import Sweep, grid, load_sweep

__all__ = [
    "DEFAULT_POLL_S",
    "Run",
    "Sweep",
    "execute",
    "grid",
    "is_finished",
    "load_sweep",
    "plan_runs",
    "read_status",
    "readme_block",
    "write_report",
]

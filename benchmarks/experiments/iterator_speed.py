"""The training data iterator alone: how fast it builds batches and what they hold.

    python -m benchmarks.experiments.iterator_speed --config configs/multi30k.py \
        --config.data.path=../shared/data/multi30k --workdir /tmp/iterator_speed \
        [--batches 50] [--json]

Builds the config's datasets with `transformer.data.make_datasets` in --workdir (the
vocabulary and the prepared data are made there once and reused by later runs with the same
data settings), draws 2 batches untimed, then times --batches more from the training
iterator. Figures: `iterator_batches_per_s` and `iterator_pairs_per_s` (sentence pairs: a
packed row holds several), `pairs_per_batch` and `target_tokens_per_pair` (real target tokens,
padding left out), so a setting that lengthens the sentences, such as subword sampling, shows
in the pairs a packed batch holds. Side by side under several settings:
`benchmarks.experiments.env_ab` with one `--config.data.*` argument list per arm.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np
from absl import flags
from ml_collections import config_flags

from benchmarks import common
from transformer.cli.app import run_cli
from transformer.common.errors import UserError

config_flags.DEFINE_config_file("config", None, "Config file (configs/multi30k.py).")
flags.DEFINE_string("workdir", None, "Where the vocabulary and prepared data are kept.")
flags.DEFINE_integer("batches", 50, "Timed batches, after 2 untimed ones.")
flags.DEFINE_bool("json", False, "One JSON object per line instead of a table.")
FLAGS = flags.FLAGS

WARMUP_BATCHES = 2


def pairs_in(batch: dict) -> int:
    """Sentence pairs in a batch: the distinct non-zero target segment ids of each row."""
    segments = np.asarray(batch["tgt_segments"])  # [rows, T]
    return int(sum(len(np.unique(row[row > 0])) for row in segments))


def measure(iterator, batches: int) -> dict[str, float]:
    """Times `batches` batches after WARMUP_BATCHES untimed ones (the iterator's calls only,
    not the counting); counts what they hold."""
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    pairs = tokens = 0
    seconds = 0.0
    for _ in range(batches):
        start = time.perf_counter()
        batch = next(iterator)
        seconds += time.perf_counter() - start
        pairs += pairs_in(batch)
        tokens += int(np.count_nonzero(np.asarray(batch["tgt_segments"])))
    return {
        "iterator_batches_per_s": batches / seconds,
        "iterator_pairs_per_s": pairs / seconds,
        "pairs_per_batch": pairs / batches,
        "target_tokens_per_pair": tokens / max(pairs, 1),
    }


UNITS = {
    "iterator_batches_per_s": "batches/s",
    "iterator_pairs_per_s": "pairs/s",
    "pairs_per_batch": "pairs",
    "target_tokens_per_pair": "tokens",
}


def main(argv) -> None:
    from transformer.data import make_datasets

    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if FLAGS.config is None or not FLAGS.workdir:
        raise UserError("--config and --workdir are required")
    if FLAGS.batches < 1:
        raise UserError(f"--batches must be at least 1, got {FLAGS.batches}")
    quiet = contextlib.redirect_stdout(sys.stderr) if FLAGS.json else contextlib.nullcontext()
    with quiet:  # TFDS preparation prints to stdout
        data = make_datasets(FLAGS.config, FLAGS.workdir)
    d = FLAGS.config.data
    shared = dict(batching=d.batching, spm_alpha=d.spm_alpha, spm_nbest=d.spm_nbest)
    load = round(os.getloadavg()[0], 2)
    common.emit(
        "setup", 0, "-", "iterator", FLAGS.json, cpus=os.cpu_count(), loadavg_1m=load, **shared
    )
    with quiet:
        figures = measure(data.train_iterator(), FLAGS.batches)
    for name, value in figures.items():
        common.emit(name, value, UNITS[name], "iterator", FLAGS.json, batches=FLAGS.batches)


if __name__ == "__main__":
    run_cli(main)

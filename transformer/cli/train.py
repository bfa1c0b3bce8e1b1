"""Train a Transformer from a config file.

    python train.py --config configs/default.py --workdir runs/default \
        [--config.section.field=value ...]

Rerunning with the same --workdir resumes from its latest readable checkpoint (one damaged on
disk is moved aside with a warning: docs/reliability.md). Multi-host: pass
--coordinator_address/--num_processes/--process_id, or --distributed to let JAX read them
from the cluster environment (Slurm, TPU pods).
"""

from __future__ import annotations

import sys

from absl import flags
from ml_collections import config_flags

from transformer.cli.app import distributed_flags, initialize_distributed, load_config_flag, run_cli

config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py).", lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, logs and the vocabulary.")
distributed_flags()
FLAGS = flags.FLAGS


def _main(argv):
    del argv
    config = load_config_flag()
    initialize_distributed(FLAGS)
    from transformer.training.loop import train_and_evaluate

    result = train_and_evaluate(config, FLAGS.workdir)
    status = "stopped by signal" if result.stopped_by_signal else "done"
    print(f"{status} at step {result.step}; workdir {FLAGS.workdir}", file=sys.stderr)


def main() -> None:
    """The `transformer-train` console script."""
    flags.mark_flags_as_required(["config", "workdir"])
    run_cli(_main)


if __name__ == "__main__":
    main()

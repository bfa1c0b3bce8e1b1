"""Whether two versions of the code compile the same program: a fingerprint of a compiled train
step or decoding call that ignores what cannot change speed.

    python -m benchmarks.experiments.program_fingerprint --config configs/bench_base.py
        [--config.field=value ...] [--what train|greedy|sample|beam4] [--decode_len 64]

Compiles the project's train step (the model `run_state.build_train_model` makes, on
fixed-shape random batches) or the Translator's call forced to --decode_len tokens (as
`profile_step.py` does) and prints one JSON line:
the number of HLO instructions and a SHA-256 of their sorted lines with instruction names,
name suffixes, metadata (JAX op names, source lines) and stack frames removed, so a change
that only renames, moves or annotates code (a name scope, an edited line number) keeps the
fingerprint, and one that changes an operation, a shape or a layout does not. Run it in two
checkouts from their roots (a checkout older than this file runs it by path: `cd OLD &&
PYTHONPATH=. python NEW/benchmarks/experiments/program_fingerprint.py ...`, which then
imports OLD's code): equal fingerprints mean any speed difference between them is the
machine's.
"""

from __future__ import annotations

import hashlib
import re

from absl import flags
from ml_collections import config_flags

from benchmarks import common
from benchmarks.experiments.decode_setup import decode_setup
from transformer.cli.app import run_cli
from transformer.common.errors import UserError

config_flags.DEFINE_config_file("config", None, "Config file (configs/bench_base.py).")
flags.DEFINE_enum("what", "train", ["train", *common.DECODE_MODES], "What to compile.")
flags.DEFINE_integer("decode_len", 64, "Output tokens per row when compiling decoding.")
FLAGS = flags.FLAGS


def normalized_instructions(hlo_text: str) -> list[str]:
    """The instruction lines of compiled HLO text without what does not change the program:
    metadata, stack frames, instruction and computation names (%name.123 -> %)."""
    lines = []
    for line in hlo_text.splitlines():
        if " = " not in line:
            continue
        line = re.sub(r", metadata=\{[^}]*\}", "", line)
        line = re.sub(r", stack_frame_id=\d+", "", line)
        lines.append(re.sub(r"%[\w.\-]+", "%", line).strip())
    return sorted(lines)


def fingerprint(hlo_text: str) -> tuple[int, str]:
    """(instruction count, SHA-256 of the normalized instructions)."""
    lines = normalized_instructions(hlo_text)
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()


def train_program(config) -> str:
    """Compiled HLO text of the run's train step (the model `build_train_model` makes) on a
    batch of the config's shapes."""
    import jax
    import numpy as np

    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.run_state import build_train_model
    from transformer.training.steps import init_state, make_train_step

    model_cfg = run_config.validate(config).model
    optimizer, schedule = make_optimizer(config.train)
    graphdef, state = init_state(build_train_model(model_cfg, config.train), optimizer)
    step = jax.jit(make_train_step(graphdef, optimizer, schedule, config.train), donate_argnums=0)
    d = config.data
    batch = common.random_train_batch(
        np.random.default_rng(0),
        int(config.train.batch_size),
        int(d.max_source_len),
        int(d.max_target_len),
        model_cfg.vocab_size,
    )
    return step.lower(state, batch, jax.random.key(0)).compile().as_text()


def main(argv):
    del argv
    if FLAGS.config is None:
        raise UserError("--config is required, e.g. --config configs/bench_base.py")
    if FLAGS.what == "train":
        text = train_program(FLAGS.config)
    else:
        setup = decode_setup(FLAGS.config, FLAGS.what, FLAGS.decode_len)
        text = setup.compile()[1].as_text()
    count, digest = fingerprint(text)
    meta = {"what": FLAGS.what, "sha256": digest}
    common.emit("program_fingerprint", count, "instructions", common.OURS, True, **meta)


if __name__ == "__main__":
    run_cli(main)

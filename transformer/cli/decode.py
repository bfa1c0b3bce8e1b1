"""Translate text with a trained run, streaming lines in order.

    python decode.py --workdir DIR [--checkpoint auto|latest|best|STEP] [--input FILE|-]
        [--output FILE|-] [--config.decode.strategy=greedy|sample|beam]
        [--config.decode.temperature=T --config.decode.top_k=K --config.decode.top_p=P
         --config.decode.beam_size=N --config.decode.length_penalty=A
         --config.decode.num_samples=S --config.decode.seed=SEED ...]
        [--with_prefix | --with_constraints] [--strict_vocab]
        [--ensemble DIR[:STEP],...]

An empty input line gives an empty output line; the same seed gives byte-identical output.
With n_best > 1 (beam) or num_samples > 1 (sample) each input gives that many lines,
tab-separated as `index<TAB>score<TAB>text`. With --with_prefix each input line is
`source<TAB>prefix` and every translation of it starts with the prefix (a line without a tab
has none); with --with_constraints each is `source<TAB>phrase<TAB>phrase...` and every
translation of it holds every phrase (beam search). A prefix or phrase with characters the
target vocabulary lacks (they would become <unk>) is a warning naming the line and the
characters; with --strict_vocab it is a one-line error.
"""

from __future__ import annotations

import sys

from absl import flags

from transformer.cli.app import (
    config_override_args,
    restore_flags,
    run_cli,
    strict_vocab_flag,
)

restore_flags()
flags.DEFINE_string("input", "-", "Input file, one sentence per line; - = stdin.")
flags.DEFINE_string("output", "-", "Output file; - = stdout.")
flags.DEFINE_bool(
    "with_prefix",
    False,
    "Input lines are SOURCE<TAB>PREFIX: every translation starts with PREFIX.",
)
flags.DEFINE_bool(
    "with_constraints",
    False,
    "Input lines are SOURCE<TAB>PHRASE<TAB>PHRASE...: every translation holds every PHRASE "
    "(beam search with lexical constraints).",
)
strict_vocab_flag()
FLAGS = flags.FLAGS


def _main(argv):
    from transformer.evaluation.ensemble import with_members
    from transformer.evaluation.restore import restore_run
    from transformer.inference.streaming import translate_stream

    run = restore_run(
        FLAGS.workdir,
        checkpoint=FLAGS.checkpoint,
        average_last=FLAGS.average_last,
        overrides=config_override_args(argv),
    )
    run = with_members(run, FLAGS.ensemble, config_override_args(argv))
    stats = translate_stream(
        run,
        FLAGS.input,
        FLAGS.output,
        with_prefix=FLAGS.with_prefix,
        with_constraints=FLAGS.with_constraints,
        strict_vocab=FLAGS.strict_vocab,
    )
    message = f"translated {stats['lines']} lines"
    if stats["truncated"]:
        message += f"; {stats['truncated']} longer than model.max_len were truncated"
    print(message, file=sys.stderr)


def main() -> None:
    """The `transformer-decode` console script."""
    run_cli(_main, config_overrides=True)


if __name__ == "__main__":
    main()

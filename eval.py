"""Score a trained run with sacreBLEU and chrF.

    python eval.py --workdir DIR [--checkpoint latest|best|STEP] [--split test]
        [--src FILE --ref FILE] [--average_last N] [--config.decode.field=value ...]

Translates the whole split (nothing filtered out), detokenizes, scores against the raw
references and writes DIR/eval/<name>.json with .src.txt, .hyp.txt and .ref.txt beside it.
"""

from __future__ import annotations

import sys

from absl import flags

from transformer.cli import config_override_args, run_cli

flags.DEFINE_string("workdir", None, "Training run directory.", required=True)
flags.DEFINE_string("checkpoint", "latest", "latest, best (by validation BLEU) or a step.")
flags.DEFINE_string("split", "test", "Split to translate: valid, test or a split name.")
flags.DEFINE_string("src", None, "Source file to translate instead of a split.")
flags.DEFINE_string("ref", None, "Reference file for --src.")
flags.DEFINE_integer("average_last", 1, "Average the parameters of the last N checkpoints.")
flags.DEFINE_string("name", None, "Output name under DIR/eval (default: the split).")
FLAGS = flags.FLAGS


def main(argv):
    from transformer.evaluate import evaluate

    record = evaluate(
        FLAGS.workdir, checkpoint=FLAGS.checkpoint, split=FLAGS.split, src=FLAGS.src,
        ref=FLAGS.ref, average_last=FLAGS.average_last, overrides=config_override_args(argv),
        name=FLAGS.name,
    )  # fmt: skip
    scores = record["_scores"]
    print(scores.bleu_line())
    print(scores.chrf_line())
    print(
        f"{record['sentences']} sentences, step {record['step']}"
        + (f" (average of {record['averaged_steps']})" if len(record["averaged_steps"]) > 1 else "")
        + f", {record['sentences_per_s']:.1f} sentences/s; wrote "
        + f"{FLAGS.workdir}/eval/{record['name']}.json",
        file=sys.stderr,
    )


if __name__ == "__main__":
    run_cli(main, config_overrides=True)

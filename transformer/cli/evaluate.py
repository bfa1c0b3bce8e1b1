"""Score a trained run with sacreBLEU and chrF.

    python eval.py --workdir DIR [--checkpoint auto|latest|best|STEP] [--split test]
        [--src FILE --ref FILE] [--average_last N] [--longer_than N|train]
        [--length_buckets 10,20,30,40] [--score_references] [--prefix FILE | --constraints FILE]
        [--strict_vocab] [--ensemble DIR[:STEP],...]
        [--config.decode.field=value ...]

Translates the whole split (nothing filtered out), detokenizes, scores against the raw
references and writes DIR/eval/<name>.json with .src.txt, .hyp.txt and .ref.txt beside it.
"""

from __future__ import annotations

import shlex
import sys

from absl import flags

from transformer.cli.app import (
    config_override_args,
    restore_flags,
    run_cli,
    strict_vocab_flag,
)
from transformer.scoring.length_buckets import DEFAULT_EDGES, bucket_label

restore_flags()
flags.DEFINE_string("split", "test", "Split to translate: valid, test or a split name.")
flags.DEFINE_string("src", None, "Source file to translate instead of a split.")
flags.DEFINE_string("ref", None, "Reference file for --src.")
flags.DEFINE_string("name", None, "Output name under DIR/eval (default: the split).")
flags.DEFINE_string(
    "longer_than",
    None,
    "Also score the sentences whose source has more than this many tokens "
    "(EOS included), or 'train' for the run's data.max_source_len (length generalisation).",
)
flags.DEFINE_string(
    "length_buckets",
    ",".join(map(str, DEFAULT_EDGES)),
    "Source-length bucket edges in tokens (EOS included): BLEU and chrF per bucket in the "
    "JSON's length_buckets; '' for none.",
)
flags.DEFINE_bool(
    "score_references",
    False,
    "Also score each reference under the model (forced decoding): DIR/eval/<name>."
    "ref_scores.txt and the test perplexity.",
)
flags.DEFINE_string(
    "prefix",
    None,
    "File of target prefixes, one per source line (empty line: none): every translation "
    "starts with its line's prefix, scored by the model.",
)
flags.DEFINE_string(
    "constraints",
    None,
    "File of lexical constraints, one line per source line: tab-separated phrases every "
    "translation of that line holds (empty line: none; beam search).",
)
strict_vocab_flag()
FLAGS = flags.FLAGS


def _main(argv):
    from transformer.evaluation.evaluator import evaluate

    result = evaluate(
        FLAGS.workdir,
        checkpoint=FLAGS.checkpoint,
        split=FLAGS.split,
        src=FLAGS.src,
        ref=FLAGS.ref,
        average_last=FLAGS.average_last,
        overrides=config_override_args(argv),
        name=FLAGS.name,
        longer_than=FLAGS.longer_than,
        buckets=FLAGS.length_buckets or None,
        score_references=FLAGS.score_references,
        prefix=FLAGS.prefix,
        constraints=FLAGS.constraints,
        strict_vocab=FLAGS.strict_vocab,
        ensemble=tuple(FLAGS.ensemble),
        command=" ".join(["python", *(shlex.quote(a) for a in sys.argv)]),
    )
    record = result.record
    print(result.scores.bleu_line())
    print(result.scores.chrf_line())
    if "longer" in record:
        longer = record["longer"]
        head = f"sources over {longer['source_tokens_over']} tokens: {longer['sentences']}"
        if longer["sentences"]:
            print(f"{head} sentences, BLEU {longer['bleu']:.2f}, chrF {longer['chrf']:.2f}")
        else:
            print(f"{head} sentences (nothing to score)")
    if "reference_scores" in record:
        ref = record["reference_scores"]
        print(
            f"references: {ref['nll_per_token']:.4f} NLL per token, perplexity "
            f"{ref['perplexity']:.2f} over {ref['tokens']} tokens"
        )
    if "length_buckets" in record:
        texts = ", ".join(_bucket_text(b) for b in record["length_buckets"])
        print(f"BLEU by source tokens (sentences): {texts}", file=sys.stderr)
    print(
        f"{record['sentences']} sentences, step {record['step']}"
        + (f" (average of {record['averaged_steps']})" if len(record["averaged_steps"]) > 1 else "")
        + f", {record['sentences_per_s']:.1f} sentences/s; wrote {result.path}",
        file=sys.stderr,
    )


def _bucket_text(bucket: dict) -> str:
    bleu = "-" if bucket["bleu"] is None else f"{bucket['bleu']:.1f}"
    return f"{bucket_label(bucket)} {bleu} ({bucket['sentences']})"


def main() -> None:
    """The `transformer-eval` console script."""
    run_cli(_main, config_overrides=True)


if __name__ == "__main__":
    main()

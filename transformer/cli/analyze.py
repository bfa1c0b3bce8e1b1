"""transformer-analyze: attention heatmaps, per-head statistics and head masking of a run.

    transformer-analyze --workdir RUN --out OUT [--checkpoint auto] [--input FILE]
        [--split valid] [--num_sentences 100] [--mask_heads SPEC] [--bleu_sentences 50]
        [--bleu_heads 3]

What each statistic means and what is written: transformer/research/analysis.py.
"""

from __future__ import annotations

import argparse
import sys

from transformer.cli.app import demote_routine_notices
from transformer.common.errors import UserError, report_user_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="transformer-analyze", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--workdir", required=True, help="trained run directory")
    parser.add_argument(
        "--checkpoint", default="auto", help="auto (best if stopped early), latest, best or a step"
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--input", default=None, help="source sentences for heatmaps (a file)")
    parser.add_argument(
        "--heatmap_sentences",
        type=int,
        default=2,
        help="without --input: heatmaps of this many split sentences",
    )
    parser.add_argument("--split", default="valid", help="split for the statistics")
    parser.add_argument("--num_sentences", type=int, default=100, help="statistics sample")
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--bleu_sentences", type=int, default=50, help="greedy BLEU sample")
    parser.add_argument(
        "--bleu_heads",
        type=int,
        default=3,
        help="BLEU change for the N most important heads (-1: all)",
    )
    parser.add_argument("--mask_heads", default=None, help="e.g. 'encoder:0:1,cross:1:3'")
    args = parser.parse_args(argv)
    demote_routine_notices()
    try:
        from transformer.research.analysis import analyze

        analyze(
            workdir=args.workdir,
            out=args.out,
            checkpoint=args.checkpoint,
            input_path=args.input,
            split=args.split,
            num_sentences=args.num_sentences,
            batch_size=args.batch_size,
            heatmap_sentences=args.heatmap_sentences,
            bleu_sentences=args.bleu_sentences,
            bleu_heads=args.bleu_heads,
            mask_heads=args.mask_heads,
        )
    except UserError as e:
        return report_user_error(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""transformer-interop: pretrained Marian (OPUS-MT) models in and out of run directories.

    transformer-interop import-marian SRC_DIR --workdir RUN [--source_lang en --target_lang de]
    transformer-interop export-marian --workdir RUN OUT_DIR [--checkpoint latest]
        [--ctranslate2 OUT2 [--quantization float32|int8|...]]
    transformer-interop export-ctranslate2 --workdir RUN OUT_DIR [--checkpoint latest]
        [--quantization float32|int8|...]

import-marian reads a MarianMTModel saved with save_pretrained (model and tokenizer) and
writes a run directory that eval.py, decode.py and train.py use; export-marian writes a run
as such a directory, and as a CTranslate2 model with --ctranslate2; export-ctranslate2
writes the CTranslate2 model alone, for Pre-LN runs too. What is mapped and why:
transformer/interop/runs.py and docs/interop.md.
"""

from __future__ import annotations

import argparse
import sys

from transformer.cli.app import demote_routine_notices
from transformer.common.errors import UserError, report_user_error


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-interop", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    imp = commands.add_parser("import-marian", help="a MarianMTModel directory -> a run")
    imp.add_argument(
        "src_dir", help="directory MarianMTModel/MarianTokenizer.save_pretrained wrote"
    )
    imp.add_argument("--workdir", required=True, help="the run directory to create (new)")
    imp.add_argument("--source_lang", help="data.source_lang (default: tokenizer_config.json's)")
    imp.add_argument("--target_lang", help="data.target_lang (default: tokenizer_config.json's)")
    exp = commands.add_parser("export-marian", help="a run -> a MarianMTModel directory")
    exp.add_argument("out_dir", help="directory to write the MarianMTModel and tokenizer into")
    exp.add_argument("--workdir", required=True, help="the run directory to export")
    exp.add_argument("--checkpoint", default="latest", help="latest, best or a step")
    exp.add_argument("--ctranslate2", help="also write a CTranslate2 model directory here")
    _add_quantization(exp)
    ct2 = commands.add_parser("export-ctranslate2", help="a run -> a CTranslate2 model directory")
    ct2.add_argument("out_dir", help="directory to write the CTranslate2 model into")
    ct2.add_argument("--workdir", required=True, help="the run directory to export")
    ct2.add_argument("--checkpoint", default="latest", help="latest, best or a step")
    _add_quantization(ct2)
    return parser


def _add_quantization(command) -> None:
    command.add_argument(
        "--quantization", default="float32", help="CTranslate2 weight type (default float32)"
    )


def _import(args) -> None:
    from transformer.interop.runs import import_marian

    workdir = import_marian(
        args.src_dir, args.workdir, source_lang=args.source_lang, target_lang=args.target_lang
    )
    print(f"imported {args.src_dir} as the run {workdir} (checkpoint 0)", file=sys.stderr)


def _export(args) -> None:
    from transformer.interop.runs import export_marian

    result = export_marian(
        args.workdir,
        args.out_dir,
        checkpoint=args.checkpoint,
        ctranslate2_dir=args.ctranslate2,
        quantization=args.quantization,
    )
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    written = " and ".join(d for d in (result.marian_dir, result.ctranslate2_dir) if d)
    print(f"exported checkpoint {result.step} of {args.workdir} to {written}", file=sys.stderr)


def _export_ctranslate2(args) -> None:
    from transformer.interop.runs import export_ctranslate2

    result = export_ctranslate2(
        args.workdir, args.out_dir, checkpoint=args.checkpoint, quantization=args.quantization
    )
    print(
        f"exported checkpoint {result.step} of {args.workdir} to {result.ctranslate2_dir}",
        file=sys.stderr,
    )


COMMANDS = {
    "import-marian": _import,
    "export-marian": _export,
    "export-ctranslate2": _export_ctranslate2,
}


def main(argv: list[str] | None = None) -> int:
    """The `transformer-interop` console script."""
    args = _parser().parse_args(argv)
    demote_routine_notices()
    try:
        COMMANDS[args.command](args)
    except UserError as e:
        return report_user_error(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())

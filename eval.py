"""Score a trained run with sacreBLEU and chrF.

    python eval.py --workdir DIR [--checkpoint latest|best|STEP] [--split test]
        [--src FILE --ref FILE] [--average_last N] [--longer_than N|train]
        [--config.decode.field=value ...]

Translates the whole split (nothing filtered out), detokenizes, scores against the raw
references and writes DIR/eval/<name>.json with .src.txt, .hyp.txt and .ref.txt beside it.
"""

from transformer.cli.evaluate import main

if __name__ == "__main__":
    main()

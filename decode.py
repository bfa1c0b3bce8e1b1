"""Translate text with a trained run, streaming lines in order.

    python decode.py --workdir DIR [--checkpoint latest|best|STEP] [--input FILE|-]
        [--output FILE|-] [--config.decode.strategy=greedy|sample|beam]
        [--config.decode.temperature=T --config.decode.top_k=K --config.decode.top_p=P
         --config.decode.beam_size=N --config.decode.length_penalty=A
         --config.decode.num_samples=S --config.decode.seed=SEED ...]

An empty input line gives an empty output line; the same seed gives byte-identical output.
With n_best > 1 (beam) or num_samples > 1 (sample) each input gives that many lines,
tab-separated as `index<TAB>score<TAB>text`.
"""

from transformer.cli.decode import main

if __name__ == "__main__":
    main()

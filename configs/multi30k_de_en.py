"""Multi30k German -> English: configs/multi30k.py with the direction flipped.

Command:   python train.py --config configs/multi30k_de_en.py --workdir runs/multi30k_de_en \
               --config.data.path=../shared/data/multi30k
           python eval.py --workdir runs/multi30k_de_en --split test
Expected:  measured here (2 CPU cores): validation BLEU 27.2 / 36.7 / 39.2 / 40.4 at steps
           500 / 1000 / 1500 / 2000, and test2016 sacreBLEU 40.2, chrF 59.6 (beam 4, length
           penalty 1.0).
Run time:  55 minutes on 2 CPU cores (1.6 s per step, four beam-search validations).

Decoding was chosen on the validation split of this direction: length penalty 0.6 / 1.0 /
1.5 gave 40.2 / 40.8 / 40.4 BLEU (0.6 left hypotheses 3% short, 1.5 made them 2% long).
"""

from pathlib import Path

from transformer import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("multi30k.py"))
    config.data.reverse = True
    config.decode.length_penalty = 1.0  # chosen on the de->en validation split (docstring)
    return config

"""Multi30k German -> English: configs/multi30k.py with the direction flipped.

Command:   python train.py --config configs/multi30k_de_en.py --workdir runs/multi30k_de_en \
               --config.data.path=../shared/data/multi30k
           python eval.py --workdir runs/multi30k_de_en --split test
Expected:  target sacreBLEU >= 40 on test2016 (see the README's Results for measured figures).
Run time:  budgeted at <= 60 minutes of training on 2 CPU cores.
"""

from configs.multi30k import get_config as get_multi30k


def get_config():
    config = get_multi30k()
    config.data.reverse = True
    return config

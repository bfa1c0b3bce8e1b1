"""The config that this run recorded, for transformer-sweep --reproduce:
studies/multi30k_architecture_2026_12/pos_learned/lr_x2/4/config.json
"""

import os

from transformer.training import run_config


def get_config():
    return run_config.load_file(os.path.join(os.path.dirname(__file__), "recorded_config.json"))

"""The trained run behind the real-data speed benchmark (benchmarks/real_data_speed.py): the
Multi30k architecture study's Post-LN arm (configs/sweeps/multi30k_architecture.py) at the
learning rate its search chose (x2 of 2e-3), seed 1 - the study's run `post_ln/lr_x2/1`.

Command:   python train.py --config configs/bench_real.py --workdir runs/bench_post_ln
           RUN=runs/bench_post_ln DATA=../shared/data/multi30k benchmarks/side_by_side.sh OUT
Expected:  validation loss 2.904 (perplexity 18.2) at step 600 on this project's 2-core Intel
           Xeon machine (AVX-512, AMX); test2016 greedy BLEU 22.9 in real_data_speed.py.
Run time:  about two minutes of training on those 2 cores (600 steps).

Post-LN, LayerNorm, sinusoidal positions, ReLU and one tied embedding are what MarianMTModel
and CTranslate2 can hold, so all three translate with these very weights. The study's shared
settings and the arm's change are read from the sweep config, not restated here.
"""

import importlib.util
from pathlib import Path

from transformer import load_config_file

SWEEP = Path(__file__).with_name("sweeps") / "multi30k_architecture.py"
VARIANT = "post_ln"
LR_SCALE = 2.0  # the rate the study's search chose for this arm (lr_grid.csv)
SEED = 1


def _sweep():
    spec = importlib.util.spec_from_file_location("multi30k_architecture", SWEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_config():
    sweep = _sweep()
    study = sweep.get_config()
    config = load_config_file(SWEEP.parent.parent / Path(study["base"]).name)
    for key, value in {**study["overrides"], **sweep.VARIANTS[VARIANT]}.items():
        section, field = key.split(".")
        config[section][field] = value
    config.train.learning_rate *= LR_SCALE
    config.train.seed = SEED
    return config

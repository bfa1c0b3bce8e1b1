"""WMT14 English -> German, Transformer big: the 2017 paper's recipe, for accelerators.

Command:   python train.py --config configs/wmt14_ende_big.py --workdir runs/wmt14_big \
               [--config.data.data_dir=DIR] [--config.data.manual_dir=DIR]
           python eval.py --workdir runs/wmt14_big --average_last 20
Expected:  the literature reports 28.4 tokenized BLEU on newstest2014 for this model (Vaswani
           et al., 2017), about 28-28.6 sacreBLEU; an expectation for accelerators, not a
           figure measured by this project.
Run time:  300k steps: 3.5 days on 8 P100 GPUs in the paper.

configs/wmt14_ende_base.py with d_model 1024, 16 heads, d_ff 4096, dropout 0.3, the peak
learning rate that the inverse-square-root schedule gives at d_model 1024, 300k steps and
averaging of the last twenty checkpoints.
"""

from pathlib import Path

from transformer import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("wmt14_ende_base.py"))
    m = config.model
    m.d_model, m.num_heads, m.d_ff = 1024, 16, 4096
    m.dropout_rate = 0.3
    t = config.train
    t.num_steps = 300_000
    t.learning_rate = m.d_model**-0.5 * t.warmup_steps**-0.5  # 4.9e-4
    t.keep_checkpoints = 21
    return config

"""Transformer base (Vaswani et al., 2017, Table 3): d_model 512, 8 heads, d_ff 2048, 6+6 layers.

Command:   python train.py --config configs/transformer_base.py --workdir runs/base \
               --config.data.name=wmt14_translate/de-en
Expected:  ~27 sacreBLEU on newstest2014 en->de after ~100k steps on accelerators.
Run time:  about 12 hours on 8 GPUs; not practical on a 2-core CPU.
"""

from transformer import get_base_config


def get_config():
    config = get_base_config()
    config.data.vocab_size = 32000
    config.data.batching = "bucket"  # length buckets of about train.batch_tokens tokens
    config.train.batch_tokens = 4096
    return config

"""Transformer big (Vaswani et al., 2017, Table 3): d_model 1024, 16 heads, d_ff 4096, 6+6 layers.

Command:   python train.py --config configs/transformer_big.py --workdir runs/big \
               --config.data.name=wmt14_translate/de-en
Expected:  ~28.4 tokenized BLEU on newstest2014 en->de (the paper), on accelerators.
Run time:  about 3.5 days on 8 P100 GPUs in the paper; not practical on a 2-core CPU.
"""

from pathlib import Path

from transformer import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("transformer_base.py"))
    config.model.d_model = 1024
    config.model.num_heads = 16
    config.model.d_ff = 4096
    config.model.dropout_rate = 0.3
    return config

"""Default run: a small Transformer on the embedded synthetic corpus (no download needed).

Command:   python train.py --config configs/default.py --workdir runs/default
Expected:  test BLEU ~97 with eval.py --workdir runs/default (greedy; valid BLEU > 90 by step 750)
Run time:  about 25 minutes on 2 CPU cores (27 min measured with validation every 250 steps).
"""

from configs.base import get_base_config


def get_config():
    config = get_base_config()
    config.model.vocab_size = 1000
    config.model.d_model = 256
    config.model.num_heads = 4
    config.model.num_encoder_layers = 3
    config.model.num_decoder_layers = 3
    config.model.d_ff = 1024
    config.model.norm_position = "pre"
    config.model.max_len = 128
    config.model.dropout_rate = 0.1
    config.data.max_source_len = 48
    config.data.max_target_len = 48
    config.train.num_steps = 1500
    config.train.batch_size = 32
    config.train.learning_rate = 2e-3
    config.train.warmup_steps = 200
    config.train.schedule = "cosine"
    config.train.log_every = 50
    config.train.eval_every = 500
    config.train.checkpoint_every = 500
    config.train.eval_bleu_sentences = 200
    config.decode.strategy = "greedy"
    return config

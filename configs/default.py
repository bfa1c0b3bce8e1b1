"""Default run: a small Transformer on the embedded synthetic corpus (no download needed).

Command:   python train.py --config configs/default.py --workdir runs/default
Expected:  test BLEU 90.2, chrF 95.4 with eval.py --workdir runs/default (greedy), measured
           in a fresh venv on a clean clone; validation BLEU 70.7 at step 400 and 92.6 at
           step 800.
Run time:  3.7 minutes on the 2-core Intel Xeon machine for the README's first command
           (its pip install into that venv, then train.py: data, vocabulary, compilation,
           800 steps and two validations).

A 2+2-layer model on an 800-step cosine schedule: sized so the default run reaches BLEU 90
in a few minutes. The 3+3-layer model on the same schedule (--config.model.
num_encoder_layers=3 --config.model.num_decoder_layers=3) measured test BLEU 92.8 in 13.2
minutes; 1,500 steps of it reached 96.8.
"""

from transformer import get_base_config


def get_config():
    config = get_base_config()
    config.data.vocab_size = 1000
    config.model.d_model = 256
    config.model.num_heads = 4
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.model.d_ff = 1024
    config.model.norm_position = "pre"
    config.model.max_len = 128
    config.model.dropout_rate = 0.1
    config.data.max_source_len = 48
    config.data.max_target_len = 48
    config.train.num_steps = 800
    config.train.batch_size = 32
    config.train.learning_rate = 2e-3
    config.train.warmup_steps = 150
    config.train.schedule = "cosine"
    config.train.log_every = 50
    config.train.eval_every = 400
    config.train.checkpoint_every = 400
    config.train.eval_bleu_sentences = 200
    config.decode.strategy = "greedy"
    return config

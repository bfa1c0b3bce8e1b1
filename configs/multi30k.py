"""Multi30k (Flickr30k captions) English -> German; --config.data.reverse=True for de -> en.

Data: the Multi30k task-1 files (train 29,000 / valid 1,014 / test2016 1,000 pairs) as
`{train,valid,test}.{en,de}` in one directory, raw cased text (github.com/multi30k/dataset,
data/task1/raw; research use only). Here they lie at ../shared/data/multi30k.

Command:   python train.py --config configs/multi30k.py --workdir runs/multi30k_en_de \
               --config.data.path=../shared/data/multi30k
           python eval.py --workdir runs/multi30k_en_de --checkpoint latest --average_last 5
Expected:  the recipe's target is sacreBLEU >= 38 on test2016 en->de (>= 40 de->en); see the
           README's Results table for what the project's own commands measured.
Run time:  budgeted at <= 60 minutes of training on 2 CPU cores.

A small model with strong regularisation: Multi30k is small (29k pairs), so a 3+3-layer,
d_model 256 Pre-LN Transformer with dropout 0.3 and label smoothing 0.1 on a shared 8k
SentencePiece vocabulary, sequence packing and a cosine schedule.
"""

from configs.base import get_base_config


def get_config():
    config = get_base_config()
    m = config.model
    m.vocab_size = 8000
    m.d_model, m.num_heads, m.d_ff = 256, 4, 1024
    m.num_encoder_layers = m.num_decoder_layers = 3
    m.norm_position = "pre"
    m.max_len = 128
    m.dropout_rate = 0.3
    m.attention_dropout_rate = 0.1
    d = config.data
    d.name = "parallel_text"
    d.path = "../shared/data/multi30k"
    d.source_lang, d.target_lang = "en", "de"
    d.max_source_len = d.max_target_len = 64
    d.batching = "pack"
    t = config.train
    t.num_steps = 6000
    t.batch_size = 48  # packed rows of 64 + 64 tokens: ~3k real target tokens per step
    t.learning_rate = 1e-3
    t.schedule = "cosine"
    t.warmup_steps = 800
    t.weight_decay = 0.0
    t.label_smoothing = 0.1
    t.log_every = 100
    t.eval_every = 1000
    t.checkpoint_every = 500
    t.keep_checkpoints = 6
    t.eval_bleu_sentences = 1014
    dec = config.decode
    dec.strategy = "beam"
    dec.beam_size = 4
    dec.length_penalty = 0.6
    dec.batch_size = 64
    return config

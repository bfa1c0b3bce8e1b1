"""Multi30k (Flickr30k captions) English -> German; --config.data.reverse=True for de -> en.

Data: the Multi30k task-1 files (train 29,000 / valid 1,014 / test2016 1,000 pairs) as
`{train,valid,test}.{en,de}` in one directory, raw cased text (github.com/multi30k/dataset,
data/task1/raw; research use only). Here they lie at ../shared/data/multi30k.

Command:   python train.py --config configs/multi30k.py --workdir runs/multi30k_en_de \
               --config.data.path=../shared/data/multi30k
           python eval.py --workdir runs/multi30k_en_de --split test
Expected:  measured here (2 CPU cores): validation BLEU 24.5 / 33.3 / 36.1 / 36.4 at steps
           500 / 1000 / 1500 / 2000, and test2016 sacreBLEU 36.4, chrF 61.2 (beam 4, length
           penalty 1.5); short of the 38 target, see the README's Results for why.
Run time:  58 minutes on 2 CPU cores (1.6 s per step, four beam-search validations).

A small model sized for the hour: a 3+3-layer, d_model 256 Pre-LN Transformer on a shared 8k
SentencePiece vocabulary with sequence packing, dropout 0.2 and label smoothing 0.1, 2,000
steps of ~2k target tokens (about 7 epochs) on a cosine schedule. Checkpoints every 100 steps
feed eval.py's --average_last. Decoding was chosen on the validation split: length penalty
0.6 / 1.0 / 1.5 gave 36.4 / 37.0 / 37.1 BLEU (0.6 left hypotheses 6% short, BP 0.94), and
averaging the last five checkpoints gave nothing over the last one (the cosine schedule has
already annealed them to the same point).
"""

from transformer import get_base_config


def get_config():
    config = get_base_config()
    m = config.model
    m.d_model, m.num_heads, m.d_ff = 256, 4, 1024
    m.num_encoder_layers = m.num_decoder_layers = 3
    m.norm_position = "pre"
    m.max_len = 128
    m.dropout_rate = 0.2
    m.attention_dropout_rate = 0.1
    d = config.data
    d.name = "parallel_text"
    d.path = "../shared/data/multi30k"
    d.source_lang, d.target_lang = "en", "de"
    d.max_source_len = d.max_target_len = 64
    d.batching = "pack"
    t = config.train
    t.num_steps = 2000
    t.batch_size = 32  # packed rows of 64 + 64 tokens: ~2k real target tokens per step
    t.learning_rate = 1.5e-3
    t.schedule = "cosine"
    t.warmup_steps = 300
    t.weight_decay = 0.0
    t.label_smoothing = 0.1
    t.log_every = 100
    t.eval_every = 500
    t.checkpoint_every = 100
    t.keep_checkpoints = 6
    t.eval_bleu_sentences = 1014
    dec = config.decode
    dec.strategy = "beam"
    dec.beam_size = 4
    dec.length_penalty = 1.5  # chosen on the validation split (docstring)
    dec.batch_size = 64
    return config

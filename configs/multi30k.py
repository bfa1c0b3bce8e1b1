"""Multi30k (Flickr30k captions) English -> German; --config.data.reverse=True for de -> en.

Data: the Multi30k task-1 files (train 29,000 / valid 1,014 / test2016 1,000 pairs) as
`{train,valid,test}.{en,de}` in one directory, raw cased text (github.com/multi30k/dataset,
data/task1/raw; research use only). Here they lie at ../shared/data/multi30k.

Command:   python train.py --config configs/multi30k.py --workdir runs/multi30k_en_de \
               --config.data.path=../shared/data/multi30k
           python eval.py --workdir runs/multi30k_en_de --split test
Expected:  measured on this project's 2-core Intel Xeon machine (AVX-512, AMX): validation
           BLEU 36.4 / 40.6 / 41.4 at steps 1500 / 3000 / 4500, and test2016 sacreBLEU 38.9,
           chrF 64.2 (beam 4, length penalty 1.5).
Run time:  51 minutes of training on those 2 cores (0.65 s per step, three beam-search
           validations); the same model shape took 1.6 s per step on the AMD EPYC (AVX2)
           machine, where 4,500 steps would take two hours.

A small model sized for the hour: a 3+3-layer, d_model 256 Pre-LN Transformer with rotary
positions on a shared 8k SentencePiece vocabulary with sequence packing, dropout 0.2 and label
smoothing 0.1, 4,500 steps of ~2k target tokens (about 16 epochs) on a cosine schedule peaking
at 3e-3. Two of its choices come from the Multi30k study
(configs/sweeps/multi30k_architecture.py, README "Ablations"): every arm's learning-rate search
but one puts its lowest validation loss at twice the study's rate of 2e-3, so this rate is
raised above it (1.5x), and there RoPE has the lowest validation loss of the 16 arms (2.862
against the baseline's 2.928, mean of its 5 compared seeds) and leads sinusoidal positions
by 0.42 test BLEU. That lead does not survive the seed-aware test (unadjusted interval
[-0.08, +0.93], p 0.091 before Holm's correction, 0.868 after; its 5 seeds could only detect
about 0.95 BLEU): RoPE rests on its validation loss and on outside reports, not on a
significant test gain here. Warmup does rest on one: dropping it costs 1.65 BLEU (Holm
p 0.011); Pre-LN over Post-LN does not (Post-LN +0.11, MDD 0.93). The learning rate, RoPE
and the step count changed together here; these runs do not separate their shares. Decoding
was chosen on the validation split: length penalty 0.6 / 1.0 / 1.5 gave 41.30 / 41.36 / 41.40
BLEU, a flat choice.
"""

from transformer import get_base_config


def get_config():
    config = get_base_config()
    m = config.model
    m.d_model, m.num_heads, m.d_ff = 256, 4, 1024
    m.num_encoder_layers = m.num_decoder_layers = 3
    m.norm_position = "pre"
    m.position = "rope"
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
    t.num_steps = 4500
    t.batch_size = 32  # packed rows of 64 + 64 tokens: ~2k real target tokens per step
    t.learning_rate = 3e-3
    t.schedule = "cosine"
    t.warmup_steps = 300
    t.weight_decay = 0.0
    t.label_smoothing = 0.1
    t.log_every = 100
    t.eval_every = 1500
    t.checkpoint_every = 500
    t.keep_checkpoints = 3
    t.eval_bleu_sentences = 1014
    dec = config.decode
    dec.strategy = "beam"
    dec.beam_size = 4
    dec.length_penalty = 1.5  # chosen on the validation split (docstring)
    dec.batch_size = 64
    return config

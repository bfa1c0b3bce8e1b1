"""WMT14 English -> German, Transformer base: the 2017 paper's recipe, for accelerators.

Command:   python train.py --config configs/wmt14_ende_base.py --workdir runs/wmt14_base \
               [--config.data.data_dir=DIR] [--config.data.manual_dir=DIR]
           python eval.py --workdir runs/wmt14_base --average_last 5
Expected:  the literature reports 27.3 tokenized BLEU on newstest2014 for this model (Vaswani
           et al., 2017), about 27-27.5 sacreBLEU; an expectation for accelerators, not a
           figure measured by this project (no accelerator or WMT download here).
Run time:  100k steps of ~25k source + ~25k target tokens: about 12 hours on 8 P100-class
           GPUs in the paper, a few hours on a current GPU or TPU slice.

TFDS prepares `wmt14_translate/de-en` on first use (about 4.5M pairs; it downloads the
archives, or reads them from data.manual_dir when pre-downloaded). A 32k SentencePiece
vocabulary shared by both languages, trained on 1M sentences; Adam (0.9, 0.98, 1e-9) with the
inverse-square-root schedule, peak d_model^-0.5 * 4000^-0.5 after 4,000 warmup steps; label
smoothing 0.1; dropout 0.1; beam 4 with length penalty 0.6; averaging of the last five
checkpoints (one every 1,000 steps). With fewer than 8 devices keep the global batch with
--config.train.grad_accum_steps.
"""

from pathlib import Path

from transformer import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("transformer_base.py"))
    m = config.model
    m.max_len = 256
    m.dtype = "bfloat16"  # compute dtype on accelerators; parameters stay float32
    d = config.data
    d.name = "wmt14_translate/de-en"
    d.source_lang, d.target_lang = "en", "de"
    d.valid_split, d.test_split = "validation", "test"  # newstest2013, newstest2014
    d.shared_vocab = True
    d.vocab_train_sentences = 1_000_000
    d.max_source_len = d.max_target_len = 256
    d.batching = "pack"
    t = config.train
    t.batch_size = 96  # packed rows of 256 + 256 tokens: ~25k tokens per side per step
    t.batch_tokens = 0
    t.num_steps = 100_000
    t.schedule = "rsqrt"
    t.warmup_steps = 4000
    t.learning_rate = m.d_model**-0.5 * t.warmup_steps**-0.5  # 7.0e-4, the paper's peak
    t.adam_b1, t.adam_b2, t.adam_eps = 0.9, 0.98, 1e-9
    t.label_smoothing = 0.1
    t.grad_clip_norm = 0.0
    t.log_every = 100
    t.eval_every = 5000
    t.checkpoint_every = 1000
    t.keep_checkpoints = 6
    t.eval_bleu_sentences = 3000  # all of newstest2013
    dec = config.decode
    dec.strategy = "beam"
    dec.beam_size = 4
    dec.length_penalty = 0.6
    dec.max_len_a, dec.max_len_b = 1.0, 50  # the paper: input length + 50
    return config

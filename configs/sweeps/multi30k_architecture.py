"""Architecture ablations on Multi30k en->de, one factor at a time: every arm at its own tuned
learning rate, five seeds per arm, an A/A arm, and each variant against the baseline by the
seed-aware test (seeds + test set) beside sacreBLEU's paired bootstrap (test set only).

Command:   transformer-sweep --config configs/sweeps/multi30k_architecture.py \
               --workdir studies/multi30k_architecture_2026_12 [--only VARIANT ...] [--plan 0.5]
Expected:  16 arms (15 variants + the baseline's A/A arm) x 5 seeds. Each arm's rate is
           searched on a seed of the search's own, 0 (A/A: 1000), from x0.5, x1, x2 of 2e-3,
           widening by x2 while the lowest final validation loss sits at an edge (cap
           x1/4 .. x8), then its compared seeds 1-5 (A/A: 1001-1005) run at the chosen rate:
           80 reported runs plus 3-5 search points per arm. results.md gives test2016
           BLEU (greedy, all 1,000 sentences), each arm's between-seed sd, its difference
           to the baseline with the seed-aware 95% interval, Holm-corrected p and minimum
           detectable difference at 80% power, sacreBLEU's paired bootstrap over the pooled
           seeds, BLEU on the 143 sources longer than any training sentence (> 20 tokens),
           test perplexity of the references and the chosen rate with its sensitivity.
           The README's "Ablations" holds the table and a reading.
Planning:  five seeds are what about 14 hours of 2 CPU cores hold. Read as a pilot
           (`--plan 0.5`, README "Ablations"), its runs give an MDD of 0.93 BLEU at 5 seeds
           (1.57 at Holm's first step over 14 variants); 0.5 BLEU would need 14 seeds per
           arm (25 under Holm).
Run time:  5-7 minutes of training and evaluation per run, two at a time on 2 cores
           (runs.csv holds each run's time): the 143 runs of the committed study took 27.0
           run-hours in all. The sweep resumes where it stopped, so it runs in pieces. On
           GPUs use --parallel (one run per GPU).

A reduced-budget study so that it runs in hours on 2 CPU cores: every run is
configs/multi30k.py cut to a 2+2-layer d_model 128 model (4 heads of 32, d_ff 512, Pre-LN,
ReLU, sinusoidal positions, dropout 26/256 = 0.1016) on a 600-step cosine schedule with
80 warmup steps (64 packed rows of 20 + 20 tokens, ~950 target tokens per step: 1.8 epochs). Its
rankings are of early training, where how fast a variant optimises counts as much as what it
can reach; the full recipe's hour per run is what would settle small gaps.

Length generalisation: training keeps only the pairs whose source and target both have at most
20 tokens (77.5% of them; the median sentence has 15), so positions past 20 are never trained;
eval.py --longer_than=train scores, from the same translations, the 143 test sentences whose
source is longer, and eval.py's length buckets (<=10, 11-20, 21-30, 31-40, >40 tokens) give
the curve. Each variant changes one thing from the baseline. The gated FFNs (SwiGLU, GeGLU)
keep d_ff in their raw arm, so they have ~50% more FFN parameters; their `_matched` arm
solves d_ff so that the parameter count equals the baseline's within 1%.
"""

# A plain dict keeps the variants in this order (a ConfigDict would sort them).
VARIANTS = {
    "baseline": {},
    # Normalisation position x warmup.
    "pre_ln_no_warmup": {"train.warmup_steps": 0},
    "post_ln": {"model.norm_position": "post"},
    "post_ln_no_warmup": {"model.norm_position": "post", "train.warmup_steps": 0},
    # FFN activation (baseline: relu).
    "gelu_tanh": {"model.activation": "gelu_tanh"},
    "swiglu": {"model.activation": "swiglu"},
    "geglu": {"model.activation": "geglu"},
    # Positions (baseline: sinusoidal).
    "pos_learned": {"model.position": "learned"},
    "pos_rope": {"model.position": "rope"},
    "pos_alibi": {"model.position": "alibi"},
    "pos_relative": {"model.position": "relative"},
    # Heads at fixed d_model 128 (baseline: 4 heads of 32).
    "heads_1": {"model.num_heads": 1},
    "heads_8": {"model.num_heads": 8},
}


def get_config():
    return {
        "base": "configs/multi30k.py",
        "overrides": {
            "data.path": "../shared/data/multi30k",
            "data.max_source_len": 20,
            "data.max_target_len": 20,
            "model.num_encoder_layers": 2,
            "model.num_decoder_layers": 2,
            "model.d_model": 128,
            "model.d_ff": 512,
            # The baseline's architecture, stated so that the recipe's own choices (RoPE) do
            # not move it: Pre-LN, ReLU, sinusoidal positions.
            "model.norm_position": "pre",
            "model.activation": "relu",
            "model.position": "sinusoidal",
            # 26/256 = 0.1016: one random byte per element (model/dropout.py), the rate every
            # run of this study trains with.
            "model.dropout_rate": 26 / 256,
            "train.batch_size": 64,  # packed rows of 20 + 20 tokens: ~950 target tokens
            "train.num_steps": 600,
            "train.warmup_steps": 80,
            "train.learning_rate": 2e-3,
            "train.log_every": 50,
            "train.eval_every": 600,
            "train.eval_bleu_sentences": 0,  # validation loss only; BLEU comes from eval.py
            "train.checkpoint_every": 600,
            "train.keep_checkpoints": 1,
        },
        "variants": VARIANTS,
        "matched": {
            name + "_matched": {"variant": name, "match": "params", "solve": "model.d_ff"}
            for name in ("swiglu", "geglu")
        },
        # Every arm searched on seed 0 (A/A: 1000), a seed of the search's own, from x0.5,
        # x1, x2, widened while the best point is at an edge, up to x1/4 .. x8 (a choice at
        # the cap is flagged), then its five compared seeds at the chosen rate.
        "lr_grid": {
            "scales": [0.5, 1.0, 2.0],
            "min_scale": 0.25,
            "max_scale": 8.0,
            "tune_seeds": [0],
        },
        # The baseline again under seeds 1001-1005, searched and reported like a variant: the
        # study's own false-positive check.
        "aa_arm": True,
        "seeds": [1, 2, 3, 4, 5],
        "eval_split": "test",
        "eval_overrides": {"decode.strategy": "greedy"},
        "eval_longer_than": "train",
        "eval_score_references": True,
        "parallel": 1,
    }

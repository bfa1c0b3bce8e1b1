"""Architecture ablations on Multi30k en->de (configs/multi30k.py), one factor at a time.

Command:   python -m transformer.sweep --config configs/sweeps/multi30k_architecture.py \
               --workdir runs/sweep_multi30k [--only post_ln ...] [--parallel N]
Expected:  12 variants x 2 seeds = 24 runs; results.md ranks them by test2016 BLEU (beam 4).
           Post-LN without warmup may diverge: it is then recorded as diverged, not fatal.
Run time:  each run is a full configs/multi30k.py training (budgeted at <= 60 minutes on
           2 CPU cores), so about 24 hours on 2 CPU cores; on GPUs run with --parallel
           (one run per GPU), or pick variants with --only.

Every variant changes one thing from the base (Pre-LN, ReLU, sinusoidal positions, 4 heads at
d_model 256, 800 warmup steps, beam 4). The gated FFNs (SwiGLU) keep d_ff, so they have ~50%
more FFN parameters; the results table lists the parameter count of each variant.
"""


def get_config():
    variants = {
        "baseline": {},
        # Normalisation position x warmup.
        "pre_ln_no_warmup": {"train.warmup_steps": 0},
        "post_ln": {"model.norm_position": "post"},
        "post_ln_no_warmup": {"model.norm_position": "post", "train.warmup_steps": 0},
        # FFN activation (baseline: relu).
        "gelu": {"model.activation": "gelu"},
        "swiglu": {"model.activation": "swiglu"},
        # Positions (baseline: sinusoidal).
        "pos_learned": {"model.position": "learned"},
        "pos_rope": {"model.position": "rope"},
        "pos_alibi": {"model.position": "alibi"},
        "pos_relative": {"model.position": "relative"},
        # Heads at fixed d_model 256 (baseline: 4 heads of 64).
        "heads_1": {"model.num_heads": 1},
        "heads_8": {"model.num_heads": 8},
    }
    # A plain dict keeps the variants in this order (a ConfigDict would sort them).
    return {
        "base": "configs/multi30k.py",
        "overrides": {"data.path": "../shared/data/multi30k"},
        "variants": variants,
        "seeds": [0, 1],
        "eval_split": "test",
        "eval_overrides": {"decode.strategy": "beam", "decode.beam_size": 4},
        "parallel": 1,
    }

"""Length generalisation of each positional scheme on Multi30k en->de (configs/multi30k.py).

Command:   python -m transformer.sweep --config configs/sweeps/multi30k_length.py \
               --workdir runs/sweep_multi30k_length [--only pos_rope ...] [--parallel N]
Expected:  5 variants x 1 seed; results.md gives test2016 BLEU on all 1,000 sentences and on
           the 143 whose source is longer than 20 tokens, i.e. longer than any sentence the
           model was trained on. Schemes that extrapolate (relative, ALiBi, RoPE) should lose
           less on those than learned absolute positions, whose table rows past 20 are never
           trained.
Run time:  each run is a configs/multi30k.py training (~1 hour on 2 CPU cores): about 5 hours;
           on GPUs use --parallel (one run per GPU).

Training keeps the 77.5% of pairs whose source and target both have at most 20 tokens (EOS
included; the run's 8k vocabulary: the median sentence has 15). eval.py --longer_than=train
then scores, from the same translations of the full test split, the sentences over that cap.
"""


def get_config():
    positions = ["sinusoidal", "learned", "rope", "alibi", "relative"]
    return {
        "base": "configs/multi30k.py",
        "overrides": {
            "data.path": "../shared/data/multi30k",
            "data.max_source_len": 20,
            "data.max_target_len": 20,
        },
        "variants": {f"pos_{p}": {"model.position": p} for p in positions},
        "seeds": [0],
        "eval_split": "test",
        "eval_overrides": {"decode.strategy": "beam", "decode.beam_size": 4},
        "eval_longer_than": "train",
        "parallel": 1,
    }

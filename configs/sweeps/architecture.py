"""Smoke sweep: Pre-LN vs Post-LN x ReLU vs SwiGLU on a shrunk configs/default.py.

Command:   transformer-sweep --config configs/sweeps/architecture.py \
               --workdir runs/sweep_architecture [--readme README.md]
Expected:  4 runs (1 seed each); results.md/csv, valid_loss.png, bleu.png and length_bleu.png
           in the workdir. Measured here: test BLEU 32-50 after 800 steps of a 2+2-layer
           d_model 128 model
           (not converged: the ordering of the variants is what the sweep shows; the
           README's "Sweeps" section holds the table).
Run time:  758 s for the 4 runs (3-4 minutes each: training + test evaluation) on 2 idle
           CPU cores.
"""

from transformer.research.sweep import grid


def get_config():
    # A plain dict keeps the variants in this order (a ConfigDict would sort them).
    return {
        "base": "configs/default.py",
        # A smaller model and a short schedule so the whole sweep takes minutes.
        "overrides": {
            "model.d_model": 128,
            "model.d_ff": 512,
            "model.num_heads": 4,
            "model.num_encoder_layers": 2,
            "model.num_decoder_layers": 2,
            "data.vocab_size": 500,
            "data.synthetic_train_size": 10000,
            "data.synthetic_eval_size": 100,
            "data.max_source_len": 40,
            "data.max_target_len": 40,
            "train.num_steps": 800,
            "train.warmup_steps": 100,
            "train.log_every": 50,
            "train.eval_every": 200,
            "train.checkpoint_every": 400,
            "train.eval_bleu_sentences": 0,  # BLEU once, on the test split, by eval.py
            "decode.batch_size": 100,  # one decoding batch: one compilation
        },
        "variants": grid(
            {"model.norm_position": ["pre", "post"], "model.activation": ["relu", "swiglu"]}
        ),
        "seeds": [0],
        "eval_split": "test",
        "eval_overrides": {"decode.strategy": "greedy"},
        "parallel": 1,
    }

"""Smoke sweep: Pre-LN vs Post-LN x ReLU vs SwiGLU on a shrunk configs/default.py, with an A/A
arm, a learning-rate search per variant and two seeds, so that every column of the table
(the seed-aware test, the A/A row, the minimum detectable difference, the tuned rates) comes
out of one command.

Command:   transformer-sweep --config configs/sweeps/architecture.py \
               --workdir runs/sweep_architecture [--readme README.md]
Expected:  5 arms (4 variants + the baseline's A/A arm) x 2 seeds; each arm's learning rate
           searched on its first seed from x0.5, x1, x2 (widened up to x4 / x0.25), then
           its second seed at the chosen rate: 22 runs, test BLEU 10-22 at the chosen
           rates (measured here).
           results.md/csv, runs.csv, lr_grid.csv and the plots in the workdir. A 2+2-layer
           d_model 128 model after 400 steps has not converged: the table tests the tool,
           it is not a finding (two seeds give Welch's test about 1-2 degrees of freedom,
           hence wide intervals).
Run time:  2,013 s for the 22 runs on the 2-core AMD EPYC machine with a lowest-priority
           job beside it (an upper bound; 71-97 s of training per run, runs.csv).
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
            "train.num_steps": 400,
            "train.warmup_steps": 50,
            "train.log_every": 50,
            "train.eval_every": 200,
            "train.checkpoint_every": 400,
            "train.eval_bleu_sentences": 0,  # BLEU once, on the test split, by eval.py
            "decode.batch_size": 100,  # one decoding batch: one compilation
        },
        "variants": grid(
            {"model.norm_position": ["pre", "post"], "model.activation": ["relu", "swiglu"]}
        ),
        "aa_arm": True,
        # Tuned on each arm's first compared seed, so that two seeds make the whole smoke
        # sweep; a study tunes on seeds of its own (the default, lr_grid.py).
        "lr_grid": {
            "scales": [0.5, 1.0, 2.0],
            "min_scale": 0.25,
            "max_scale": 4.0,
            "tune_seeds": "first",
        },
        "seeds": [0, 1],
        "eval_split": "test",
        "eval_overrides": {"decode.strategy": "greedy"},
        "parallel": 1,
    }

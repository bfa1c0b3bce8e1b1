"""A run built from my_lab's pieces: KERPLE-log positions, squared ReLU, min-p sampling.

Commands (from the repository root; my_lab is found through PYTHONPATH, as a package of
your own would be, or installed):
    export PYTHONPATH=examples/plugin_lab
    python train.py --config examples/plugin_lab/lab.py --workdir runs/lab
    python eval.py --workdir runs/lab
    echo "the cat sees the dog" | python decode.py --workdir runs/lab \
        --config.decode.strategy=sample
    transformer-sweep --config examples/plugin_lab/lab_sweep.py --workdir runs/lab_sweep
The run records plugins.modules in runs/lab/config.json, so eval.py, decode.py, the sweep,
analyze and interop export import my_lab by themselves; without it on PYTHONPATH they stop
with a one-line error naming the module and the run.

The model is configs/default.py's (a 2+2-layer Pre-LN Transformer on the embedded synthetic
corpus) with the three pieces swapped in. Sampling draws from the tokens at least a tenth
as likely as the best one (decode.filters); greedy and beam search, which pick the best
token anyway, skip that filter.
"""

from transformer import get_base_config


def get_config():
    config = get_base_config()
    config.plugins.modules = ("my_lab",)  # imported before the config is read
    config.model.position = "kerple_log"
    config.model.activation = "relu2"
    config.decode.filters = "min_p=0.1"
    config.data.vocab_size = 1000
    config.model.d_model = 256
    config.model.num_heads = 4
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.model.d_ff = 1024
    config.model.norm_position = "pre"
    config.model.max_len = 128
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

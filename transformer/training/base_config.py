"""Base configuration shared by every config file; variants state only their differences.

Not a runnable config by itself: `configs/default.py` and the others call `get_base_config()`
and change what differs. Every field is commented here, once.
"""

import ml_collections


def get_base_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.model = _model_section()
    config.data = _data_section()
    config.train = _train_section()
    config.decode = _decode_section()
    config.plugins = _plugins_section()
    return config


def _plugins_section() -> ml_collections.ConfigDict:
    """The user's modules that register classes (positional schemes, activations, norms,
    sampling filters) with the package's registries (docs/extending.md)."""
    plugins = ml_collections.ConfigDict()
    # Module names (importable: installed or on PYTHONPATH), imported before the config is
    # validated, by every command that builds or restores the model from this config.
    plugins.modules = ()
    return plugins


def _model_section() -> ml_collections.ConfigDict:
    """Mirrors transformer.ModelConfig (see its docstring for each switch)."""
    model = ml_collections.ConfigDict()
    # Embedding rows. None (default) = the run's tokenizer's piece count, resolved by train.py
    # and recorded in config.json; an int must be >= that count (spare rows are never fed).
    model.vocab_size = ml_collections.config_dict.placeholder(int)
    model.d_model = 512
    model.num_heads = 8
    model.num_kv_heads = ml_collections.config_dict.placeholder(int)  # None = num_heads
    model.num_encoder_layers = 6
    model.num_decoder_layers = 6
    model.d_ff = 2048
    # The next four name registered classes; the registries list the valid names (an unknown
    # one is an error that lists them) and a module in plugins.modules can add more.
    model.activation = "relu"  # model/activations.py ACTIVATIONS
    model.norm_position = "post"  # model/normalization.py PLACEMENTS (Pre-LN or Post-LN)
    model.norm_type = "layernorm"  # model/normalization.py NORMS
    model.position = "sinusoidal"  # model/position_schemes.py SCHEMES
    model.max_len = 256  # longest source or target sequence, in tokens
    model.dropout_rate = 0.1
    model.attention_dropout_rate = 0.0
    model.activation_dropout_rate = 0.0
    model.share_embeddings = True  # one table for source and target (needs a shared vocab)
    model.tie_output = True  # output projection = target embedding transposed
    model.output_bias = False  # a learned bias on the logits (imported Marian models)
    model.dtype = "float32"  # compute dtype: float32 | bfloat16 (params stay float32)
    # tied output projection operands: float32 | compute (model.dtype, float32 sums)
    model.logits_dtype = "float32"
    model.use_bias = True
    model.norm_eps = 1e-6
    model.residual_init_scale = ml_collections.config_dict.placeholder(float)
    model.relative_buckets = 32
    model.relative_max_distance = 128
    model.rope_base = 10000.0
    model.attention_impl = "einsum"  # einsum | xla | cudnn (jax.nn.dot_product_attention)
    return model


def _data_section() -> ml_collections.ConfigDict:
    data = ml_collections.ConfigDict()
    # 'synthetic' (the embedded corpus), 'parallel_text' (local {split}.{lang} files in
    # data.path), or any TFDS translation dataset, e.g. 'wmt14_translate/de-en'.
    data.name = "synthetic"
    data.path = ""  # directory of {split}.{lang} files for 'parallel_text'
    data.source_lang = "en"
    data.target_lang = "de"
    data.reverse = False  # True swaps the direction (source_lang <-> target_lang)
    data.data_dir = ""  # TFDS data dir; '' = <workdir>/tfds
    data.manual_dir = ""  # TFDS manual dir for pre-downloaded archives
    data.download_dir = ""  # TFDS download dir
    data.train_split = "train"
    data.valid_split = "valid"
    data.test_split = "test"
    data.synthetic_train_size = 20000  # sentences in the embedded corpus's train split
    data.synthetic_eval_size = 500  # sentences in its valid and test splits
    data.synthetic_seed = 0
    # Tokenizer: SentencePiece trained on the train split. data.vocab_size pieces are asked
    # for (a soft limit: a small corpus gives fewer, and the model follows the tokenizer).
    data.vocab_size = 8000
    data.vocab_type = "unigram"  # unigram | bpe
    data.shared_vocab = True  # one vocabulary for both languages
    data.vocab_path = ""  # an existing SentencePiece .model to use instead of training one
    data.vocab_train_sentences = 1_000_000  # at most this many sentences train the vocab
    # Training examples longer than these (in tokens, EOS included) are dropped and counted.
    data.max_source_len = 64
    data.max_target_len = 64
    # Subword regularisation (Kudo 2018), training split only: each draw of a training pair is
    # segmented afresh by SentencePiece's sampler, seeded from train.seed, the epoch and the
    # pair (resume stays exact); 0 = always the best segmentation, as in validation and
    # decoding. Unigram: one of the spm_nbest best segmentations (-1 = any) with probability
    # ~ P(segmentation) ** alpha (smaller alpha, more varied); BPE: BPE-dropout with drop
    # probability alpha (<= 1), spm_nbest unused. A draw longer than max_source_len /
    # max_target_len falls back to the best segmentation (data/sampling.py).
    data.spm_alpha = 0.0
    data.spm_nbest = -1
    # 'pack': several sentences per row (segment ids + positions), fixed [rows, len] shape;
    # 'bucket': length buckets, batch size per bucket from train.batch_tokens;
    # 'pad': fixed batch_size sentences padded to max lengths.
    data.batching = "pack"
    data.num_workers = 0  # batches a background thread builds ahead (0 = none: built on demand)
    return data


def _train_section() -> ml_collections.ConfigDict:
    train = ml_collections.ConfigDict()
    train.num_steps = 100_000
    train.batch_size = 64  # global rows (sentences, or packed rows) per step
    train.batch_tokens = 0  # >0: bucketed batches of about this many tokens (source or target)
    train.learning_rate = 1e-3  # peak learning rate
    train.schedule = "rsqrt"  # rsqrt | cosine | constant (all with linear warmup)
    train.warmup_steps = 4000
    train.adam_b1 = 0.9
    train.adam_b2 = 0.98
    train.adam_eps = 1e-9
    train.weight_decay = 0.0
    train.grad_clip_norm = 1.0  # 0 = off
    train.grad_accum_steps = 1
    train.label_smoothing = 0.1
    train.scheduled_sampling_rate = 0.0  # ablation: share of decoder inputs from the model
    train.seed = 0
    train.parallelism = "mesh"  # mesh | pmap
    train.fsdp = 1  # size of the mesh's 'fsdp' axis (parameter/optimizer sharding)
    train.remat = "none"  # none | block: recompute each block's activations in the backward pass
    # auto | on | off: the dense products' hand-written CPU backward products
    # (model/differentiation.py); auto: on where they pay (run_state.HAND_WRITTEN_VJPS_AUTO).
    train.hand_written_vjps = "auto"
    # auto | threefry | philox: where dropout masks draw their bits (model/dropout.py); auto:
    # philox on GPUs, threefry elsewhere (run_state.DROPOUT_BITS_AUTO). Rates are exact either way.
    train.dropout_bits = "auto"
    # Self-attention's query, key and value layers multiplied as one product (same values and
    # parameters; model/projection_policy.py). On the CPU it gains nothing (docs/performance.md).
    train.fused_qkv = False
    train.log_every = 50
    train.eval_every = 1000
    train.checkpoint_every = 1000
    train.keep_checkpoints = 3
    train.eval_bleu_sentences = 500  # validation sentences decoded for BLEU at each eval
    # Stop once validation `early_stopping_metric` (bleu | loss) has not improved by more
    # than min_delta for `patience` validations (0 = off); the best checkpoint is then kept
    # and read by eval.py and decode.py by default (training/early_stopping.py)
    train.early_stopping_patience = 0
    train.early_stopping_metric = "bleu"
    train.early_stopping_min_delta = 0.0
    return train


def _decode_section() -> ml_collections.ConfigDict:
    """Used for validation BLEU, eval.py and decode.py."""
    decode = ml_collections.ConfigDict()
    decode.strategy = "beam"  # greedy | sample | beam
    decode.beam_size = 4
    decode.length_penalty = 0.6  # GNMT alpha: score / ((5 + len) / 6) ** alpha
    decode.n_best = 1
    decode.temperature = 1.0
    decode.top_k = 0  # 0 = off
    decode.top_p = 1.0  # 1.0 = off
    # More sampling filters, applied after min-length and temperature and before top-k and
    # top-p, in the order given: comma-separated names registered in inference/filters.py
    # FILTERS, each with its one number if it takes one, e.g. "min_p=0.05" (a filter of
    # examples/plugin_lab); '' = none
    decode.filters = ""
    decode.num_samples = 1
    decode.seed = 0
    decode.max_len_a = 1.5  # output length <= max_len_a * source_length + max_len_b
    decode.max_len_b = 10
    decode.min_len = 0
    decode.batch_size = 64  # sentences per decoding batch
    # none | int8 | bfloat16: the decoder loop's products in int8 (model/quantize.py) or with
    # bfloat16 operands and float32 sums (model/projection_policy.py)
    decode.quantize = "none"
    # none | bfloat16: the encoder's and cross-attention keys/values' products likewise
    decode.encoder_quantize = "none"
    # auto | in_out | out_in | none: how the decode loop's weight copies are laid out
    # (model/projection_policy.py; auto picks by rows per product; none: no copies)
    decode.weight_layout = "auto"
    # model | bfloat16: the KV cache and cross-attention keys/values as stored while decoding
    decode.cache_dtype = "model"
    # The KV cache starts this many positions long and doubles as the output grows, so a
    # step reads about the filled part (inference/search.py CacheGrowth); 0: whole from the start
    decode.cache_start = 16
    return decode

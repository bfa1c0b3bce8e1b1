"""Our models as Hugging Face `MarianMTModel`s and back: the weight and config mapping.

`to_marian(model_cfg, params)` builds the PyTorch model (float32, eval mode) from the
parameters `nnx.split(model, nnx.Param)` gives, so both implementations translate the same
sentences with the same numbers; `marian_tensors` is its state dict as NumPy arrays and
`params_from_marian` the inverse, which `transformer.interop.runs` uses to import a
pretrained model. `check_compatible(model_cfg)` and `model_config_from_marian(hf_config, ...)`
say (one-line UserError) which configs the other side cannot express: Post-LN LayerNorm
blocks, static sinusoidal positions, embeddings scaled by sqrt(d_model), one embedding table
shared by encoder, decoder and the tied output, biases everywhere, full multi-head
attention, ReLU, GELU or SiLU (Marian's swish); Marian's `final_logits_bias` is our
`model.output_bias`.

Two layouts differ and are mapped here: torch Linear weights are [out, in] where our Dense
kernels are [in, out], and HF's sinusoidal table puts every sine in the first half of d_model
and every cosine in the second where ours interleaves them (PE[pos, 2i] = sin, PE[pos, 2i + 1]
= cos, same frequencies, positions from 0 in both). HF's table is kept; our weights are
permuted instead along the d_model (residual stream) axis by `residual_permutation`, which
every weight touching that axis gets and nothing inside attention or the feed-forward layer
does (LayerNorm is invariant to a permutation of its features, and the tied logits x @ E.T
are unchanged when x and E's columns move together). Vocabulary ids are not touched here:
`to_marian` keeps ours (the ids of this project's tokenizers), and the importer reorders
Marian's rows into our id space first (`transformer.interop.marian_vocab`).
Generation settings mirror our decoder: start with BOS, EOS forced at the last allowed
position (our searches force it there), no bad-word or pad suppression.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID
from transformer.interop.expressible import check_expressible
from transformer.interop.extras import optional_import

# Our activation name -> the ACT2FN name computing the same function in transformers.
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "silu": "swish"}
# ACT2FN names -> ours, for import: every name above plus its aliases.
FROM_HF_ACTIVATIONS = {
    **{hf: ours for ours, hf in HF_ACTIVATIONS.items()},
    "gelu_new": "gelu_tanh",
    "silu": "silu",
}

# (field, the values Marian can express) for the fields it constrains.
MARIAN_FIELDS = (
    ("norm_position", ("post",)),
    ("norm_type", ("layernorm",)),
    ("position", ("sinusoidal",)),
    ("share_embeddings", (True,)),
    ("tie_output", (True,)),
    ("use_bias", (True,)),
    ("activation", tuple(HF_ACTIVATIONS)),
)

# Our sublayer norm -> HF LayerNorm, per stack.
ENCODER_NORMS = {"attention_sublayer": "self_attn_layer_norm", "ffn_sublayer": "final_layer_norm"}
DECODER_NORMS = {
    "self_sublayer": "self_attn_layer_norm",
    "cross_sublayer": "encoder_attn_layer_norm",
    "ffn_sublayer": "final_layer_norm",
}
ATTENTIONS = {"self_attention": "self_attn", "cross_attention": "encoder_attn"}
PROJECTIONS_IN = {"query": "q_proj", "key": "k_proj", "value": "v_proj"}  # read the residual
# HF's names of the one embedding table: the encoder's, the decoder's and the tied output's
# are the same tensor, saved under any of these (newer versions save the first alone).
EMBEDDING_NAMES = (
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
)
POSITION_NAMES = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
BIAS_NAME = "final_logits_bias"


def check_compatible(model_cfg) -> None:
    """Raises UserError naming the first field MarianMTModel cannot express, and its value."""
    check_expressible(model_cfg, MARIAN_FIELDS, "MarianMTModel", "Marian")


# MarianConfig's defaults for the config.json keys the import reads (a saved config may omit
# any key whose value is the default).
MARIAN_DEFAULTS = {
    "d_model": 1024,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_attention_heads": 16,
    "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096,
    "activation_function": "gelu",
    "max_position_embeddings": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "scale_embedding": False,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
}
# (config.json key, the value our model needs, what that value means).
IMPORTABLE = (
    ("normalize_before", False, "Post-LN blocks"),
    ("normalize_embedding", False, "no LayerNorm on the embeddings"),
    ("add_final_layer_norm", False, "no final LayerNorm"),
    ("scale_embedding", True, "embeddings scaled by sqrt(d_model)"),
    ("share_encoder_decoder_embeddings", True, "one embedding table for both stacks"),
    ("tie_word_embeddings", True, "the output tied to the embedding"),
)
# HF's LayerNorm epsilon: nn.LayerNorm's default, which no MarianConfig key changes.
HF_NORM_EPS = 1e-5


def model_config_from_marian(hf: dict, *, output_bias: bool):
    """Our ModelConfig of a MarianMTModel's config.json (a dict), its vocab_size left to the
    vocabulary mapping (None); UserError naming the first key our model cannot express."""
    from transformer.model.config import ModelConfig

    value = {key: hf.get(key, default) for key, default in MARIAN_DEFAULTS.items()}
    if hf.get("model_type") != "marian":
        raise UserError(
            f"config.json has model_type={hf.get('model_type')!r}; import-marian reads "
            "MarianMTModel directories (model_type 'marian')"
        )
    for key, needed, meaning in IMPORTABLE:
        if value[key] != needed:
            raise UserError(
                f"config.json has {key}={value[key]!r}; this project's model has {meaning} "
                f"({key}={needed!r}), so the model cannot be imported"
            )
    for part, ours in (("attention_heads", "num_heads"), ("ffn_dim", "d_ff")):
        enc, dec = value[f"encoder_{part}"], value[f"decoder_{part}"]
        if enc != dec:
            raise UserError(
                f"config.json has encoder_{part}={enc} but decoder_{part}={dec}; this "
                f"project's model has one model.{ours} for both stacks"
            )
    decoder_vocab = hf.get("decoder_vocab_size") or hf.get("vocab_size")
    if decoder_vocab != hf.get("vocab_size"):
        raise UserError(
            f"config.json has decoder_vocab_size={decoder_vocab} but vocab_size="
            f"{hf.get('vocab_size')}; only models with one vocabulary can be imported"
        )
    activation = FROM_HF_ACTIVATIONS.get(value["activation_function"])
    if activation is None:
        raise UserError(
            f"config.json has activation_function={value['activation_function']!r}; this "
            f"project's model computes {sorted(FROM_HF_ACTIVATIONS)}"
        )
    if value["d_model"] % 2:
        raise UserError(
            f"config.json has d_model={value['d_model']}; sinusoidal positions need it even"
        )
    try:
        return ModelConfig(
            d_model=value["d_model"],
            num_heads=value["encoder_attention_heads"],
            num_encoder_layers=value["encoder_layers"],
            num_decoder_layers=value["decoder_layers"],
            d_ff=value["encoder_ffn_dim"],
            activation=activation,
            max_len=value["max_position_embeddings"],
            dropout_rate=value["dropout"],
            attention_dropout_rate=value["attention_dropout"],
            activation_dropout_rate=value["activation_dropout"],
            norm_eps=HF_NORM_EPS,
            output_bias=output_bias,
        )
    except (ValueError, TypeError) as e:
        raise UserError(f"config.json does not give a valid model: {e}") from None


def residual_permutation(d_model: int) -> np.ndarray:
    """perm [d]: HF residual feature h is our feature perm[h] (our sines 0, 2, 4, ... first,
    then our cosines 1, 3, 5, ...), so x_hf = x_ours[..., perm]."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def flat_params(params: Any) -> dict[str, np.ndarray]:
    """{'encoder_layers/0/ffn/wi/kernel': float32 array} from an nnx.State (or the same tree
    with plain arrays, as restore_run returns)."""
    import jax  # here, not at the top: the PyTorch peer (compare_torch.py) imports this file

    return {
        param_name(path): np.asarray(leaf, np.float32)
        for path, leaf in jax.tree_util.tree_leaves_with_path(params)
    }


def param_name(path) -> str:
    """'encoder_layers/0/ffn/wi/kernel': the name `flat_params` gives a parameter's tree path."""
    import jax

    names = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            names.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.SequenceKey):
            names.append(str(entry.idx))
        elif isinstance(entry, jax.tree_util.GetAttrKey) and entry.name != "value":
            names.append(entry.name)
    return "/".join(names)


def module_pairs(model_cfg) -> list[tuple[str, str, str]]:
    """(our prefix, HF prefix, kind) of every LayerNorm and Linear layer. kind says where the
    residual permutation applies: 'norm' (both vectors), 'reads' (the input side of a layer
    reading the residual stream) or 'writes' (the output side of one writing it)."""
    pairs = []
    stacks = (
        ("encoder", model_cfg.num_encoder_layers, ENCODER_NORMS, ("self_attention",)),
        ("decoder", model_cfg.num_decoder_layers, DECODER_NORMS, tuple(ATTENTIONS)),
    )
    for stack, layers, norms, attentions in stacks:
        for i in range(layers):
            ours, hf = f"{stack}_layers/{i}", f"model.{stack}.layers.{i}"
            for our_norm, hf_norm in norms.items():
                pairs.append((f"{ours}/{our_norm}/norm", f"{hf}.{hf_norm}", "norm"))
            for our_attn in attentions:
                hf_attn = f"{hf}.{ATTENTIONS[our_attn]}"
                for our_proj, hf_proj in PROJECTIONS_IN.items():
                    pairs.append((f"{ours}/{our_attn}/{our_proj}", f"{hf_attn}.{hf_proj}", "reads"))
                pairs.append((f"{ours}/{our_attn}/out", f"{hf_attn}.out_proj", "writes"))
            pairs.append((f"{ours}/ffn/wi", f"{hf}.fc1", "reads"))
            pairs.append((f"{ours}/ffn/wo", f"{hf}.fc2", "writes"))
    return pairs


def _to_hf(ours: dict, prefix: str, kind: str, perm: np.ndarray) -> dict:
    """One layer's HF tensors {'weight', 'bias'} from ours."""
    if kind == "norm":
        return {"weight": ours[f"{prefix}/scale"][perm], "bias": ours[f"{prefix}/bias"][perm]}
    kernel, bias = ours[f"{prefix}/kernel"], ours[f"{prefix}/bias"]
    if kind == "reads":  # Dense [d, out] -> torch weight [out, d], input permuted
        return {"weight": kernel[perm, :].T, "bias": bias}
    return {"weight": kernel[:, perm].T, "bias": bias[perm]}  # [in, d] -> [d, in]


def _from_hf(hf: dict, prefix: str, kind: str, inverse: np.ndarray) -> dict:
    """One layer's tensors in our names from HF's: `_to_hf` undone."""
    weight, bias = hf[f"{prefix}.weight"], hf[f"{prefix}.bias"]
    if kind == "norm":
        return {"scale": weight[inverse], "bias": bias[inverse]}
    if kind == "reads":
        return {"kernel": weight.T[inverse, :], "bias": bias}
    return {"kernel": weight.T[:, inverse], "bias": bias[inverse]}


def marian_tensors(model_cfg, params) -> dict[str, np.ndarray]:
    """Every MarianMTModel state-dict entry but the two (fixed) position tables."""
    ours = flat_params(params)
    perm = residual_permutation(model_cfg.d_model)
    embedding = ours["src_embed/embedding"][:, perm]  # [V, d]
    tensors = dict.fromkeys(EMBEDDING_NAMES, embedding)  # tied output: logits = x @ E.T
    bias = ours.get("output_bias", np.zeros(model_cfg.vocab_size, np.float32))
    tensors[BIAS_NAME] = bias[None, :]
    for our_prefix, hf_prefix, kind in module_pairs(model_cfg):
        for name, value in _to_hf(ours, our_prefix, kind, perm).items():
            tensors[f"{hf_prefix}.{name}"] = value
    return tensors


def params_from_marian(model_cfg, tensors: dict, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Our parameters by `flat_params` name from a MarianMTModel's state dict (NumPy): our
    vocabulary id i takes Marian's embedding row and logit bias rows[i]. Every tensor of the
    state dict must find a place (UserError naming the first that does not)."""
    inverse = np.argsort(residual_permutation(model_cfg.d_model))
    used = {*EMBEDDING_NAMES, *POSITION_NAMES, BIAS_NAME}
    try:
        ours = {"src_embed/embedding": _shared_embedding(tensors)[rows][:, inverse]}
        if model_cfg.output_bias:
            ours["output_bias"] = tensors[BIAS_NAME].reshape(-1)[rows]
        for our_prefix, hf_prefix, kind in module_pairs(model_cfg):
            for name, value in _from_hf(tensors, hf_prefix, kind, inverse).items():
                ours[f"{our_prefix}/{name}"] = value
            used.update(f"{hf_prefix}.{name}" for name in ("weight", "bias"))
    except KeyError as e:
        raise UserError(
            f"the Marian weights lack {e.args[0]}, which config.json's architecture has; the "
            "weights do not belong to this config.json"
        ) from None
    except IndexError:
        raise UserError(
            "the Marian weights' shapes do not fit config.json's d_model and vocab_size; the "
            "weights do not belong to this config.json"
        ) from None
    unused = sorted(set(tensors) - used)
    if unused:
        raise UserError(
            f"the Marian weights hold {unused[0]} ({len(unused)} tensors in all) that a "
            "Post-LN MarianMTModel of this config has no place for; only MarianMTModel "
            "checkpoints of the architecture config.json describes can be imported"
        )
    return ours


def _shared_embedding(tensors: dict) -> np.ndarray:
    """The one embedding table, checked to be the same under every name it is saved as."""
    present = [name for name in EMBEDDING_NAMES if name in tensors]
    if not present:
        raise UserError(f"the Marian weights hold no embedding table ({EMBEDDING_NAMES[0]})")
    table = tensors[present[0]]
    for name in present[1:]:
        if not np.array_equal(tensors[name], table):
            raise UserError(
                f"the Marian weights' {name} differs from {present[0]}; only models whose "
                "encoder, decoder and output share one embedding table can be imported"
            )
    return table


def check_position_tables(model_cfg, tensors: dict) -> None:
    """Stored sinusoidal tables (older checkpoints save them) must be the ones our model
    computes, permuted: a trained or shifted table would be silently replaced."""
    from transformer.model.position import sinusoidal_table

    for name in POSITION_NAMES:
        if name not in tensors:
            continue
        stored = tensors[name]
        ours = np.asarray(sinusoidal_table(stored.shape[0], model_cfg.d_model))
        if not np.allclose(stored, ours[:, residual_permutation(model_cfg.d_model)], atol=1e-4):
            raise UserError(
                f"the Marian weights' {name} is not Marian's static sinusoidal table; only "
                "models with static sinusoidal positions can be imported"
            )


def generated_ids(sequences: np.ndarray) -> list[list[int]]:
    """generate()'s output [N, 1 + T] as our Translator returns ids: the decoder-start token
    dropped, each row cut before its first EOS or PAD."""
    rows = []
    for row in np.asarray(sequences)[:, 1:].tolist():
        ends = [i for i, t in enumerate(row) if t in (EOS_ID, PAD_ID)]
        rows.append(row[: ends[0]] if ends else row)
    return rows


def marian_config(
    model_cfg,
    *,
    dropout: float | None = 0.0,
    max_positions: int | None = None,
    forced_eos_token_id: int | None = EOS_ID,
):
    """The MarianConfig of `model_cfg`: dropout off unless given (a model only evaluated;
    None: the model's own rates), position table of model.max_len rows unless given, EOS
    forced at the length limit as our searches force it (None: nothing forced)."""
    transformers = optional_import("transformers")
    own = dropout is None
    return transformers.MarianConfig(
        vocab_size=model_cfg.vocab_size,
        decoder_vocab_size=model_cfg.vocab_size,
        d_model=model_cfg.d_model,
        encoder_layers=model_cfg.num_encoder_layers,
        decoder_layers=model_cfg.num_decoder_layers,
        encoder_attention_heads=model_cfg.num_heads,
        decoder_attention_heads=model_cfg.num_heads,
        encoder_ffn_dim=model_cfg.d_ff,
        decoder_ffn_dim=model_cfg.d_ff,
        activation_function=HF_ACTIVATIONS[model_cfg.activation],
        dropout=model_cfg.dropout_rate if own else dropout,
        attention_dropout=model_cfg.attention_dropout_rate if own else 0.0,
        activation_dropout=model_cfg.activation_dropout_rate if own else 0.0,
        # Sources are cut to max_len tokens and outputs never exceed it (Translator).
        max_position_embeddings=max_positions or model_cfg.max_len,
        scale_embedding=True,  # ours: token embeddings * sqrt(d_model)
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=None,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=forced_eos_token_id,
        use_cache=True,
    )


def _set_generation_defaults(model) -> None:
    """generate() as our searches decode: BOS start, EOS forced at the length limit, and no
    logits processor beyond that (a pretrained Marian's bad_words_ids=[[pad]] would stop PAD
    from winning an argmax; ours lets it win, so neither side suppresses it)."""
    gen = model.generation_config
    gen.decoder_start_token_id = BOS_ID
    gen.pad_token_id = PAD_ID
    gen.eos_token_id = EOS_ID
    gen.bos_token_id = None
    gen.forced_eos_token_id = EOS_ID
    gen.bad_words_ids = None
    gen.suppress_tokens = None
    gen.begin_suppress_tokens = None


def to_marian(model_cfg, params, *, dropout: float | None = 0.0):
    """A float32 `transformers.MarianMTModel` in eval mode with exactly the weights of
    (model_cfg, params); raises UserError (check_compatible) for configs it cannot express.
    dropout: as `marian_config` (None: the model's own rates, for an exported run)."""
    torch = optional_import("torch")
    transformers = optional_import("transformers")

    check_compatible(model_cfg)
    config = marian_config(model_cfg, dropout=dropout)
    model = transformers.MarianMTModel(config).to(torch.float32)
    # Copies: restored parameters may be read-only NumPy views, which torch will not wrap.
    tensors = {k: torch.tensor(np.array(v)) for k, v in marian_tensors(model_cfg, params).items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if set(missing) - set(POSITION_NAMES) or unexpected:
        raise RuntimeError(
            f"weight mapping out of date: missing {missing}, unexpected {unexpected}"
        )
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = model_cfg.norm_eps  # nn.LayerNorm's default is 1e-5, ours 1e-6
    shared = model.get_input_embeddings().weight
    if model.get_output_embeddings().weight.data_ptr() != shared.data_ptr():
        raise RuntimeError("MarianMTModel's output projection is not tied to its embedding")
    _set_generation_defaults(model)
    return model.eval()

"""One of our trained models as a Hugging Face `MarianMTModel` holding exactly its weights.

`to_marian(model_cfg, params)` builds the PyTorch model (float32, eval mode) from the
parameters `nnx.split(model, nnx.Param)` gives, so both implementations can translate the same
sentences with the same numbers; `check_compatible(model_cfg)` says (one-line UserError) which
configs Marian cannot express: Post-LN LayerNorm blocks, sinusoidal positions, one embedding
table shared by encoder, decoder and the tied output, biases everywhere, full multi-head
attention, ReLU or GELU. Two layouts differ and are mapped here: torch Linear weights are
[out, in] where our Dense kernels are [in, out], and HF's sinusoidal table puts every sine in
the first half of d_model and every cosine in the second where ours interleaves them
(PE[pos, 2i] = sin, PE[pos, 2i + 1] = cos, same frequencies, positions from 0 in both). HF's
table is kept; our weights are permuted instead along the d_model (residual stream) axis by
`residual_permutation`, which every weight touching that axis gets and nothing inside
attention or the feed-forward layer does (LayerNorm is invariant to a permutation of its
features, and the tied logits x @ E.T are unchanged when x and E's columns move together).
Generation settings mirror our decoder: start with BOS, EOS forced at the last allowed
position (our searches force it there), no bad-word or pad suppression.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID

# Our activation name -> the ACT2FN name computing the same function in transformers.
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}

# (field, value Marian needs) for the fields compared by equality.
REQUIRED_FIELDS = (
    ("norm_position", "post"),
    ("norm_type", "layernorm"),
    ("position", "sinusoidal"),
    ("share_embeddings", True),
    ("tie_output", True),
    ("use_bias", True),
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


def check_compatible(model_cfg) -> None:
    """Raises UserError naming the first field MarianMTModel cannot express, and its value."""
    for field, needed in REQUIRED_FIELDS:
        value = getattr(model_cfg, field)
        if value != needed:
            raise UserError(
                f"model.{field}={value!r} has no MarianMTModel equivalent; "
                f"to_marian needs model.{field}={needed!r}"
            )
    if model_cfg.num_kv_heads not in (None, model_cfg.num_heads):
        raise UserError(
            f"model.num_kv_heads={model_cfg.num_kv_heads} (grouped-query attention) has no "
            f"MarianMTModel equivalent; to_marian needs model.num_kv_heads=None "
            f"(or {model_cfg.num_heads})"
        )
    if model_cfg.activation not in HF_ACTIVATIONS:
        raise UserError(
            f"model.activation={model_cfg.activation!r} has no MarianMTModel equivalent; "
            f"to_marian needs model.activation in {sorted(HF_ACTIVATIONS)}"
        )


def residual_permutation(d_model: int) -> np.ndarray:
    """perm [d]: HF residual feature h is our feature perm[h] (our sines 0, 2, 4, ... first,
    then our cosines 1, 3, 5, ...), so x_hf = x_ours[..., perm]."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def flat_params(params: Any) -> dict[str, np.ndarray]:
    """{'encoder_layers/0/ffn/wi/kernel': float32 array} from an nnx.State (or the same tree
    with plain arrays, as restore_run returns)."""
    import jax  # here, not at the top: the PyTorch peer (compare_torch.py) imports this file

    flat = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        names = []
        for entry in path:
            if isinstance(entry, jax.tree_util.DictKey):
                names.append(str(entry.key))
            elif isinstance(entry, jax.tree_util.SequenceKey):
                names.append(str(entry.idx))
            elif isinstance(entry, jax.tree_util.GetAttrKey) and entry.name != "value":
                names.append(entry.name)
        flat["/".join(names)] = np.asarray(leaf, np.float32)
    return flat


def _linear_reading_residual(ours: dict, prefix: str, perm: np.ndarray) -> dict:
    """Dense [d, out] reading the residual stream -> torch weight [out, d] (input permuted)."""
    return {"weight": ours[f"{prefix}/kernel"][perm, :].T, "bias": ours[f"{prefix}/bias"]}


def _linear_writing_residual(ours: dict, prefix: str, perm: np.ndarray) -> dict:
    """Dense [in, d] writing the residual stream -> torch weight [d, in] (output permuted)."""
    return {"weight": ours[f"{prefix}/kernel"][:, perm].T, "bias": ours[f"{prefix}/bias"][perm]}


def _layer_tensors(ours: dict, ours_prefix: str, hf_prefix: str, norms: dict, perm) -> dict:
    """HF state-dict entries of one encoder or decoder layer."""
    modules = {}
    for our_norm, hf_norm in norms.items():
        norm = f"{ours_prefix}/{our_norm}/norm"
        modules[hf_norm] = {
            "weight": ours[f"{norm}/scale"][perm],
            "bias": ours[f"{norm}/bias"][perm],
        }
    for our_attn, hf_attn in ATTENTIONS.items():
        if f"{ours_prefix}/{our_attn}/out/kernel" not in ours:
            continue  # encoder layers have no cross-attention
        attn = f"{ours_prefix}/{our_attn}"
        for ours_name, hf_name in PROJECTIONS_IN.items():
            modules[f"{hf_attn}.{hf_name}"] = _linear_reading_residual(
                ours, f"{attn}/{ours_name}", perm
            )
        modules[f"{hf_attn}.out_proj"] = _linear_writing_residual(ours, f"{attn}/out", perm)
    modules["fc1"] = _linear_reading_residual(ours, f"{ours_prefix}/ffn/wi", perm)
    modules["fc2"] = _linear_writing_residual(ours, f"{ours_prefix}/ffn/wo", perm)
    return {
        f"{hf_prefix}.{module}.{kind}": value
        for module, tensors in modules.items()
        for kind, value in tensors.items()
    }


def marian_state_dict(model_cfg, params) -> dict[str, np.ndarray]:
    """Every MarianMTModel state-dict entry but the two (fixed) position tables."""
    ours = flat_params(params)
    perm = residual_permutation(model_cfg.d_model)
    embedding = ours["src_embed/embedding"][:, perm]  # [V, d]
    tensors = {
        name: embedding
        for name in (
            "model.shared.weight",
            "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight",
            "lm_head.weight",  # tied output: logits = x @ E.T
        )
    }
    tensors["final_logits_bias"] = np.zeros((1, model_cfg.vocab_size), np.float32)
    for i in range(model_cfg.num_encoder_layers):
        tensors.update(
            _layer_tensors(
                ours, f"encoder_layers/{i}", f"model.encoder.layers.{i}", ENCODER_NORMS, perm
            )
        )
    for i in range(model_cfg.num_decoder_layers):
        tensors.update(
            _layer_tensors(
                ours, f"decoder_layers/{i}", f"model.decoder.layers.{i}", DECODER_NORMS, perm
            )
        )
    return tensors


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
    dropout: float = 0.0,
    max_positions: int | None = None,
    forced_eos_token_id: int | None = EOS_ID,
):
    """The MarianConfig of `model_cfg`: dropout off unless given (a model only evaluated),
    position table of model.max_len rows unless given, EOS forced at the length limit as
    our searches force it (None: nothing forced; Marian's default id 0 is our PAD)."""
    from transformers import MarianConfig

    return MarianConfig(
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
        dropout=dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
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


def to_marian(model_cfg, params):
    """A float32 `transformers.MarianMTModel` in eval mode with exactly the weights of
    (model_cfg, params); raises UserError (check_compatible) for configs it cannot express."""
    import torch
    from transformers import MarianMTModel

    check_compatible(model_cfg)
    model = MarianMTModel(marian_config(model_cfg)).to(torch.float32)
    # Copies: restored parameters may be read-only NumPy views, which torch will not wrap.
    tensors = {
        k: torch.tensor(np.array(v)) for k, v in marian_state_dict(model_cfg, params).items()
    }
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    fixed = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    if set(missing) - fixed or unexpected:
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

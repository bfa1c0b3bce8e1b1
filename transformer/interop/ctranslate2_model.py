"""One of our models as a CTranslate2 model directory holding exactly its weights.

`save_ctranslate2(model_cfg, params, out_dir, vocabulary, ...)` writes the model from the
parameters `nnx.split(model, nnx.Param)` gives, through CTranslate2's own model
specification: no Hugging Face detour, so PyTorch is not needed, and the decoder starts
from our BOS embedding. (CTranslate2's converter for a MarianMTModel directory starts the
decoder from a zero vector instead, which equals Marian's pad start only when that row is
zero, as in converted OPUS-MT models, and not for a run trained here.) The configs it
accepts (`check_compatible`) are wider than Marian's: Pre-LN blocks (with the final
encoder and decoder norms, CTranslate2's `pre_norm`) or Post-LN, LayerNorm or RMSNorm,
sinusoidal positions, one shared and tied embedding table, biases, full multi-head
attention, ReLU, GELU (either form) or SiLU; `model.output_bias` becomes the output
projection's bias.

The mapping, where the layouts differ: CTranslate2's linear weights are [out, in] where our
Dense kernels are [in, out]; its self-attention reads one fused [3d, d] Q/K/V projection and
its cross-attention a query projection and a fused [2d, d] K/V one; its position table is
set to ours (sin and cos interleaved), so no permutation of the residual stream is needed.
The vocabulary is one token string per id, in our id order.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID, UNK_ID
from transformer.interop.expressible import check_expressible
from transformer.interop.extras import optional_import
from transformer.interop.marian import flat_params

# Our activation name -> CTranslate2's Activation member computing the same function.
CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}
# CTranslate2 weight types offered: float32 keeps the weights exact.
QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16", "bfloat16")
# (field, the values the mapping below handles) for the fields compared by membership.
SUPPORTED_FIELDS = (
    ("norm_position", ("pre", "post")),
    ("norm_type", ("layernorm", "rmsnorm")),
    ("position", ("sinusoidal",)),
    ("share_embeddings", (True,)),
    ("tie_output", (True,)),
    ("use_bias", (True,)),
    ("activation", tuple(CT2_ACTIVATIONS)),
)


def check_compatible(model_cfg) -> None:
    """Raises UserError naming the first field this CTranslate2 mapping cannot express."""
    check_expressible(model_cfg, SUPPORTED_FIELDS, "CTranslate2", "this export")


def translate_options(model_cfg) -> dict:
    """translate_batch's length options that decode as our Translator does and keep
    CTranslate2 within the model's position table (model.max_len positions; past it
    CTranslate2 raises 'No position encodings are defined for positions >= max_len'):
    sources cut to max_len tokens, EOS included, as our Translator cuts them; at most
    max_len - 1 output tokens, the EOS our searches force at position max_len left out
    (CTranslate2's outputs carry no EOS); and EOS allowed from the first step, as ours allow
    it (CTranslate2's default minimum is one token)."""
    return {
        "max_input_length": model_cfg.max_len,
        "max_decoding_length": model_cfg.max_len - 1,
        "min_decoding_length": 0,
    }


def _linear(spec, kernel: np.ndarray, bias: np.ndarray) -> None:
    """A Dense kernel [in, out] and bias [out] into a CTranslate2 LinearSpec ([out, in])."""
    spec.weight = np.ascontiguousarray(kernel.T)
    spec.bias = bias


def _norm(spec, ours: dict, prefix: str) -> None:
    """A Norm's scale, and its bias when it has one (LayerNorm; RMSNorm has none)."""
    spec.gamma = ours[f"{prefix}/scale"]
    if f"{prefix}/bias" in ours:
        spec.beta = ours[f"{prefix}/bias"]


def _concat_linear(spec, ours: dict, prefixes: list[str]) -> None:
    """Several Dense layers reading the same input, fused along their outputs."""
    kernel = np.concatenate([ours[f"{p}/kernel"] for p in prefixes], axis=1)
    bias = np.concatenate([ours[f"{p}/bias"] for p in prefixes])
    _linear(spec, kernel, bias)


def _ffn(spec, ours: dict, layer: str) -> None:
    _norm(spec.layer_norm, ours, f"{layer}/ffn_sublayer/norm")
    _linear(spec.linear_0, ours[f"{layer}/ffn/wi/kernel"], ours[f"{layer}/ffn/wi/bias"])
    _linear(spec.linear_1, ours[f"{layer}/ffn/wo/kernel"], ours[f"{layer}/ffn/wo/bias"])


def _self_attention(spec, ours: dict, attn: str, norm: str) -> None:
    _norm(spec.layer_norm, ours, f"{norm}/norm")
    _concat_linear(spec.linear[0], ours, [f"{attn}/{n}" for n in ("query", "key", "value")])
    _linear(spec.linear[1], ours[f"{attn}/out/kernel"], ours[f"{attn}/out/bias"])


def _cross_attention(spec, ours: dict, attn: str, norm: str) -> None:
    _norm(spec.layer_norm, ours, f"{norm}/norm")
    _linear(spec.linear[0], ours[f"{attn}/query/kernel"], ours[f"{attn}/query/bias"])
    _concat_linear(spec.linear[1], ours, [f"{attn}/key", f"{attn}/value"])
    _linear(spec.linear[2], ours[f"{attn}/out/kernel"], ours[f"{attn}/out/bias"])


def model_spec(
    model_cfg,
    params: Any,
    vocabulary: list[str],
    *,
    target_vocabulary: list[str] | None = None,
    add_source_eos: bool = False,
):
    """The CTranslate2 TransformerSpec of our model, weights and vocabularies set (one token
    per id; target_vocabulary defaults to vocabulary).
    add_source_eos: CTranslate2 appends EOS to every source (our Translator does; leave it
    off where callers pass EOS themselves)."""
    optional_import("ctranslate2")
    from ctranslate2.specs import common_spec, transformer_spec

    check_compatible(model_cfg)
    # Writable copies: CTranslate2 quantizes in place.
    ours = {name: np.array(value) for name, value in flat_params(params).items()}
    pre = model_cfg.norm_position == "pre"
    spec = transformer_spec.TransformerSpec.from_config(
        (model_cfg.num_encoder_layers, model_cfg.num_decoder_layers),
        model_cfg.num_heads,
        pre_norm=pre,  # with a final norm after each stack, as our Pre-LN model has
        activation=getattr(common_spec.Activation, CT2_ACTIVATIONS[model_cfg.activation]),
        rms_norm=model_cfg.norm_type == "rmsnorm",
    )
    _encoder(spec.encoder, model_cfg, ours)
    _decoder(spec.decoder, model_cfg, ours)
    if pre:
        _norm(spec.encoder.layer_norm, ours, "encoder_norm")
        _norm(spec.decoder.layer_norm, ours, "decoder_norm")
    _set_vocabulary(spec, model_cfg, vocabulary, target_vocabulary or vocabulary)
    spec.config.add_source_eos = add_source_eos
    return spec


def _positions(model_cfg) -> np.ndarray:
    from transformer.model.position import sinusoidal_table

    return np.asarray(sinusoidal_table(model_cfg.max_len, model_cfg.d_model))


def _encoder(encoder, model_cfg, ours: dict) -> None:
    encoder.embeddings[0].weight = ours["src_embed/embedding"]  # [V, d], shared and tied
    encoder.position_encodings.encodings = _positions(model_cfg)
    for i, layer in enumerate(encoder.layer):
        name = f"encoder_layers/{i}"
        _self_attention(
            layer.self_attention, ours, f"{name}/self_attention", f"{name}/attention_sublayer"
        )
        _ffn(layer.ffn, ours, name)


def _decoder(decoder, model_cfg, ours: dict) -> None:
    embedding = ours["src_embed/embedding"]
    decoder.embeddings.weight = embedding
    decoder.position_encodings.encodings = _positions(model_cfg)
    decoder.projection.weight = embedding  # tied output: logits = x @ E.T
    decoder.projection.bias = ours.get("output_bias", np.zeros(model_cfg.vocab_size, np.float32))
    for i, layer in enumerate(decoder.layer):
        name = f"decoder_layers/{i}"
        _self_attention(
            layer.self_attention, ours, f"{name}/self_attention", f"{name}/self_sublayer"
        )
        _cross_attention(layer.attention, ours, f"{name}/cross_attention", f"{name}/cross_sublayer")
        _ffn(layer.ffn, ours, name)


def _set_vocabulary(spec, model_cfg, source: list[str], target: list[str]) -> None:
    for tokens in (source, target):
        if len(tokens) != model_cfg.vocab_size:
            raise ValueError(f"{len(tokens)} tokens for model.vocab_size={model_cfg.vocab_size}")
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.config.bos_token = target[BOS_ID]
    spec.config.eos_token = target[EOS_ID]
    spec.config.unk_token = target[UNK_ID]
    spec.config.decoder_start_token = target[BOS_ID]
    spec.config.layer_norm_epsilon = model_cfg.norm_eps


def save_ctranslate2(
    model_cfg,
    params: Any,
    out_dir: str,
    vocabulary: list[str],
    *,
    target_vocabulary: list[str] | None = None,
    quantization: str = "float32",
    add_source_eos: bool = False,
) -> str:
    """Writes the CTranslate2 model of our parameters into out_dir (created), its weights
    stored as `quantization`; returns out_dir."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    spec = model_spec(
        model_cfg,
        params,
        vocabulary,
        target_vocabulary=target_vocabulary,
        add_source_eos=add_source_eos,
    )
    spec.validate()
    spec.optimize(quantization=quantization)
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)
    return out_dir

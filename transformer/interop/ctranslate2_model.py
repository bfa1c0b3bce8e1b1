"""One of our models as a CTranslate2 model directory holding exactly its weights.

`save_ctranslate2(model_cfg, params, out_dir, vocabulary, ...)` writes the model from the
parameters `nnx.split(model, nnx.Param)` gives, through CTranslate2's own model
specification: no Hugging Face detour, so PyTorch is not needed, and the decoder starts
from our BOS embedding. (CTranslate2's converter for a MarianMTModel directory starts the
decoder from a zero vector instead, which equals Marian's pad start only when that row is
zero, as in converted OPUS-MT models, and not for a run trained here.) The configs it
accepts are those `marian.check_compatible` accepts (Post-LN, sinusoidal positions, one
shared and tied embedding table, biases, full multi-head attention, ReLU, GELU or SiLU);
`model.output_bias` becomes the output projection's bias.

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
from transformer.interop.extras import optional_import
from transformer.interop.marian import check_compatible, flat_params

# Our activation name -> CTranslate2's Activation member computing the same function.
CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}
# CTranslate2 weight types offered: float32 keeps the weights exact.
QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16", "bfloat16")


def _linear(spec, kernel: np.ndarray, bias: np.ndarray) -> None:
    """A Dense kernel [in, out] and bias [out] into a CTranslate2 LinearSpec ([out, in])."""
    spec.weight = np.ascontiguousarray(kernel.T)
    spec.bias = bias


def _norm(spec, ours: dict, prefix: str) -> None:
    spec.gamma = ours[f"{prefix}/norm/scale"]
    spec.beta = ours[f"{prefix}/norm/bias"]


def _concat_linear(spec, ours: dict, prefixes: list[str]) -> None:
    """Several Dense layers reading the same input, fused along their outputs."""
    kernel = np.concatenate([ours[f"{p}/kernel"] for p in prefixes], axis=1)
    bias = np.concatenate([ours[f"{p}/bias"] for p in prefixes])
    _linear(spec, kernel, bias)


def _ffn(spec, ours: dict, layer: str) -> None:
    _norm(spec.layer_norm, ours, f"{layer}/ffn_sublayer")
    _linear(spec.linear_0, ours[f"{layer}/ffn/wi/kernel"], ours[f"{layer}/ffn/wi/bias"])
    _linear(spec.linear_1, ours[f"{layer}/ffn/wo/kernel"], ours[f"{layer}/ffn/wo/bias"])


def _self_attention(spec, ours: dict, attn: str, norm: str) -> None:
    _norm(spec.layer_norm, ours, norm)
    _concat_linear(spec.linear[0], ours, [f"{attn}/{n}" for n in ("query", "key", "value")])
    _linear(spec.linear[1], ours[f"{attn}/out/kernel"], ours[f"{attn}/out/bias"])


def _cross_attention(spec, ours: dict, attn: str, norm: str) -> None:
    _norm(spec.layer_norm, ours, norm)
    _linear(spec.linear[0], ours[f"{attn}/query/kernel"], ours[f"{attn}/query/bias"])
    _concat_linear(spec.linear[1], ours, [f"{attn}/key", f"{attn}/value"])
    _linear(spec.linear[2], ours[f"{attn}/out/kernel"], ours[f"{attn}/out/bias"])


def model_spec(model_cfg, params: Any, vocabulary: list[str], *, add_source_eos: bool = False):
    """The CTranslate2 TransformerSpec of our model, weights and vocabulary set.
    add_source_eos: CTranslate2 appends EOS to every source (our Translator does; leave it
    off where callers pass EOS themselves)."""
    optional_import("ctranslate2")
    from ctranslate2.specs import common_spec, transformer_spec

    from transformer.model.position import sinusoidal_table

    check_compatible(model_cfg)
    # Writable copies: CTranslate2 quantizes in place.
    ours = {name: np.array(value) for name, value in flat_params(params).items()}
    spec = transformer_spec.TransformerSpec.from_config(
        (model_cfg.num_encoder_layers, model_cfg.num_decoder_layers),
        model_cfg.num_heads,
        pre_norm=False,
        activation=getattr(common_spec.Activation, CT2_ACTIVATIONS[model_cfg.activation]),
    )
    embedding = ours["src_embed/embedding"]  # [V, d]: shared by both stacks and the logits
    positions = np.asarray(sinusoidal_table(model_cfg.max_len, model_cfg.d_model))
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = embedding
    encoder.position_encodings.encodings = positions
    for i, layer in enumerate(encoder.layer):
        name = f"encoder_layers/{i}"
        _self_attention(
            layer.self_attention, ours, f"{name}/self_attention", f"{name}/attention_sublayer"
        )
        _ffn(layer.ffn, ours, name)
    decoder.embeddings.weight = embedding
    decoder.position_encodings.encodings = positions
    decoder.projection.weight = embedding  # tied output: logits = x @ E.T
    decoder.projection.bias = ours.get("output_bias", np.zeros(model_cfg.vocab_size, np.float32))
    for i, layer in enumerate(decoder.layer):
        name = f"decoder_layers/{i}"
        _self_attention(
            layer.self_attention, ours, f"{name}/self_attention", f"{name}/self_sublayer"
        )
        _cross_attention(layer.attention, ours, f"{name}/cross_attention", f"{name}/cross_sublayer")
        _ffn(layer.ffn, ours, name)
    _set_vocabulary(spec, model_cfg, vocabulary, add_source_eos)
    return spec


def _set_vocabulary(spec, model_cfg, vocabulary: list[str], add_source_eos: bool) -> None:
    if len(vocabulary) != model_cfg.vocab_size:
        raise ValueError(f"{len(vocabulary)} tokens for model.vocab_size={model_cfg.vocab_size}")
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    spec.config.bos_token = vocabulary[BOS_ID]
    spec.config.eos_token = vocabulary[EOS_ID]
    spec.config.unk_token = vocabulary[UNK_ID]
    spec.config.decoder_start_token = vocabulary[BOS_ID]
    spec.config.add_source_eos = add_source_eos
    spec.config.layer_norm_epsilon = model_cfg.norm_eps


def save_ctranslate2(
    model_cfg,
    params: Any,
    out_dir: str,
    vocabulary: list[str],
    *,
    quantization: str = "float32",
    add_source_eos: bool = False,
) -> str:
    """Writes the CTranslate2 model of our parameters into out_dir (created), its weights
    stored as `quantization`; returns out_dir."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    spec = model_spec(model_cfg, params, vocabulary, add_source_eos=add_source_eos)
    spec.validate()
    spec.optimize(quantization=quantization)
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)
    return out_dir

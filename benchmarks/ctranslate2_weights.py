"""One of our trained models as a CTranslate2 model directory holding exactly its weights.

CTranslate2 is the engine users pick for CPU translation; its row in the speed tables shows
how far this project is from it on the same weights. `save_ctranslate2(model_cfg, params,
out_dir, quantization)` writes the model from the parameters `nnx.split(model, nnx.Param)`
gives, through CTranslate2's own model specification (no Hugging Face detour, so PyTorch is
not needed): the configs it accepts are those `marian_weights.check_compatible` accepts
(Post-LN, sinusoidal positions, one shared and tied embedding table, biases, full multi-head
attention, ReLU or GELU).

The mapping, where the layouts differ: CTranslate2's linear weights are [out, in] where our
Dense kernels are [in, out]; its self-attention reads one fused [3d, d] Q/K/V projection and
its cross-attention a query projection and a fused [2d, d] K/V one; its position table is
set to ours (sin and cos interleaved), so no permutation of the residual stream is needed.
The vocabulary is the ids written as decimal strings: sources go in as our ids, outputs come
back as ids, and the decoder starts from BOS as ours does (not Marian's zero embedding).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from benchmarks.marian_weights import check_compatible, flat_params
from transformer.common.special_ids import BOS_ID, EOS_ID, UNK_ID

# Our activation name -> CTranslate2's Activation member computing the same function.
CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh"}
ENGINE = "ctranslate2"  # the benchmarks' impl names: ctranslate2-float32, ctranslate2-int8
# CTranslate2's weight types for the two precisions the benchmarks compare.
QUANTIZATIONS = ("float32", "int8")


def token(i: int) -> str:
    """The vocabulary entry of id i."""
    return str(i)


def ids_of(tokens: list[str]) -> list[int]:
    return [int(t) for t in tokens]


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


def model_spec(model_cfg, params: Any):
    """The CTranslate2 TransformerSpec of our model, weights set."""
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
    decoder.projection.bias = np.zeros(model_cfg.vocab_size, np.float32)
    for i, layer in enumerate(decoder.layer):
        name = f"decoder_layers/{i}"
        _self_attention(
            layer.self_attention, ours, f"{name}/self_attention", f"{name}/self_sublayer"
        )
        _cross_attention(layer.attention, ours, f"{name}/cross_attention", f"{name}/cross_sublayer")
        _ffn(layer.ffn, ours, name)
    _set_vocabulary(spec, model_cfg)
    return spec


def _set_vocabulary(spec, model_cfg) -> None:
    vocabulary = [token(i) for i in range(model_cfg.vocab_size)]
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    spec.config.bos_token = token(BOS_ID)
    spec.config.eos_token = token(EOS_ID)
    spec.config.unk_token = token(UNK_ID)
    spec.config.decoder_start_token = token(BOS_ID)
    spec.config.layer_norm_epsilon = model_cfg.norm_eps


def save_ctranslate2(model_cfg, params: Any, out_dir: str, quantization: str = "float32"):
    """Writes the CTranslate2 model of our parameters into out_dir (created), its weights
    stored as `quantization` (float32 or int8); returns out_dir."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}: expected one of {QUANTIZATIONS}")
    spec = model_spec(model_cfg, params)
    spec.validate()
    spec.optimize(quantization=quantization)
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)
    return out_dir


def search_options(limit: int, beam_size: int = 1) -> dict:
    """translate_batch options decoding as our searches do when a row may emit `limit` tokens,
    EOS included: EOS may win from the first step (CTranslate2's default minimum is one
    token), and our search forces EOS at the limit, which CTranslate2 expresses by stopping
    one token earlier (its outputs carry no EOS)."""
    return dict(beam_size=beam_size, min_decoding_length=0, max_decoding_length=limit - 1)


def load_translators(model_cfg, params: Any, precisions, directory: str, threads: int) -> dict:
    """{'ctranslate2-<precision>': ctranslate2.Translator} of our parameters, each written
    into directory/<precision>; one translation at a time (inter_threads 1) on `threads`."""
    import ctranslate2

    translators = {}
    for precision in precisions:
        path = save_ctranslate2(model_cfg, params, os.path.join(directory, precision), precision)
        translators[f"{ENGINE}-{precision}"] = ctranslate2.Translator(
            path, device="cpu", inter_threads=1, intra_threads=threads
        )
    return translators

"""Attention probabilities of a model and the per-head statistics computed from them.

`instrumented_model` builds a run's model with the analysis hooks it needs
(model/instrumentation.py: attention capture, head masks) and its trained parameters.
`collect_attention` runs a teacher-forced pass of a model built with attention capture and
reads the probabilities every attention module sowed back with `nnx.capture`, so the model's
calls carry no analysis arguments. `attention_statistics`
turns one batch of them into per-(layer, head) sums of the entropy, first-token, EOS and
punctuation, and positional shares; `flag_heads` names the dead, sink and positional heads.
What each statistic means: transformer/research/analysis.py.
"""

from __future__ import annotations

import unicodedata

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer.common.special_ids import EOS_ID, PAD_ID
from transformer.model.attention import Attention
from transformer.model.instrumentation import Instrumentation
from transformer.model.transformer import Transformer

KINDS = ("encoder_self", "decoder_self", "cross")
# kind -> (the Transformer's layer list, the attention module in each of its layers)
ATTENTION_PATHS = {
    "encoder_self": ("encoder_layers", "self_attention"),
    "decoder_self": ("decoder_layers", "self_attention"),
    "cross": ("decoder_layers", "cross_attention"),
}
STATS = ("entropy", "first_token", "punct_eos", "same", "previous", "next")
THRESHOLDS = {"dead_entropy": 0.9, "sink_share": 0.5, "positional_share": 0.5}


def instrumented_model(model_cfg, params, instrumentation: Instrumentation) -> Transformer:
    """The model of `model_cfg` built with `instrumentation`, holding `params` (the Param
    state of a model of the same config); head masks start at ones (nothing masked)."""
    model = Transformer(model_cfg, rngs=nnx.Rngs(0), instrumentation=instrumentation)
    nnx.update(model, params)
    return model


def attention_modules(model) -> dict[str, list[Attention]]:
    """kind -> the model's Attention module of each layer, in layer order."""
    return {
        kind: [getattr(layer, attr) for layer in getattr(model, stack)]
        for kind, (stack, attr) in ATTENTION_PATHS.items()
    }


def head_name(kind: str, layer: int, head: int) -> str:
    return f"{kind}:{layer}:{head}"


def teacher_forced_logits(model, src, tgt_in) -> jax.Array:
    """src [B, S], tgt_in [B, T], one sentence per row (0 = padding) -> logits [B, T, V]."""
    src_segments = (src != PAD_ID).astype(jnp.int32)
    encoded = model.encode(src, src_segments=src_segments)
    logits, _ = model.decode(encoded, src_segments, tgt_in)
    return logits


def collect_attention(model, src, tgt_in) -> tuple[dict, jax.Array]:
    """Teacher-forced pass capturing attention: ({kind: [layers] of [B, H, T, S]}, logits).

    The model is one built with attention capture (`instrumented_model`); src [B, S] and
    tgt_in [B, T] hold one sentence per row (0 = padding). Its head masks, if any, apply.
    """
    modules = [m for per_layer in attention_modules(model).values() for m in per_layer]
    if not all(m.sow_probabilities for m in modules):
        raise ValueError(
            "the model was built without attention capture: build it with "
            "Instrumentation(capture_attention=True) (instrumented_model)"
        )
    logits, sown = nnx.capture(teacher_forced_logits, nnx.Intermediate)(model, src, tgt_in)
    probs = {}
    for kind, (stack, attr) in ATTENTION_PATHS.items():
        layers = range(len(getattr(model, stack)))
        # Each module ran once: its sown tuple holds one array.
        probs[kind] = [sown[stack][i][attr]["probabilities"].get_value()[0] for i in layers]
    return probs, logits


def punct_table(tok) -> np.ndarray:
    """bool [vocab]: EOS and pieces made only of punctuation (after the '▁' word marker)."""
    table = np.zeros(tok.vocab_size, bool)
    for i in range(tok.vocab_size):
        piece = tok.id_to_piece(i).replace("\u2581", "")
        table[i] = i == EOS_ID or (
            bool(piece) and all(unicodedata.category(c).startswith("P") for c in piece)
        )
    return table


def attention_statistics(probs, batch, tgt_in, src_punct, tgt_punct) -> tuple[dict, dict]:
    """kind -> statistic -> per-(layer, head) sums [L, H] over the batch's real queries, and
    kind -> statistic -> the total weight of those queries.

    probs from `collect_attention`; batch holds src [B, S], src_segments, tgt_segments;
    tgt_in [B, T] the decoder input; src_punct, tgt_punct bool [vocab] (`punct_table`).
    """
    src = batch["src"]
    src_valid, tgt_valid = batch["src_segments"] != 0, batch["tgt_segments"] != 0
    t = tgt_in.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    visible = {  # kind -> (key visible [B, T, S], query valid [B, T], key tokens [B, S])
        "encoder_self": (src_valid[:, :, None] & src_valid[:, None, :], src_valid, src),
        "decoder_self": (
            tgt_valid[:, :, None] & tgt_valid[:, None, :] & causal[None],
            tgt_valid,
            tgt_in,
        ),
        "cross": (tgt_valid[:, :, None] & src_valid[:, None, :], tgt_valid, src),
    }
    sums, counts = {}, {}
    for kind in KINDS:
        if not probs[kind]:
            continue
        key_visible, query_valid, key_tokens = visible[kind]
        table = tgt_punct if kind == "decoder_self" else src_punct
        key_punct = table[key_tokens] & (key_tokens != 0)
        sums[kind], counts[kind] = _stat_sums(
            jnp.stack(probs[kind]), key_visible, query_valid, key_punct, kind != "cross"
        )
    return sums, counts


def _stat_sums(probs, key_visible, query_valid, key_punct, self_attention: bool):
    """Per-(layer, head) sums over queries of each statistic, and their weights.

    probs [L, B, H, T, S]; key_visible bool [B, T, S]; query_valid bool [B, T];
    key_punct bool [B, S].
    """
    n_visible = jnp.sum(key_visible, axis=-1)  # [B, T]
    p = jnp.where(key_visible[None, :, None], probs, 0.0)
    plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)
    entropy = -jnp.sum(plogp, axis=-1)  # [L, B, H, T]
    norm = jnp.log(jnp.maximum(n_visible, 2).astype(jnp.float32))
    entropy = entropy / norm[None, :, None]
    w_all = query_valid.astype(jnp.float32)  # [B, T]
    w_ent = (query_valid & (n_visible > 1)).astype(jnp.float32)
    values = {
        "entropy": (entropy, w_ent),
        "first_token": (p[..., 0], w_all),
        "punct_eos": (jnp.sum(p * key_punct[None, :, None, None, :], axis=-1), w_all),
    }
    if self_attention:
        t = probs.shape[-2]
        diag = jnp.diagonal(p, axis1=-2, axis2=-1)  # [L, B, H, T]
        pad = jnp.zeros(p.shape[:-2] + (1,), p.dtype)
        below = jnp.diagonal(p, offset=-1, axis1=-2, axis2=-1)  # key t-1 for queries 1..T-1
        above = jnp.diagonal(p, offset=1, axis1=-2, axis2=-1)  # key t+1 for queries 0..T-2
        values["same"] = (diag, w_all)
        values["previous"] = (jnp.concatenate([pad, below], axis=-1)[..., :t], w_all)
        values["next"] = (jnp.concatenate([above, pad], axis=-1)[..., :t], w_all)
    sums = {k: jnp.einsum("lbht,bt->lh", v, w) for k, (v, w) in values.items()}
    weights = {k: jnp.sum(w) for k, (_, w) in values.items()}
    return sums, weights


def flag_heads(stats: dict, thresholds: dict = THRESHOLDS) -> dict[str, list[str]]:
    """{'dead': [...], 'sink': [...], 'positional': [...]} head names (see analysis.py)."""
    flags: dict[str, list[str]] = {"dead": [], "sink": [], "positional": []}
    for kind, s in stats.items():
        layers, heads = s["entropy"].shape
        for layer in range(layers):
            for head in range(heads):
                name = head_name(kind, layer, head)
                if s["entropy"][layer, head] > thresholds["dead_entropy"]:
                    flags["dead"].append(name)
                sink = max(s["first_token"][layer, head], s["punct_eos"][layer, head])
                if sink > thresholds["sink_share"]:
                    flags["sink"].append(name)
                if "same" in s:
                    offset = max(s[k][layer, head] for k in ("same", "previous", "next"))
                    if offset > thresholds["positional_share"]:
                        flags["positional"].append(name)
    return flags

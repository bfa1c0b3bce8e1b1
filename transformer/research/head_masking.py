"""Head masking: naming heads to silence, putting the masks on a model, and what they cost.

A spec 'encoder:0:1,cross:1:3' names heads as kind:layer:head (`parse_mask_spec`);
`head_masks` turns a set of heads into 0/1 arrays and `set_head_masks` writes them into the
`HeadMask` state of a model built with head masks (model/instrumentation.py), which the
attention modules read themselves: nothing is passed through the model's calls, and a model
built without masks traces no multiply. `masked_model_state` builds a run's model with head
masks once; `with_head_masks` gives its state with a mask set, for a `Translator`.
`HeadAnalyzer` measures the teacher-forced loss and attention statistics over fixed batches
with any heads masked, and each head's importance: the loss increase when it alone is masked.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID
from transformer.model.instrumentation import Instrumentation
from transformer.model.masks import shift_right
from transformer.research.attention_stats import (
    KINDS,
    attention_modules,
    attention_statistics,
    collect_attention,
    instrumented_model,
    punct_table,
    teacher_forced_logits,
)

KIND_ALIASES = {
    "encoder": "encoder_self",
    "encoder_self": "encoder_self",
    "enc": "encoder_self",
    "decoder": "decoder_self",
    "decoder_self": "decoder_self",
    "dec": "decoder_self",
    "cross": "cross",
}


def num_layers(cfg, kind: str) -> int:
    return cfg.num_encoder_layers if kind == "encoder_self" else cfg.num_decoder_layers


def parse_mask_spec(spec: str, cfg) -> list[tuple[str, int, int]]:
    """'encoder:0:1,cross:1:3' -> [('encoder_self', 0, 1), ('cross', 1, 3)], range-checked."""
    heads = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in KIND_ALIASES:
            raise UserError(
                f"--mask_heads item {item!r}: expected kind:layer:head with kind one of "
                f"encoder, decoder, cross (e.g. 'encoder:0:1,cross:1:3')"
            )
        kind = KIND_ALIASES[parts[0]]
        try:
            layer, head = int(parts[1]), int(parts[2])
        except ValueError:
            raise UserError(f"--mask_heads item {item!r}: layer and head must be ints") from None
        if not 0 <= layer < num_layers(cfg, kind) or not 0 <= head < cfg.num_heads:
            raise UserError(
                f"--mask_heads item {item!r}: {kind} has layers 0..{num_layers(cfg, kind) - 1} "
                f"and heads 0..{cfg.num_heads - 1}"
            )
        heads.append((kind, layer, head))
    if not heads:
        raise UserError("--mask_heads is empty")
    return heads


def head_masks(cfg, masked=()) -> tuple[np.ndarray, np.ndarray]:
    """(encoder [layers, H], decoder [layers, 2, H]) float32 masks: 0 at the masked heads."""
    enc = np.ones((cfg.num_encoder_layers, cfg.num_heads), np.float32)
    dec = np.ones((cfg.num_decoder_layers, 2, cfg.num_heads), np.float32)
    for kind, layer, head in masked:
        if kind == "encoder_self":
            enc[layer, head] = 0.0
        else:
            dec[layer, 0 if kind == "decoder_self" else 1, head] = 0.0
    return enc, dec


def set_head_masks(model, masks: tuple | None) -> None:
    """Writes `head_masks` arrays (encoder [layers, H], decoder [layers, 2, H]) into the
    model's `HeadMask` state; None writes ones (nothing masked). The model is one built with
    head masks (`masked_model_state`, or Instrumentation(head_masks=True))."""
    modules = attention_modules(model)
    if any(a.head_mask is None for per_layer in modules.values() for a in per_layer):
        raise ValueError(
            "the model was built without head masks: build it with "
            "Instrumentation(head_masks=True) (masked_model_state)"
        )
    if masks is None:
        masks = head_masks(model.cfg)
    enc, dec = masks
    per_kind = {"encoder_self": enc, "decoder_self": dec[:, 0], "cross": dec[:, 1]}  # [L, H]
    for kind, per_layer in modules.items():
        for layer, attention in enumerate(per_layer):
            attention.head_mask[...] = jnp.asarray(per_kind[kind][layer])


def masked_model_state(model_cfg, params, *, capture_attention: bool = False) -> tuple:
    """(graphdef, state) of the model built with head masks (all ones) holding `params`; one
    graphdef serves every mask set, so one Translator or jitted function decodes each."""
    instrumentation = Instrumentation(head_masks=True, capture_attention=capture_attention)
    return nnx.split(instrumented_model(model_cfg, params, instrumentation))


def with_head_masks(graphdef, state, masks: tuple) -> nnx.State:
    """A copy of `state` (of a `masked_model_state` graphdef) with these masks written in."""
    model = nnx.merge(graphdef, state, copy=True)
    set_head_masks(model, masks)
    return nnx.state(model)


def make_batch_fn(graphdef, *, with_stats: bool):
    """jit fn(params, batch, masks, src_punct, tgt_punct) -> (nll_sum, tokens, stat sums,
    stat weights), stats only when with_stats; masks as from `head_masks`."""

    def fn(params, batch, masks, src_punct, tgt_punct):
        model = nnx.merge(graphdef, params)
        set_head_masks(model, masks)
        tgt, tgt_seg = batch["tgt"], batch["tgt_segments"]
        tgt_in = shift_right(tgt, tgt_seg, BOS_ID)
        if with_stats:
            probs, logits = collect_attention(model, batch["src"], tgt_in)
        else:
            logits = teacher_forced_logits(model, batch["src"], tgt_in)
        weights = (tgt_seg != 0).astype(jnp.float32)
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(log_probs, tgt[..., None], axis=-1)[..., 0]
        nll_sum, tokens = jnp.sum(nll * weights), jnp.sum(weights)
        if not with_stats:
            return nll_sum, tokens, {}, {}
        sums, counts = attention_statistics(probs, batch, tgt_in, src_punct, tgt_punct)
        return nll_sum, tokens, sums, counts

    return jax.jit(fn)


@dataclasses.dataclass
class SampleResult:
    loss: float  # mean token NLL
    tokens: float
    stats: dict  # kind -> stat -> np [layers, H]


class HeadAnalyzer:
    """Loss and per-head statistics of a model over fixed eval batches, any heads masked."""

    def __init__(self, params, model_cfg, batches, src_tok=None, tgt_tok=None):
        """params: the Param state of a model of `model_cfg` (a restored run's)."""
        self.cfg = model_cfg
        stats_graphdef, self.params = masked_model_state(model_cfg, params, capture_attention=True)
        loss_graphdef, _ = masked_model_state(model_cfg, params)
        keys = ("src", "tgt", "src_segments", "tgt_segments")
        self.batches = [{k: jnp.asarray(b[k]) for k in keys} for b in batches]
        eos_only = np.eye(model_cfg.vocab_size, dtype=bool)[EOS_ID]
        self.src_punct = jnp.asarray(punct_table(src_tok) if src_tok is not None else eos_only)
        self.tgt_punct = jnp.asarray(punct_table(tgt_tok) if tgt_tok is not None else eos_only)
        self._stats_fn = make_batch_fn(stats_graphdef, with_stats=True)
        self._loss_fn = make_batch_fn(loss_graphdef, with_stats=False)

    def score_sample(self, masked=(), *, with_stats: bool = False) -> SampleResult:
        """Mean token NLL of the teacher-forced sample with the `masked` heads silenced, and
        with_stats: the per-head attention statistics."""
        masks = head_masks(self.cfg, masked)
        fn = self._stats_fn if with_stats else self._loss_fn
        nll, tokens = 0.0, 0.0
        sums: dict = {}
        counts: dict = {}
        for batch in self.batches:
            b_nll, b_tok, b_sums, b_counts = jax.device_get(
                fn(self.params, batch, masks, self.src_punct, self.tgt_punct)
            )
            nll += float(b_nll)
            tokens += float(b_tok)
            for kind, stats in b_sums.items():
                for name, value in stats.items():
                    sums.setdefault(kind, {}).setdefault(name, 0.0)
                    sums[kind][name] = sums[kind][name] + np.asarray(value, np.float64)
                    counts.setdefault(kind, {}).setdefault(name, 0.0)
                    counts[kind][name] += float(b_counts[kind][name])
        stats = {
            kind: {name: sums[kind][name] / max(counts[kind][name], 1.0) for name in sums[kind]}
            for kind in sums
        }
        return SampleResult(nll / max(tokens, 1.0), tokens, stats)

    def importance(self, base_loss: float) -> dict:
        """kind -> [layers, H] loss increase when that head alone is masked."""
        out = {}
        for kind in KINDS:
            layers = num_layers(self.cfg, kind)
            values = np.zeros((layers, self.cfg.num_heads))
            for layer in range(layers):
                for head in range(self.cfg.num_heads):
                    values[layer, head] = self.score_sample([(kind, layer, head)]).loss - base_loss
            if layers:
                out[kind] = values
        return out

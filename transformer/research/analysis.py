"""Attention analysis of a trained run: heatmaps, per-head statistics, head masking.

    python -m transformer.research.analysis --workdir RUN --out OUT [--checkpoint latest]
        [--input FILE] [--split valid] [--num_sentences 100] [--mask_heads SPEC]
        [--bleu_sentences 50] [--bleu_heads 3]

1. Heatmaps. For each input sentence (the lines of --input, else the first
   --heatmap_sentences of the split) the model translates it greedily and the translation is
   fed back as the decoder input (BOS + output). Every layer's encoder self-attention,
   decoder self-attention and cross-attention is drawn with SentencePiece pieces on the axes
   (rows = queries, columns = keys; decoder rows are labelled by the decoder *input* token):
   ``OUT/sentence<i>/<kind>_layer<l>.png`` (one panel per head) and
   ``OUT/sentence<i>/overview.png`` (layers x kinds, averaged over heads).

2. Per-head statistics over the first --num_sentences of --split, teacher forced on the
   references. Averages over real (non-padding) queries of:
     entropy       attention entropy / log(number of keys the query can see) (queries seeing
                   one key are left out): 1 = uniform, 0 = one key
     first_token   attention on key position 0 (the first source token / BOS)
     punct_eos     attention on EOS and punctuation pieces
     same, previous, next   attention on the key at the query's position, one before, one
                   after (self-attention only; null for cross-attention)
     importance    increase of the mean token NLL when that head alone is masked
                   (its output zeroed through `head_mask`)
   Flags (thresholds in THRESHOLDS): dead = entropy > 0.9 (near-uniform, averages values);
   sink = first_token > 0.5 or punct_eos > 0.5 (parks attention on a fixed token);
   positional = same, previous or next > 0.5 (attends to a fixed relative offset).
   The --bleu_heads most important heads (-1 = all) are also masked one at a time while
   decoding the first --bleu_sentences greedily: BLEU change vs the unmasked model.
   Writes ``OUT/report.json`` and ``OUT/stats_<statistic>.png`` (layers x heads per kind).

3. --mask_heads 'encoder:0:1,cross:1:3' (kind:layer:head; kinds encoder, decoder, cross)
   masks those heads together and reports loss and BLEU on the sample against the unmasked
   model (report.json "mask_heads"): a test of "this head does nothing".
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import unicodedata

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID
from transformer.model.masks import shift_right

KINDS = ("encoder_self", "decoder_self", "cross")
KIND_ALIASES = {
    "encoder": "encoder_self",
    "encoder_self": "encoder_self",
    "enc": "encoder_self",
    "decoder": "decoder_self",
    "decoder_self": "decoder_self",
    "dec": "decoder_self",
    "cross": "cross",
}
STATS = ("entropy", "first_token", "punct_eos", "same", "previous", "next")
THRESHOLDS = {"dead_entropy": 0.9, "sink_share": 0.5, "positional_share": 0.5}


# ------------------------------------------------------------------------------ head masks


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


def head_name(kind: str, layer: int, head: int) -> str:
    return f"{kind}:{layer}:{head}"


# ------------------------------------------------------------------------------ attention


def collect_attention(model, src, tgt_in, *, head_mask=None) -> tuple[dict, jax.Array]:
    """Teacher-forced pass recording attention: ({kind: [layers] of [B, H, T, S]}, logits).

    src [B, S] and tgt_in [B, T] hold one sentence per row (0 = padding).
    """
    enc_mask, dec_mask = (None, None) if head_mask is None else head_mask
    record: dict = {}
    src_segments = (src != 0).astype(jnp.int32)
    encoded = model.encode(src, src_segments=src_segments, record=record, head_mask=enc_mask)
    logits, _ = model.decode(encoded, src_segments, tgt_in, record=record, head_mask=dec_mask)
    out = {kind: [record[i][kind] for i in sorted(record) if kind in record[i]] for kind in KINDS}
    return out, logits


def punct_table(tok) -> np.ndarray:
    """bool [vocab]: EOS and pieces made only of punctuation (after the '▁' word marker)."""
    table = np.zeros(tok.vocab_size, bool)
    for i in range(tok.vocab_size):
        piece = tok.id_to_piece(i).replace("\u2581", "")
        table[i] = i == EOS_ID or (
            bool(piece) and all(unicodedata.category(c).startswith("P") for c in piece)
        )
    return table


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


def _batch_arrays(batch) -> dict:
    keys = ("src", "tgt", "src_segments", "tgt_segments")
    return {k: jnp.asarray(batch[k]) for k in keys}


def make_batch_fn(graphdef, *, with_stats: bool):
    """jit fn(params, batch, enc_mask, dec_mask, src_punct, tgt_punct) -> (nll_sum, tokens,
    stat sums, stat weights); stats only when with_stats."""

    def fn(params, batch, enc_mask, dec_mask, src_punct, tgt_punct):
        model = nnx.merge(graphdef, params)
        src, tgt = batch["src"], batch["tgt"]
        src_seg, tgt_seg = batch["src_segments"], batch["tgt_segments"]
        tgt_in = shift_right(tgt, tgt_seg, BOS_ID)
        probs, logits = collect_attention(model, src, tgt_in, head_mask=(enc_mask, dec_mask))
        weights = (tgt_seg != 0).astype(jnp.float32)
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(log_probs, tgt[..., None], axis=-1)[..., 0]
        nll_sum, tokens = jnp.sum(nll * weights), jnp.sum(weights)
        if not with_stats:
            return nll_sum, tokens, {}, {}
        src_valid, tgt_valid = src_seg != 0, tgt_seg != 0
        t = tgt.shape[1]
        causal = jnp.tril(jnp.ones((t, t), bool))
        visible = {
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
        return nll_sum, tokens, sums, counts

    return jax.jit(fn)


@dataclasses.dataclass
class SampleResult:
    loss: float  # mean token NLL
    tokens: float
    stats: dict  # kind -> stat -> np [layers, H]


class HeadAnalyzer:
    """Loss and per-head statistics of a model over fixed eval batches."""

    def __init__(self, graphdef, params, model_cfg, batches, src_tok=None, tgt_tok=None):
        self.graphdef, self.params, self.cfg = graphdef, params, model_cfg
        self.batches = [_batch_arrays(b) for b in batches]
        vocab = model_cfg.vocab_size
        self.src_punct = jnp.asarray(
            punct_table(src_tok) if src_tok is not None else np.eye(vocab, dtype=bool)[EOS_ID]
        )
        self.tgt_punct = jnp.asarray(
            punct_table(tgt_tok) if tgt_tok is not None else np.eye(vocab, dtype=bool)[EOS_ID]
        )
        self._stats_fn = make_batch_fn(graphdef, with_stats=True)
        self._loss_fn = make_batch_fn(graphdef, with_stats=False)

    def evaluate(self, masked=(), *, with_stats: bool = False) -> SampleResult:
        enc, dec = head_masks(self.cfg, masked)
        fn = self._stats_fn if with_stats else self._loss_fn
        nll, tokens = 0.0, 0.0
        sums: dict = {}
        counts: dict = {}
        for batch in self.batches:
            b_nll, b_tok, b_sums, b_counts = jax.device_get(
                fn(self.params, batch, enc, dec, self.src_punct, self.tgt_punct)
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
                    values[layer, head] = self.evaluate([(kind, layer, head)]).loss - base_loss
            if layers:
                out[kind] = values
        return out


def flag_heads(stats: dict, thresholds: dict = THRESHOLDS) -> dict[str, list[str]]:
    """{'dead': [...], 'sink': [...], 'positional': [...]} head names (see module doc)."""
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


# ------------------------------------------------------------------------------- plotting


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _pieces(tok, ids) -> list[str]:
    return [tok.id_to_piece(int(i)) for i in ids]


def _heatmap(ax, matrix, rows, cols, title, *, fontsize=7):
    ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=max(float(np.max(matrix)), 1e-6),
              aspect="auto")  # fmt: skip
    ax.set_title(title, fontsize=fontsize + 2)
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(rows)), rows, fontsize=fontsize)


def plot_sentence(out_dir, attention, src_pieces, tgt_in_pieces, num_heads) -> list[str]:
    """One PNG per (layer, kind) with a panel per head, and an overview; returns paths."""
    plt = _plt()
    os.makedirs(out_dir, exist_ok=True)
    axes_labels = {
        "encoder_self": (src_pieces, src_pieces),
        "decoder_self": (tgt_in_pieces, tgt_in_pieces),
        "cross": (tgt_in_pieces, src_pieces),
    }
    paths = []
    n = max(len(src_pieces), len(tgt_in_pieces))
    cell = max(2.5, 0.18 * n + 1.0)
    cols = min(num_heads, 4)
    rows = -(-num_heads // cols)
    for kind in KINDS:
        for layer, probs in enumerate(attention[kind]):
            r_labels, c_labels = axes_labels[kind]
            fig, axes = plt.subplots(rows, cols, figsize=(cell * cols, cell * rows), squeeze=False)
            for h in range(rows * cols):
                ax = axes[h // cols][h % cols]
                if h >= num_heads:
                    ax.axis("off")
                    continue
                _heatmap(ax, probs[h], r_labels, c_labels, f"head {h}")
            fig.suptitle(f"{kind} layer {layer} (rows: queries, columns: keys)")
            fig.tight_layout()
            path = os.path.join(out_dir, f"{kind}_layer{layer}.png")
            fig.savefig(path, dpi=80)
            plt.close(fig)
            paths.append(path)
    layers = max(len(attention[k]) for k in KINDS)
    fig, axes = plt.subplots(layers, 3, figsize=(cell * 3, cell * layers), squeeze=False)
    for c, kind in enumerate(KINDS):
        for layer in range(layers):
            ax = axes[layer][c]
            if layer >= len(attention[kind]):
                ax.axis("off")
                continue
            r_labels, c_labels = axes_labels[kind]
            mean = np.mean(attention[kind][layer], axis=0)
            _heatmap(ax, mean, r_labels, c_labels, f"{kind} L{layer} (head mean)")
    fig.tight_layout()
    path = os.path.join(out_dir, "overview.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    paths.append(path)
    return paths


def plot_statistics(out_dir, per_head: dict) -> list[str]:
    """OUT/stats_<name>.png: a layers x heads heatmap per kind, values written in cells."""
    plt = _plt()
    paths = []
    for name in (*STATS, "importance"):
        kinds = [k for k in KINDS if k in per_head and name in per_head[k]]
        if not kinds:
            continue
        fig, axes = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 3), squeeze=False)
        for ax, kind in zip(axes[0], kinds, strict=True):
            m = np.asarray(per_head[kind][name], np.float64)
            im = ax.imshow(m, cmap="magma", aspect="auto")
            ax.set_title(kind, fontsize=9)
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_xticks(range(m.shape[1]))
            ax.set_yticks(range(m.shape[0]))
            for (i, j), v in np.ndenumerate(m):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="cyan")
            fig.colorbar(im, ax=ax, fraction=0.046)
        fig.suptitle(name)
        fig.tight_layout()
        path = os.path.join(out_dir, f"stats_{name}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------------- main


def _greedy_translator(run, batch_size: int):
    from transformer.inference.translator import DecodeSettings, Translator

    d = run.config.decode
    settings = DecodeSettings(strategy="greedy", max_len_a=float(d.max_len_a),
                              max_len_b=int(d.max_len_b), batch_size=batch_size)  # fmt: skip
    return Translator(run.graphdef, run.model_cfg, settings, run.data.source_tokenizer,
                      run.data.target_tokenizer)  # fmt: skip


def _bleu(translator, params, sources, references, masked, cfg) -> float:
    from transformer.scoring import metrics as metrics_lib

    mask = head_masks(cfg, masked) if masked else None
    hyps = translator.translate(params, sources, head_mask=mask).best
    return metrics_lib.score(hyps, references).bleu


def analyze(args) -> dict:
    from transformer.data import encode_sources
    from transformer.evaluation.evaluator import restore_run

    start = time.time()
    run = restore_run(args.workdir, checkpoint=args.checkpoint)
    cfg = run.model_cfg
    src_tok, tgt_tok = run.data.source_tokenizer, run.data.target_tokenizer
    os.makedirs(args.out, exist_ok=True)
    model = nnx.merge(run.graphdef, run.params)
    split = run.data.eval_split(
        args.split, batch_size=args.batch_size, max_sentences=args.num_sentences
    )
    translator = _greedy_translator(run, args.batch_size)
    report: dict = {
        "workdir": args.workdir,
        "step": run.step,
        "split": args.split,
        "num_sentences": len(split.sources),
        "thresholds": THRESHOLDS,
        "statistics": {
            "entropy": "attention entropy / log(visible keys), mean over queries",
            "first_token": "attention share on key position 0",
            "punct_eos": "attention share on EOS and punctuation pieces",
            "same/previous/next": "attention share on the key at offset 0/-1/+1",
            "importance": "mean token NLL increase when the head alone is masked",
            "bleu_delta": "greedy BLEU change on the BLEU sample when the head alone is masked",
        },
    }

    # 1. Heatmaps.
    lines = (
        [ln for ln in _read_lines(args.input) if ln.strip()]
        if args.input
        else list(split.sources[: args.heatmap_sentences])
    )
    sentences = []
    ids, _ = encode_sources(lines, src_tok, cfg.max_len)
    outputs, _ = translator.translate_ids(run.params, ids) if ids else ([], [])
    for i, (line, src_ids, out) in enumerate(zip(lines, ids, outputs, strict=True)):
        tgt_in = [BOS_ID] + list(out[0])[: cfg.max_len - 1]
        attention, _ = collect_attention(
            model, jnp.asarray([src_ids], jnp.int32), jnp.asarray([tgt_in], jnp.int32)
        )
        attention = {k: [np.asarray(p[0]) for p in v] for k, v in attention.items()}
        paths = plot_sentence(
            os.path.join(args.out, f"sentence{i}"), attention, _pieces(src_tok, src_ids),
            _pieces(tgt_tok, tgt_in), cfg.num_heads,
        )  # fmt: skip
        sentences.append({"source": line, "translation": tgt_tok.decode(list(out[0])),
                          "pngs": paths})  # fmt: skip
        print(f"sentence {i}: {len(paths)} heatmaps in {os.path.dirname(paths[0])}", flush=True)
    report["sentences"] = sentences

    # 2. Per-head statistics and importance.
    analyzer = HeadAnalyzer(run.graphdef, run.params, cfg, list(split), src_tok, tgt_tok)
    base = analyzer.evaluate(with_stats=True)
    importance = analyzer.importance(base.loss)
    per_head = {kind: dict(base.stats.get(kind, {})) for kind in KINDS if kind in base.stats}
    for kind, values in importance.items():
        per_head.setdefault(kind, {})["importance"] = values
    n_bleu = min(args.bleu_sentences, len(split.sources))
    bleu_src, bleu_ref = list(split.sources[:n_bleu]), list(split.targets[:n_bleu])
    base_bleu = _bleu(translator, run.params, bleu_src, bleu_ref, (), cfg) if n_bleu else None
    candidates = [(k, layer, head) for k, v in importance.items()
                  for layer, head in np.ndindex(v.shape)]  # fmt: skip
    ranked = sorted(candidates, key=lambda x: -importance[x[0]][x[1], x[2]])
    top = ranked if args.bleu_heads < 0 else ranked[: args.bleu_heads]
    bleu_delta = {}
    if n_bleu:
        for kind, layer, head in top:
            masked_bleu = _bleu(translator, run.params, bleu_src, bleu_ref, [(kind, layer, head)],
                                cfg)  # fmt: skip
            bleu_delta[head_name(kind, layer, head)] = masked_bleu - base_bleu
    flags = flag_heads(base.stats)
    heads = []
    for kind, stats in per_head.items():
        for layer, head in np.ndindex(stats["importance"].shape):
            name = head_name(kind, layer, head)
            row = {"kind": kind, "layer": int(layer), "head": int(head)}
            for stat in (*STATS, "importance"):
                row[stat] = float(stats[stat][layer, head]) if stat in stats else None
            row["bleu_delta"] = bleu_delta.get(name)
            row["flags"] = [f for f, names in flags.items() if name in names]
            heads.append(row)
    report["baseline"] = {"loss": base.loss, "tokens": base.tokens, "bleu": base_bleu,
                          "bleu_sentences": n_bleu}  # fmt: skip
    report["heads"] = heads
    report["flagged"] = flags
    report["stats_pngs"] = plot_statistics(args.out, per_head)

    # 3. Masking a set of heads together.
    if args.mask_heads:
        masked = parse_mask_spec(args.mask_heads, cfg)
        result = analyzer.evaluate(masked)
        m_bleu = _bleu(translator, run.params, bleu_src, bleu_ref, masked, cfg) if n_bleu else None
        report["mask_heads"] = {
            "heads": [head_name(*h) for h in masked],
            "loss": result.loss,
            "loss_delta": result.loss - base.loss,
            "bleu": m_bleu,
            "bleu_delta": None if m_bleu is None else m_bleu - base_bleu,
        }
        mh = report["mask_heads"]
        print(
            f"masking {', '.join(mh['heads'])}: loss {base.loss:.4f} -> {result.loss:.4f} "
            f"({mh['loss_delta']:+.4f})"
            + (f", BLEU {base_bleu:.2f} -> {m_bleu:.2f} ({mh['bleu_delta']:+.2f})"
               if m_bleu is not None else ""),
            flush=True,
        )  # fmt: skip
    report["seconds"] = time.time() - start
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(_jsonable(report), f, indent=2)
    _print_summary(report)
    return report


def _read_lines(path: str) -> list[str]:
    from transformer.scoring import metrics as metrics_lib

    return metrics_lib.read_lines(path)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def _print_summary(report: dict) -> None:
    base = report["baseline"]
    bleu = "" if base["bleu"] is None else f", greedy BLEU {base['bleu']:.2f}"
    print(f"{report['num_sentences']} {report['split']} sentences: loss {base['loss']:.4f}{bleu}")
    top = sorted(report["heads"], key=lambda h: -(h["importance"] or 0))[:5]
    for h in top:
        delta = "" if h["bleu_delta"] is None else f", BLEU {h['bleu_delta']:+.2f}"
        print(f"  {h['kind']}:{h['layer']}:{h['head']} importance {h['importance']:+.4f}{delta}"
              f" entropy {h['entropy']:.2f} {' '.join(h['flags'])}")  # fmt: skip
    for flag, names in report["flagged"].items():
        print(f"{flag} heads ({len(names)}): {', '.join(names) or '-'}")

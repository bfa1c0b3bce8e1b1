"""Attention analysis of a trained run: heatmaps, per-head statistics, head masking.

`analyze` runs the stages below on one checkpoint (transformer-analyze is its command line);
the parts live in attention_stats (capture and statistics), head_masking (masks and
importance) and attention_plots.

    transformer-analyze --workdir RUN --out OUT [--checkpoint latest] [--input FILE]
        [--split valid] [--num_sentences 100] [--mask_heads SPEC] [--bleu_sentences 50]
        [--bleu_heads 3]

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
                   (its output zeroed by a `HeadMask`)
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

import json
import math
import os
import time

import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer.common.special_ids import BOS_ID
from transformer.data import tokenize_sources
from transformer.evaluation.evaluator import restore_run
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.instrumentation import Instrumentation
from transformer.research.attention_plots import plot_sentence, plot_statistics, token_pieces
from transformer.research.attention_stats import (
    KINDS,
    STATS,
    THRESHOLDS,
    collect_attention,
    flag_heads,
    head_name,
    instrumented_model,
)
from transformer.research.head_masking import (
    HeadAnalyzer,
    head_masks,
    masked_model_state,
    parse_mask_spec,
    with_head_masks,
)
from transformer.scoring import metrics as metrics_lib

STATISTICS = {  # report.json "statistics": what each number of a head row is
    "entropy": "attention entropy / log(visible keys), mean over queries",
    "first_token": "attention share on key position 0",
    "punct_eos": "attention share on EOS and punctuation pieces",
    "same/previous/next": "attention share on the key at offset 0/-1/+1",
    "importance": "mean token NLL increase when the head alone is masked",
    "bleu_delta": "greedy BLEU change on the BLEU sample when the head alone is masked",
}


class _GreedyTranslation:
    """Greedy translation of the run's model with any heads masked, and its BLEU on the BLEU
    sample. The Translator is built on the graphdef of the model with head masks set (all
    ones = unmasked), so every mask set is one state of one compiled program."""

    def __init__(self, run, batch_size: int, sources: list[str], references: list[str]):
        self.run, self.sources, self.references = run, sources, references
        d = run.config.decode
        settings = DecodeSettings(
            strategy="greedy",
            max_len_a=float(d.max_len_a),
            max_len_b=int(d.max_len_b),
            batch_size=batch_size,
        )
        self.graphdef, self.state = masked_model_state(run.model_cfg, run.params)
        tokenizers = run.data.source_tokenizer, run.data.target_tokenizer
        self.translator = Translator(self.graphdef, run.model_cfg, settings, *tokenizers)

    def _masked(self, masked) -> nnx.State:
        masks = head_masks(self.run.model_cfg, masked)
        return with_head_masks(self.graphdef, self.state, masks)

    def translate_ids(self, id_lists) -> list:
        """Unmasked greedy outputs: per input, a list of one token list."""
        return self.translator.translate_ids(self.state, id_lists)[0]

    def bleu(self, masked=()) -> float | None:
        """Greedy BLEU on the BLEU sample with these heads masked (None: empty sample)."""
        if not self.sources:
            return None
        hypotheses = self.translator.translate(self._masked(masked), self.sources).best
        return metrics_lib.score(hypotheses, self.references).bleu


def analyze(
    *,
    workdir: str,
    out: str,
    checkpoint: str = "auto",
    input_path: str | None = None,
    split: str = "valid",
    num_sentences: int = 100,
    batch_size: int = 32,
    heatmap_sentences: int = 2,
    bleu_sentences: int = 50,
    bleu_heads: int = 3,
    mask_heads: str | None = None,
) -> dict:
    """Runs the analysis of the module docstring on one checkpoint of the run in workdir,
    writes OUT/report.json and the PNGs, prints a summary and returns the report."""
    start = time.time()
    run = restore_run(workdir, checkpoint=checkpoint)
    os.makedirs(out, exist_ok=True)
    sample = run.data.eval_split(split, batch_size=batch_size, max_sentences=num_sentences)
    n_bleu = min(bleu_sentences, len(sample.sources))
    translation = _GreedyTranslation(
        run, batch_size, list(sample.sources[:n_bleu]), list(sample.targets[:n_bleu])
    )
    report: dict = {
        "workdir": workdir,
        "step": run.step,
        "split": split,
        "num_sentences": len(sample.sources),
        "thresholds": THRESHOLDS,
        "statistics": STATISTICS,
    }
    lines = (
        [ln for ln in metrics_lib.read_lines(input_path) if ln.strip()]
        if input_path
        else list(sample.sources[:heatmap_sentences])
    )
    report["sentences"] = _heatmaps(run, translation, lines, out)
    tokenizers = run.data.source_tokenizer, run.data.target_tokenizer
    analyzer = HeadAnalyzer(run.params, run.model_cfg, list(sample), *tokenizers)
    report.update(_head_statistics(analyzer, translation, bleu_heads, out))
    if mask_heads:
        report["mask_heads"] = _mask_heads(mask_heads, analyzer, translation, report["baseline"])
    report["seconds"] = time.time() - start
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(_jsonable(report), f, indent=2)
    _print_summary(report)
    return report


def _heatmaps(run, translation: _GreedyTranslation, lines: list[str], out: str) -> list[dict]:
    """Stage 1: translates each line greedily and draws the attention of the model fed its
    own translation; returns the report's "sentences"."""
    cfg, src_tok, tgt_tok = run.model_cfg, run.data.source_tokenizer, run.data.target_tokenizer
    model = instrumented_model(cfg, run.params, Instrumentation(capture_attention=True))
    ids, _ = tokenize_sources(lines, src_tok, cfg.max_len)
    outputs = translation.translate_ids(ids) if ids else []
    sentences = []
    for i, (line, src_ids, output) in enumerate(zip(lines, ids, outputs, strict=True)):
        tgt_in = [BOS_ID] + list(output[0])[: cfg.max_len - 1]
        attention, _ = collect_attention(
            model, jnp.asarray([src_ids], jnp.int32), jnp.asarray([tgt_in], jnp.int32)
        )
        attention = {k: [np.asarray(p[0]) for p in v] for k, v in attention.items()}
        paths = plot_sentence(
            os.path.join(out, f"sentence{i}"),
            attention,
            token_pieces(src_tok, src_ids),
            token_pieces(tgt_tok, tgt_in),
            cfg.num_heads,
        )
        sentences.append(
            {"source": line, "translation": tgt_tok.detokenize(list(output[0])), "pngs": paths}
        )
        print(f"sentence {i}: {len(paths)} heatmaps in {os.path.dirname(paths[0])}", flush=True)
    return sentences


def _head_statistics(
    analyzer: HeadAnalyzer, translation: _GreedyTranslation, bleu_heads: int, out: str
) -> dict:
    """Stage 2: per-head statistics, importance, BLEU change of the most important heads and
    flags; returns the report's "baseline", "heads", "flagged" and "stats_pngs"."""
    base = analyzer.score_sample(with_stats=True)
    importance = analyzer.importance(base.loss)
    per_head = {kind: dict(base.stats.get(kind, {})) for kind in KINDS if kind in base.stats}
    for kind, values in importance.items():
        per_head.setdefault(kind, {})["importance"] = values
    base_bleu = translation.bleu()
    candidates = [
        (k, layer, head) for k, v in importance.items() for layer, head in np.ndindex(v.shape)
    ]
    ranked = sorted(candidates, key=lambda x: -importance[x[0]][x[1], x[2]])
    top = ranked if bleu_heads < 0 else ranked[:bleu_heads]
    bleu_delta = {}
    if base_bleu is not None:
        for head in top:
            bleu_delta[head_name(*head)] = translation.bleu([head]) - base_bleu
    flags = flag_heads(base.stats)
    return {
        "baseline": {
            "loss": base.loss,
            "tokens": base.tokens,
            "bleu": base_bleu,
            "bleu_sentences": len(translation.sources),
        },
        "heads": _head_rows(per_head, bleu_delta, flags),
        "flagged": flags,
        "stats_pngs": plot_statistics(out, per_head),
    }


def _head_rows(per_head: dict, bleu_delta: dict, flags: dict) -> list[dict]:
    """One report row per head: its statistics, importance, BLEU change and flags."""
    rows = []
    for kind, stats in per_head.items():
        for layer, head in np.ndindex(stats["importance"].shape):
            name = head_name(kind, layer, head)
            row = {"kind": kind, "layer": int(layer), "head": int(head)}
            for stat in (*STATS, "importance"):
                row[stat] = float(stats[stat][layer, head]) if stat in stats else None
            row["bleu_delta"] = bleu_delta.get(name)
            row["flags"] = [f for f, names in flags.items() if name in names]
            rows.append(row)
    return rows


def _mask_heads(
    spec: str, analyzer: HeadAnalyzer, translation: _GreedyTranslation, baseline: dict
) -> dict:
    """Stage 3: the loss and BLEU with the heads of spec masked together, against baseline;
    returns the report's "mask_heads"."""
    masked = parse_mask_spec(spec, analyzer.cfg)
    result = analyzer.score_sample(masked)
    m_bleu = translation.bleu(masked)
    base_loss, base_bleu = baseline["loss"], baseline["bleu"]
    report = {
        "heads": [head_name(*h) for h in masked],
        "loss": result.loss,
        "loss_delta": result.loss - base_loss,
        "bleu": m_bleu,
        "bleu_delta": None if m_bleu is None else m_bleu - base_bleu,
    }
    print(
        f"masking {', '.join(report['heads'])}: loss {base_loss:.4f} -> {result.loss:.4f} "
        f"({report['loss_delta']:+.4f})"
        + (
            f", BLEU {base_bleu:.2f} -> {m_bleu:.2f} ({report['bleu_delta']:+.2f})"
            if m_bleu is not None
            else ""
        ),
        flush=True,
    )
    return report


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
        print(
            f"  {h['kind']}:{h['layer']}:{h['head']} importance {h['importance']:+.4f}{delta}"
            f" entropy {h['entropy']:.2f} {' '.join(h['flags'])}"
        )
    for flag, names in report["flagged"].items():
        print(f"{flag} heads ({len(names)}): {', '.join(names) or '-'}")

"""Translation speed on real data: a trained run through this project and, with the very same
weights, through Hugging Face's MarianMTModel (transformer/interop/marian.py) and through
CTranslate2 in float32 and int8 (benchmarks/ctranslate2_weights.py).

Usage:
    python -m benchmarks.real_data_speed --workdir RUN [--split test] [--json]
        [--batch_size 64] [--what greedy,beam4] [--max_sentences N] [--repeats 1]

The run must be Post-LN with LayerNorm, sinusoidal positions, one shared embedding tied to the
output, biases, full multi-head attention and ReLU/GELU (else a one-line error names the
field). The split's sources are tokenized once with the run's SentencePiece model (empty lines
are left out and score as empty translations); both sides then translate the same id lists in
the same batches: sorted by source length (stable), as the run's Translator batches them,
`--batch_size` sentences each. Ours is `Translator.translate_ids` (the path eval.py takes);
the peer is `generate()` under `torch.inference_mode()`, float32, eager.

Figures (impl 'jax-transformer' = ours, 'jax-transformer-int8' = ours decoding with
benchmarks/common.INT8_DECODE (int8 products, bfloat16 encoder output), 'torch-marian' = the
peer, 'ctranslate2-float32' and 'ctranslate2-int8' = CTranslate2 on the same batches, its
threads the machine's cores, each batch with its longest sentence's limit as the peer's):

- `setup`: versions, cores, threads, the 1-minute load average before the benchmark started
  (`loadavg_1m_before`) and the model's size and settings.
- `<mode>_sentences_per_s` (mode greedy or beam4): translated sentences / wall seconds of
  ids -> ids, the median of `--repeats` passes over the whole split, after warm-up: one full
  untimed pass of ours (it compiles one program per batch shape), one untimed batch of the
  peer (eager PyTorch compiles nothing). Tokenizing and detokenizing are not timed;
  `output_tokens` counts the ids each side emitted (EOS not counted).
- `<mode>_bleu`: sacreBLEU of each implementation's translations against the references
  (transformer.scoring.metrics, as eval.py scores).
- `<mode>_agreement` (every impl but ours in float32): the share of
  sentences whose output ids equal ours token for token (up to EOS), with
  `agree_up_to_own_limit` beside it (see the length limit below). Greedy should give 1.0
  for the latter but for near-ties of the argmax that float rounding (or int8) breaks
  differently; beam4 need not (HF's and CTranslate2's length penalty is len ** alpha, ours
  GNMT's ((5 + len) / 6) ** alpha, so the hypotheses are ranked differently).
- `<mode>_speed_ratio`: ours over the peer's sentences/s, printed only when the load average
  before the benchmark was at most half the cores (otherwise a note on stderr says why not).
- `peak_rss_mib`, with the load average after the benchmark (`loadavg_1m_after`).

Caveats:
- Length limit: ours allows each sentence floor(max_len_a * src_len + max_len_b) tokens and
  forces EOS at that limit; generate() takes one limit per batch, so the peer gets the
  batch's largest (its longest source's) with EOS forced there (forced_eos_token_id). A
  sentence that reaches its own limit may therefore differ: the peer goes on where ours
  stopped. `agree_up_to_own_limit` also counts those (ours at its limit, a prefix of the
  peer's), so it is the figure that tests the weight mapping on real data.
- Padding: ours pads every batch to `--batch_size` rows and its width to a multiple of 8 (fixed
  shapes for the compiled program); the peer pads to the batch's longest source only.
- Speed depends on what else runs: the load average is recorded, and ratios are withheld on a
  busy machine. Ours uses XLA's thread pool, the peer torch's `threads`.
- A bfloat16 run decodes in bfloat16 on our side and float32 on the peer's: agreement below 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import tempfile

import numpy as np

from benchmarks import ctranslate2_weights
from benchmarks.common import (
    INT8_DECODE,
    MAX_BACKGROUND_LOAD_PER_CORE,
    OURS,
    OURS_INT8,
    PEER,
    busy,
    emit,
    median_time,
    peak_rss_mib,
)
from transformer.common.errors import UserError, report_user_error
from transformer.common.machine import describe_machine
from transformer.common.special_ids import PAD_ID
from transformer.interop import marian

MODES = ("greedy", "beam4")
BEAM_SIZE = 4


@dataclasses.dataclass
class Corpus:
    """The split's sentences: id lists of the non-empty sources (EOS-terminated, cut to
    model.max_len), where they sit among all sources, and the references."""

    id_lists: list[list[int]]
    positions: list[int]
    num_sources: int
    references: list[str]
    num_truncated: int


@dataclasses.dataclass
class Outputs:
    """One implementation's output ids per translated sentence and its median seconds."""

    ids: list[list[int]]
    seconds: float


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="a trained run's directory")
    p.add_argument("--split", default="test", help="valid, test, train or a split name")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--batch_size", type=int, default=64, help="sentences per batch, both sides")
    p.add_argument("--what", default="greedy,beam4", help="comma list of: greedy, beam4")
    p.add_argument("--max_sentences", type=int, default=None, help="only the first N sentences")
    p.add_argument("--repeats", type=int, default=1, help="timed passes per figure (median)")
    p.add_argument("--checkpoint", default="auto", help="auto, latest, best or a step")
    args = p.parse_args(argv)
    args.what = [w.strip() for w in args.what.split(",") if w.strip()]
    if not args.what or set(args.what) - set(MODES):
        p.error(f"--what {','.join(args.what)!r}: choose from {', '.join(MODES)}")
    if args.batch_size < 1 or args.repeats < 1:
        p.error("--batch_size and --repeats must be >= 1")
    if args.max_sentences is not None and args.max_sentences < 1:
        p.error("--max_sentences must be >= 1")
    return args


def load_corpus(run, split: str, max_sentences: int | None) -> Corpus:
    from transformer.data import tokenize_sources

    eval_split = run.data.eval_split(split, max_sentences=max_sentences)
    sources, references = list(eval_split.sources), list(eval_split.targets)
    ids, truncated = tokenize_sources(sources, run.data.source_tokenizer, run.model_cfg.max_len)
    positions = [i for i, line in enumerate(sources) if line.strip()]
    if not positions:
        raise UserError(f"split {split!r} of {run.workdir} has no non-empty source line")
    return Corpus([ids[i] for i in positions], positions, len(sources), references, truncated)


def decode_settings(run, mode: str, batch_size: int):
    """The run's decode settings (length limits, min_len, length penalty) in `mode`."""
    settings = dataclasses.replace(run.translator.settings, batch_size=batch_size, n_best=1)
    if mode == "greedy":
        return dataclasses.replace(settings, strategy="greedy")
    return dataclasses.replace(settings, strategy="beam", beam_size=BEAM_SIZE)


def batches(id_lists: list[list[int]], batch_size: int) -> list[np.ndarray]:
    """Sentence indices per batch: sorted by length (stable), as Translator.translate_ids."""
    order = np.argsort([len(x) for x in id_lists], kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def row_limit(settings, max_len: int, src_len: int) -> int:
    """Output tokens (EOS included) our search allows a sentence of src_len tokens:
    floor(max_len_a * src_len + max_len_b) clipped to [1, max_out]. The clip to max_out (which
    Translator takes from the batch's padded width >= src_len) only ever binds at max_len."""
    return max(1, min(max_len, math.floor(settings.max_len_a * src_len + settings.max_len_b)))


def run_ours(translator, params, corpus: Corpus, repeats: int) -> Outputs:
    """Translator.translate_ids over the corpus: one untimed pass (compiles every batch
    shape), then the median of `repeats` timed passes."""
    results = []

    def translate():
        return translator.translate_ids(params, corpus.id_lists)[0]

    seconds, _ = median_time(translate, warmup=1, repeats=repeats, sync=results.append)
    return Outputs([hyps[0] for hyps in results[-1]], seconds)


def _generate_kwargs(settings, mode: str) -> dict:
    """generate() arguments of `mode` under our decode settings."""
    kwargs = dict(do_sample=False, num_beams=1)
    if mode == "beam4":
        # "never": stop only when no live beam can still win, as our beam search's exact rule.
        kwargs.update(
            num_beams=BEAM_SIZE, length_penalty=settings.length_penalty, early_stopping="never"
        )
    if settings.min_len:
        kwargs["min_new_tokens"] = settings.min_len
    return kwargs


def _generate_batch(hf, id_lists, chunk, max_new_tokens: int, kwargs) -> list[list[int]]:
    """generate() on one batch padded to its longest source -> ids per sentence."""
    import torch

    longest = max(len(id_lists[i]) for i in chunk)
    src = np.full((len(chunk), longest), PAD_ID, np.int64)  # [b, S]
    for r, i in enumerate(chunk):
        src[r, : len(id_lists[i])] = id_lists[i]
    src_t = torch.from_numpy(src)
    with torch.inference_mode():
        out = hf.generate(
            input_ids=src_t,
            attention_mask=(src_t != PAD_ID).long(),
            max_new_tokens=max_new_tokens,
            **kwargs,
        )
    return marian.generated_ids(out.numpy())


def run_batched(batch_fn, settings, max_len: int, corpus: Corpus, repeats: int) -> Outputs:
    """batch_fn(chunk, limit) -> ids per sentence, over the same batches as ours, each with its
    longest sentence's limit: one untimed batch, then the median of `repeats` timed passes."""
    chunks = batches(corpus.id_lists, settings.batch_size)
    lengths = [len(x) for x in corpus.id_lists]
    limits = [row_limit(settings, max_len, max(lengths[i] for i in c)) for c in chunks]
    batch_fn(chunks[0], limits[0])
    results = []

    def translate():
        ids: list = [None] * len(corpus.id_lists)
        for chunk, limit in zip(chunks, limits, strict=True):
            for i, out in zip(chunk, batch_fn(chunk, limit), strict=True):
                ids[i] = out
        return ids

    seconds, _ = median_time(translate, warmup=0, repeats=repeats, sync=results.append)
    return Outputs(results[-1], seconds)


def run_peer(hf, settings, max_len: int, mode: str, corpus: Corpus, repeats: int) -> Outputs:
    """generate() over our batches (run_batched)."""
    kwargs = _generate_kwargs(settings, mode)

    def batch_fn(chunk, limit):
        return _generate_batch(hf, corpus.id_lists, chunk, limit, kwargs)

    return run_batched(batch_fn, settings, max_len, corpus, repeats)


def run_engine(engine, settings, max_len: int, mode: str, corpus: Corpus, repeats) -> Outputs:
    """CTranslate2's translate_batch over our batches (run_batched), under our length rule
    (ctranslate2_weights.search_options) with the batch's longest sentence's limit."""
    beam = BEAM_SIZE if mode == "beam4" else 1
    extra = {"length_penalty": settings.length_penalty} if mode == "beam4" else {}

    def batch_fn(chunk, limit):
        options = {**ctranslate2_weights.search_options(limit, beam), **extra}
        if settings.min_len:
            options["min_decoding_length"] = settings.min_len
        sources = [[ctranslate2_weights.token(t) for t in corpus.id_lists[i]] for i in chunk]
        results = engine.translate_batch(sources, **options)
        return [ctranslate2_weights.ids_of(r.hypotheses[0]) for r in results]

    return run_batched(batch_fn, settings, max_len, corpus, repeats)


def bleu(run, corpus: Corpus, ids: list[list[int]]) -> float:
    from transformer.scoring import metrics

    hypotheses = [""] * corpus.num_sources
    for position, sentence in zip(corpus.positions, ids, strict=True):
        hypotheses[position] = run.data.target_tokenizer.detokenize(sentence)
    return metrics.score(hypotheses, corpus.references).bleu


def agreement(settings, max_len: int, corpus: Corpus, ours: Outputs, peer: Outputs) -> dict:
    """Share of sentences with identical ids; `agree_up_to_own_limit` also counts those where
    ours stopped at its own length limit and is a prefix of the peer's longer output (the
    peer's batch-wide limit alone makes them differ)."""
    n = len(ours.ids)
    identical = sum(a == b for a, b in zip(ours.ids, peer.ids, strict=True))
    cut_by_limit = sum(
        a != b
        and len(a) == row_limit(settings, max_len, len(src)) - 1  # EOS forced at the limit
        and b[: len(a)] == a
        for a, b, src in zip(ours.ids, peer.ids, corpus.id_lists, strict=True)
    )
    return {
        "value": identical / n,
        "identical": identical,
        "agree_up_to_own_limit": (identical + cut_by_limit) / n,
    }


def report_mode(run, hf, engines, mode: str, corpus: Corpus, args, ratios_allowed) -> None:
    from transformer.inference.translator import Translator

    settings = decode_settings(run, mode, args.batch_size)
    translator = Translator(run.graphdef, run.model_cfg, settings, None, None)
    ours = run_ours(translator, run.params, corpus, args.repeats)
    max_len = run.model_cfg.max_len
    int8 = Translator(
        run.graphdef, run.model_cfg, dataclasses.replace(settings, **INT8_DECODE), None, None
    )
    others = {OURS_INT8: run_ours(int8, run.params, corpus, args.repeats)}
    others[PEER] = run_peer(hf, settings, max_len, mode, corpus, args.repeats)
    for impl, engine in engines.items():
        others[impl] = run_engine(engine, settings, max_len, mode, corpus, args.repeats)
    n = len(corpus.id_lists)
    common = dict(mode=mode, sentences=n, batch_size=args.batch_size, repeats=args.repeats)
    for impl, outputs in ((OURS, ours), *others.items()):
        _emit_outputs(run, corpus, impl, outputs, args, common)
    for impl, outputs in others.items():
        same = agreement(settings, max_len, corpus, ours, outputs)
        emit(
            f"{mode}_agreement",
            same.pop("value"),
            "fraction",
            impl,
            args.json,
            vs=OURS,
            **same,
            **common,
        )
    if ratios_allowed:
        emit(
            f"{mode}_speed_ratio",
            others[PEER].seconds / ours.seconds,
            "x",
            OURS,
            args.json,
            over=PEER,
            **common,
        )


def _emit_outputs(run, corpus: Corpus, impl: str, outputs: Outputs, args, common) -> None:
    n = len(corpus.id_lists)
    emit(
        f"{common['mode']}_sentences_per_s",
        n / outputs.seconds,
        "sentences/s",
        impl,
        args.json,
        seconds=round(outputs.seconds, 4),
        output_tokens=sum(len(x) for x in outputs.ids),
        **common,
    )
    emit(
        f"{common['mode']}_bleu", bleu(run, corpus, outputs.ids), "BLEU", impl, args.json, **common
    )


def setup_info(run, hf, corpus: Corpus, load_before: float) -> dict:
    import ctranslate2
    import jax
    import torch
    import transformers

    s = run.translator.settings
    return {
        "ctranslate2": ctranslate2.__version__,
        "cpus": os.cpu_count(),
        "machine": describe_machine(jax.default_backend()),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "attn": hf.config._attn_implementation,
        "params": sum(p.numel() for p in hf.parameters()),
        "dtype": run.model_cfg.dtype,
        "step": run.step,
        "sentences": len(corpus.id_lists),
        "truncated_inputs": corpus.num_truncated,
        "max_len_a": s.max_len_a,
        "max_len_b": s.max_len_b,
        "length_penalty": s.length_penalty,
        "loadavg_1m_before": round(load_before, 2),
    }


def benchmark(args, load_before: float) -> None:
    import transformers

    from transformer.evaluation.restore import restore_run

    transformers.logging.set_verbosity_error()
    run = restore_run(args.workdir, checkpoint=args.checkpoint)
    hf = marian.to_marian(run.model_cfg, run.params)  # UserError if not expressible
    corpus = load_corpus(run, args.split, args.max_sentences)
    emit("setup", 0, "-", OURS, args.json, **setup_info(run, hf, corpus, load_before))
    cores = os.cpu_count() or 1
    ratios_allowed = not busy(load_before, cores)
    if not ratios_allowed:
        print(
            f"note: speed ratios withheld: load average {load_before:.2f} before the benchmark "
            f"exceeds {MAX_BACKGROUND_LOAD_PER_CORE} x {cores} cores",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory() as directory:
        engines = ctranslate2_weights.load_translators(
            run.model_cfg,
            run.params,
            ctranslate2_weights.QUANTIZATIONS,
            directory,
            os.cpu_count() or 1,
        )
        for mode in args.what:
            report_mode(run, hf, engines, mode, corpus, args, ratios_allowed)
    emit(
        "peak_rss_mib",
        round(peak_rss_mib(), 1),
        "MiB",
        OURS,
        args.json,
        loadavg_1m_after=round(os.getloadavg()[0], 2),
    )


def main(argv=None) -> int:
    load_before = os.getloadavg()[0]  # before this benchmark adds any load of its own
    args = parse_args(argv)
    try:
        benchmark(args, load_before)
    except UserError as e:
        return report_user_error(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())

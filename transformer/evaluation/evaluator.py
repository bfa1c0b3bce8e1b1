"""Restoring a trained run and scoring it: the work behind eval.py and decode.py.

A run directory holds everything needed: `config.json` (the resolved config), `vocab/`
(SentencePiece models) and `checkpoints/` (Orbax). Parameters come from one checkpoint or
the average of the last N (checkpoint averaging, as in the 2017 paper).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time

import jax
import numpy as np
from flax import nnx

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.data import make_datasets
from transformer.inference.translator import DecodeSettings, Translator
from transformer.scoring import metrics as metrics_lib
from transformer.training import run_config
from transformer.training.checkpoint import Checkpointer
from transformer.training.loop import build_model, check_tokenizers


@dataclasses.dataclass
class RestoredRun:
    workdir: str
    config: object
    model_cfg: object
    graphdef: object
    params: object
    step: int
    averaged_steps: list[int]
    data: object
    translator: Translator


def restore_run(
    workdir: str, *, checkpoint: str = "latest", average_last: int = 1, overrides=()
) -> RestoredRun:
    """Loads config, tokenizers and (averaged) parameters of a trained run."""
    config = run_config.load(workdir)
    run_config.apply_overrides(config, list(overrides))
    model_cfg = run_config.validate(config)
    checkpoints = Checkpointer(workdir, read_only=True)
    step = checkpoints.resolve_step(checkpoint)
    if average_last < 1:
        raise UserError(f"--average_last={average_last} must be >= 1")
    available = [s for s in checkpoints.all_steps() if s <= step]
    steps = available[-average_last:]
    if len(steps) < average_last:
        raise UserError(
            f"--average_last={average_last} but only {len(available)} checkpoint(s) up to step "
            f"{step} exist ({available}); lower --average_last"
        )
    # Graph structure and parameter shapes only: building the model abstractly allocates
    # nothing, and no optimizer is needed (its state is never read).
    graphdef, abstract_params = nnx.split(
        nnx.eval_shape(lambda: build_model(model_cfg, 0)), nnx.Param
    )
    params, metas = _average_params(checkpoints, steps, abstract_params)
    checkpoints.close()
    data = make_datasets(config, workdir)
    pieces = max(data.source_tokenizer.vocab_size, data.target_tokenizer.vocab_size)
    if pieces > model_cfg.vocab_size:
        raise UserError(
            f"the vocabulary in {workdir}/vocab has {pieces} pieces but the checkpoint's "
            f"model.vocab_size={model_cfg.vocab_size}; the tokenizer does not belong to this "
            "run: restore the run's vocab/ directory"
        )
    for s, meta in metas.items():
        check_tokenizers(meta, data, f"{workdir}/checkpoints/{s}")
    translator = Translator(
        graphdef, model_cfg, DecodeSettings.from_config(config.decode),
        data.source_tokenizer, data.target_tokenizer,
    )  # fmt: skip
    return RestoredRun(workdir, config, model_cfg, graphdef, params, step, steps, data, translator)


def _average_params(checkpoints: Checkpointer, steps: list[int], abstract_params):
    """The mean of the parameters of `steps`, restored one checkpoint at a time into one
    float64 running sum; returns (float32 params, {step: checkpoint metadata})."""
    total, metas = None, {}
    for step in steps:
        params, metas[step] = checkpoints.restore_params(step, abstract_params)
        params = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
        total = params if total is None else jax.tree.map(np.add, total, params)
        del params
    return jax.tree.map(lambda x: (x / len(steps)).astype(np.float32), total), metas


@dataclasses.dataclass
class Evaluation:
    """What `evaluate` produced: the JSON record it wrote to `path`, and sacreBLEU's scores
    (with their signatures) for printing."""

    record: dict
    scores: metrics_lib.Scores
    path: str


def evaluate(
    workdir: str,
    *,
    checkpoint: str = "latest",
    split: str = "test",
    src: str | None = None,
    ref: str | None = None,
    average_last: int = 1,
    overrides=(),
    name: str | None = None,
    run: RestoredRun | None = None,
    longer_than: int | str | None = None,
    command: str | None = None,
) -> Evaluation:
    """Translates a split (or --src against --ref), scores it with sacreBLEU and chrF, and
    writes eval/<name>.{json,src.txt,hyp.txt,ref.txt}.

    longer_than: also score the sentences whose source has more than this many tokens (the
    run's tokenizer, EOS included, as data.max_source_len counts them), or 'train' for the
    run's data.max_source_len: the ones longer than any training example, for length
    generalisation. Their translations are the same as in the full score (decoding does not
    depend on the batch); the result is record['longer'].
    """
    if (src is None) != (ref is None):
        raise UserError("--src and --ref go together: give both files or neither")
    run = run or restore_run(
        workdir, checkpoint=checkpoint, average_last=average_last, overrides=overrides
    )
    if src is not None:
        sources = metrics_lib.read_lines(src)
        references = metrics_lib.read_lines(ref)
        if len(sources) != len(references):
            raise UserError(
                f"--src {src} has {len(sources)} lines but --ref {ref} has {len(references)}; "
                f"give aligned files"
            )
        name = name or os.path.splitext(os.path.basename(src))[0]
        split_name = "files"
    else:
        eval_split = run.data.eval_split(split)
        sources, references = list(eval_split.sources), list(eval_split.targets)
        split_name = split
        name = name or split
    start = time.perf_counter()
    translations = run.translator.translate(run.params, sources)
    elapsed = time.perf_counter() - start
    hypotheses = translations.best
    scores = metrics_lib.score(hypotheses, references)
    out_dir = os.path.join(workdir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    for suffix, lines in (("src", sources), ("hyp", hypotheses), ("ref", references)):
        metrics_lib.write_lines(os.path.join(out_dir, f"{name}.{suffix}.txt"), lines)
    config = run.config
    settings = dataclasses.asdict(run.translator.settings)
    longer = None
    if longer_than is not None:
        longer = _score_longer(run, sources, hypotheses, references, longer_than)
    record = {
        "name": name,
        "split": split_name,
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "signature": scores.signatures,
        "bleu_details": scores.bleu_verbose,
        "step": run.step,
        "averaged_steps": run.averaged_steps,
        "decode": settings,
        "sentences": len(sources),
        "truncated_inputs": translations.num_truncated,
        "sentences_per_s": len(sources) / max(elapsed, 1e-9),
        "direction": _direction(config),
        "config_name": os.path.basename(os.path.normpath(workdir)),
        "train_time_s": _train_time(workdir),
        "machine": f"{platform.machine()} {os.cpu_count()} CPU cores, {jax.default_backend()}",
    }
    if longer is not None:
        record["longer"] = longer
    if command:
        record["command"] = command  # shown by transformer.research.report under the table
    if translations.num_truncated:
        print(
            f"warning: {translations.num_truncated} input(s) longer than model.max_len="
            f"{run.model_cfg.max_len} tokens were truncated",
        )
    path = os.path.join(out_dir, f"{name}.json")
    atomic_write(path, json.dumps(record, indent=2))
    return Evaluation(record, scores, path)


def _score_longer(run, sources, hypotheses, references, longer_than) -> dict:
    """BLEU/chrF of the sentences whose source is longer than `longer_than` tokens."""
    if longer_than == "train":
        limit = int(run.config.data.max_source_len)
    else:
        try:
            limit = int(longer_than)
        except ValueError:
            raise UserError(
                f"--longer_than={longer_than!r}: give a token count or 'train'"
            ) from None
    lengths = [len(ids) + 1 for ids in run.data.source_tokenizer.encode_batch(list(sources))]
    keep = [i for i, n in enumerate(lengths) if n > limit]
    result = {"source_tokens_over": limit, "sentences": len(keep), "bleu": None, "chrf": None}
    if keep:
        scores = metrics_lib.score([hypotheses[i] for i in keep], [references[i] for i in keep])
        result.update(bleu=scores.bleu, chrf=scores.chrf)
    return result


def _direction(config) -> str:
    d = config.data
    src, tgt = (d.target_lang, d.source_lang) if d.reverse else (d.source_lang, d.target_lang)
    return f"{src}->{tgt}"


def _train_time(workdir: str) -> float | None:
    """Wall time of training from metrics.jsonl (first to last row), if present."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    from transformer.training.logger import read_metrics

    rows = [r for r in read_metrics(path) if "time" in r]
    return rows[-1]["time"] - rows[0]["time"] if len(rows) > 1 else None

"""Scoring a trained run: the work behind eval.py.

`evaluate` translates a split of the run's data (or a --src file against its --ref) with a
restored run (`transformer.evaluation.restore`), scores it with sacreBLEU and chrF, and writes
eval/<name>.json beside the sources, hypotheses and references as text files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import jax

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.common.machine import describe_machine
from transformer.common.metrics_file import METRICS_FILE, read_metrics
from transformer.evaluation import reference_scores
from transformer.evaluation.ensemble import with_members
from transformer.evaluation.restore import RestoredRun, restore_run
from transformer.scoring import length_buckets
from transformer.scoring import metrics as metrics_lib


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
    checkpoint: str = "auto",
    split: str = "test",
    src: str | None = None,
    ref: str | None = None,
    average_last: int = 1,
    overrides=(),
    name: str | None = None,
    run: RestoredRun | None = None,
    longer_than: int | str | None = None,
    buckets: str | tuple[int, ...] | None = length_buckets.DEFAULT_EDGES,
    score_references: bool = False,
    prefix: str | None = None,
    constraints: str | None = None,
    strict_vocab: bool = False,
    ensemble: tuple[str, ...] = (),
    command: str | None = None,
) -> Evaluation:
    """Translates a split (or --src against --ref), scores it with sacreBLEU and chrF, and
    writes eval/<name>.{json,src.txt,hyp.txt,ref.txt}.

    longer_than: also score the sentences whose source has more than this many tokens (the
    run's tokenizer, EOS included, as data.max_source_len counts them), or 'train' for the
    run's data.max_source_len: the ones longer than any training example, for length
    generalisation. Their translations are the same as in the full score (decoding does not
    depend on the batch); the result is record['longer'].
    buckets: source-length bucket edges ('10,20,30' or a tuple; None: none): BLEU and chrF
    of each bucket's sentences, record['length_buckets'].
    score_references: also each reference's log-probability under the model (forced
    decoding): eval/<name>.ref_scores.txt and record['reference_scores'] (test perplexity).
    prefix: a file of target prefixes, one per source line ('' for none): each translation
    starts with its line's prefix (record['prefix_file']). constraints: a file of
    tab-separated phrases per source line every translation of that line holds
    (record['constraints_file']; beam search). Their characters outside the target
    vocabulary are a warning per line, with strict_vocab a one-line error.
    ensemble: other runs' 'DIR[:latest|best|STEP]' decoding with this one as an ensemble
    (evaluation.ensemble; record['ensemble'] lists every member's workdir and step).
    """
    if (src is None) != (ref is None):
        raise UserError("--src and --ref go together: give both files or neither")
    edges = None if buckets is None else length_buckets.parse_edges(buckets)
    run = run or restore_run(
        workdir, checkpoint=checkpoint, average_last=average_last, overrides=overrides
    )
    if ensemble and score_references:
        raise UserError(
            "--score_references scores the references under one run's model; drop it or --ensemble"
        )
    run = with_members(run, ensemble, overrides)
    sources, references, split_name, name = _sentences(run, split, src, ref, name)
    start = time.perf_counter()
    prefixes = _lines_per_source("--prefix", prefix, len(sources))
    phrases = _lines_per_source("--constraints", constraints, len(sources))
    if phrases is not None:
        phrases = [line.split("\t") for line in phrases]
    translations = run.translator.translate(
        run.params, sources, prefixes=prefixes, constraints=phrases, strict_vocab=strict_vocab
    )
    elapsed = time.perf_counter() - start
    hypotheses = translations.best
    scores = metrics_lib.score(hypotheses, references)
    out_dir = os.path.join(workdir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    for suffix, lines in (("src", sources), ("hyp", hypotheses), ("ref", references)):
        metrics_lib.write_lines(os.path.join(out_dir, f"{name}.{suffix}.txt"), lines)
    by_length = _length_scores(run, sources, hypotheses, references, longer_than, edges)
    record = _record(run, workdir, name, split_name, scores, translations, len(sources), elapsed)
    record.update(by_length)
    if score_references:
        record["reference_scores"] = _score_references(run, sources, references, out_dir, name)
    if run.members:
        record["ensemble"] = [{"workdir": w, "step": step} for w, step in run.members]
    if prefix is not None:
        record["prefix_file"] = os.path.abspath(prefix)
    if constraints is not None:
        record["constraints_file"] = os.path.abspath(constraints)
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


def _sentences(run: RestoredRun, split: str, src: str | None, ref: str | None, name):
    """(sources, references, split name, eval name): the --src/--ref files' aligned lines, or
    the run's `split`."""
    if src is None:
        eval_split = run.data.eval_split(split)
        return list(eval_split.sources), list(eval_split.targets), split, name or split
    sources = metrics_lib.read_lines(src)
    references = metrics_lib.read_lines(ref)
    if len(sources) != len(references):
        raise UserError(
            f"--src {src} has {len(sources)} lines but --ref {ref} has {len(references)}; "
            f"give aligned files"
        )
    return sources, references, "files", name or os.path.splitext(os.path.basename(src))[0]


def _lines_per_source(flag: str, path: str | None, sources: int) -> list[str] | None:
    """The lines of a file that gives one line per source line (--prefix, --constraints)."""
    if path is None:
        return None
    lines = metrics_lib.read_lines(path)
    if len(lines) != sources:
        raise UserError(
            f"{flag} {path} has {len(lines)} lines for {sources} source lines; give one line "
            "per source line (an empty line for none)"
        )
    return lines


def _record(
    run: RestoredRun,
    workdir: str,
    name: str,
    split_name: str,
    scores,
    translations,
    sentences: int,
    elapsed: float,
) -> dict:
    """The eval JSON: scores with their signatures, the checkpoint(s), decode settings, speed
    (`sentences` translated in `elapsed` seconds) and where it ran."""
    return {
        "name": name,
        "split": split_name,
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "signature": scores.signatures,
        "bleu_details": scores.bleu_verbose,
        "step": run.step,
        "averaged_steps": run.averaged_steps,
        "decode": dataclasses.asdict(run.translator.settings),
        "sentences": sentences,
        "truncated_inputs": translations.num_truncated,
        "sentences_per_s": sentences / max(elapsed, 1e-9),
        "direction": _direction(run.config),
        "config_name": os.path.basename(os.path.normpath(workdir)),
        "train_time_s": _train_time(workdir),
        "machine": describe_machine(jax.default_backend()),
    }


def _score_references(run, sources, references, out_dir: str, name: str) -> dict:
    """Writes one `log_prob<TAB>tokens<TAB>nll_per_token` line per reference; the summary."""
    scored = reference_scores.score_references(run, sources, references)
    lines = [
        f"{lp:.6f}\t{n}\t{-lp / n:.6f}"
        for lp, n in zip(scored.log_probs, scored.tokens, strict=True)
    ]
    metrics_lib.write_lines(os.path.join(out_dir, f"{name}.ref_scores.txt"), lines)
    return scored.summary()


def _length_scores(run, sources, hypotheses, references, longer_than, edges) -> dict:
    """The record's 'longer' (with longer_than) and 'length_buckets' (with edges) entries."""
    lengths = _source_lengths(run, sources)
    out = {}
    if longer_than is not None:
        out["longer"] = _score_longer(run, lengths, hypotheses, references, longer_than)
    if edges is not None:
        out["length_buckets"] = length_buckets.bucket_scores(lengths, hypotheses, references, edges)
    return out


def _source_lengths(run: RestoredRun, sources) -> list[int]:
    """Source tokens of each sentence, EOS included (as data.max_source_len counts them)."""
    return [len(ids) + 1 for ids in run.data.source_tokenizer.tokenize_batch(list(sources))]


def _score_longer(run, lengths, hypotheses, references, longer_than) -> dict:
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
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.exists(path):
        return None
    rows = [r for r in read_metrics(path) if "time" in r]
    return rows[-1]["time"] - rows[0]["time"] if len(rows) > 1 else None

"""A tiny finished study for the HTML page tests, written file by file as transformer-train,
transformer-eval and transformer-sweep leave a study, without training anything.

Four arms (base, its A/A arm base_aa, post, swiglu) x seeds 0 and 1, each with a learning-rate
search on seed 99 (A/A: 1099) over x0.5, x1, x2 whose validation loss is lowest at x1, so
the search ends in one round and the compared seeds run at x1. Each run's translations are
its references with a share of the words replaced at random, the share the arm's (post
replaces fewest, so it is better than the baseline by a margin the test finds); BLEU, chrF
and the length buckets in eval/test.json are sacreBLEU's on those files, as eval.py writes
them. One sentence holds markup characters, to see that the page escapes them.
"""

from __future__ import annotations

import json
import math
import os
import random

from tests.helpers import ROOT

SWEEP = """
def get_config():
    return {{
        "base": {base!r},
        "overrides": {{"train.num_steps": 6, "train.learning_rate": 0.002}},
        "variants": {{
            "base": {{}},
            "post": {{"model.norm_position": "post"}},
            "swiglu": {{"model.activation": "swiglu"}},
        }},
        "seeds": [0, 1],
        "aa_arm": True,
        "lr_grid": {{"scales": [0.5, 1.0, 2.0], "tune_seeds": [99]}},
        "eval_split": "test",
    }}
"""
NOISE = {"base": 0.45, "base_aa": 0.45, "post": 0.15, "swiglu": 0.5}  # share of words replaced
TRICKY = 'Tom & "Jerry" <b>sehen</b> <script>alert(1)</script> den Hund'
WORDS = "der die das ein Hund Katze sieht den roten Mann Frau Kind spielt im Park".split()
SENTENCES = 24


def sentences() -> tuple[list[str], list[str]]:
    """(sources, references): 1 to 30 words each, so that three length buckets fill."""
    rng = random.Random(0)
    refs = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(SENTENCES - 1)
    ]
    refs.insert(7, TRICKY)
    sources = [" ".join(w.upper() for w in r.split()) for r in refs]
    return sources, refs


def translations(refs: list[str], noise: float, rng: random.Random) -> list[str]:
    return [
        " ".join(w if rng.random() > noise else rng.choice(WORDS) for w in r.split()) for r in refs
    ]


def write_eval(workdir: str, hyps: list[str], sources: list[str], refs: list[str]) -> None:
    """eval/test.{json,hyp.txt,src.txt,ref.txt} as eval.py writes them, scored by sacreBLEU."""
    from transformer.scoring import metrics
    from transformer.scoring.length_buckets import bucket_scores

    scores = metrics.score(hyps, refs)
    lengths = [len(s.split()) + 1 for s in sources]  # + EOS, as eval.py counts
    record = {
        "name": "test",
        "split": "test",
        "step": 6,
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "signature": {"bleu": scores.bleu_signature, "chrf": scores.chrf_signature},
        "decode": {"strategy": "greedy"},
        "sentences": len(refs),
        "sentences_per_s": 100.0,
        "length_buckets": bucket_scores(lengths, hyps, refs),
    }
    eval_dir = os.path.join(workdir, "eval")
    os.makedirs(eval_dir, exist_ok=True)
    with open(os.path.join(eval_dir, "test.json"), "w") as f:
        json.dump(record, f)
    for kind, lines in (("hyp", hyps), ("src", sources), ("ref", refs)):
        with open(os.path.join(eval_dir, f"test.{kind}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def finish(run) -> None:
    """The run's directory as a finished run leaves it."""
    rng = random.Random(f"{run.variant}/{run.seed}/{run.lr_scale}")
    sources, refs = sentences()
    off_scale = abs(math.log2(run.lr_scale))  # x1 trains best
    hyps = translations(refs, NOISE[run.variant] + 0.2 * off_scale, rng)
    write_eval(run.workdir, hyps, sources, refs)
    valid = 3.0 + NOISE[run.variant] + 0.3 * off_scale + 0.02 * rng.random()
    rows = [{"kind": "info", "message": "model", "params": 5000, "flops_per_token": 1e4}]
    rows += [
        {
            "kind": "train",
            "step": s,
            "loss": valid + 1.5 - 0.25 * s + 0.05 * rng.random(),
            "learning_rate": 0.002 * run.lr_scale * s / 6,
        }
        for s in (2, 4, 6)
    ]
    rows += [
        {"kind": "eval", "split": "valid", "step": s, "loss": valid + 3 / s - 0.5} for s in (3, 6)
    ]
    with open(os.path.join(run.workdir, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def build(root) -> tuple[str, str]:
    """(sweep config path, study directory) of the finished study under `root`, its report
    written by transformer-sweep --report_only (results.md, results.csv, results.html, ...)."""
    from transformer.research import sweep as sw

    config = os.path.join(str(root), "study_cfg.py")
    with open(config, "w") as f:
        f.write(SWEEP.format(base=os.path.join(ROOT, "configs", "default.py")))
    workdir = os.path.join(str(root), "study")
    sweep = sw.load_sweep(config)
    while fresh := [r for r in sw.plan_runs(sweep, workdir) if not sw.is_finished(r)]:
        for run in fresh:  # the learning-rate search plans the compared seeds once it ends
            finish(run)
    report(config, workdir)
    return config, workdir


def report(config: str, workdir: str) -> None:
    from transformer.cli import sweep as sweep_cli

    assert sweep_cli.main(["--config", config, "--workdir", workdir, "--report_only"]) == 0

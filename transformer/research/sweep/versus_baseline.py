"""Each variant against the sweep's baseline on the same test sentences.

For every seed that both the variant and the baseline finished, sacreBLEU's paired bootstrap
(`scoring.significance.paired_bootstrap`, 1,000 resamples, seeded) compares the two runs'
hypotheses (eval/<split>.hyp.txt) on the references. The table's figure pools the seeds:
the hypotheses of matching seeds are concatenated (the references repeated), so one test
covers both the test set's sampling noise and the seeds'. The pooled p-values are then
Holm-corrected over the variants (BLEU and chrF separately): `significant` marks the
differences that stay below 0.05 after the correction.
"""

from __future__ import annotations

import os

from transformer.common.errors import UserError
from transformer.research.sweep.runs import Run, is_finished
from transformer.research.sweep.spec import Sweep
from transformer.scoring import metrics as metrics_lib
from transformer.scoring import significance

ALPHA = 0.05


def _texts(run: Run, kind: str) -> list[str]:
    return metrics_lib.read_lines(os.path.join(run.workdir, "eval", f"{run.eval_split}.{kind}.txt"))


def _finished(runs: list[Run], variant: str) -> dict[int, Run]:
    return {r.seed: r for r in runs if r.variant == variant and is_finished(r)}


def _references(run: Run, fallback: str | None, count: int) -> list[str]:
    """The references eval.py wrote beside the run's hypotheses, else the `fallback` file
    (transformer-sweep --references: for sweep directories kept without a copy of the data)."""
    path = os.path.join(run.workdir, "eval", f"{run.eval_split}.ref.txt")
    if not os.path.exists(path):
        if fallback is None:
            raise UserError(f"{path} is missing; pass the {run.eval_split} references with "
                            "transformer-sweep --references FILE")  # fmt: skip
        path = fallback
    references = metrics_lib.read_lines(path)
    if len(references) != count:
        raise UserError(f"{path} has {len(references)} lines but {run.workdir} translated "
                        f"{count} sentences; give the {run.eval_split} references")  # fmt: skip
    return references


def _compare(baseline: dict[int, Run], variant: dict[int, Run], fallback: str | None):
    """Per-seed and pooled paired differences of one variant; None without a shared seed."""
    seeds = sorted(set(baseline) & set(variant))
    if not seeds:
        return None
    pairs = {s: (_texts(baseline[s], "hyp"), _texts(variant[s], "hyp")) for s in seeds}
    references = _references(baseline[seeds[0]], fallback, len(pairs[seeds[0]][0]))
    per_seed = {s: significance.paired_bootstrap(*pairs[s], references) for s in seeds}
    pooled = significance.paired_bootstrap(*significance.pool_seeds(pairs, references))
    return {"seeds": seeds, "per_seed": per_seed, "pooled": pooled}


def versus_baseline(sweep: Sweep, runs: list[Run]) -> dict[str, dict]:
    """{variant: {'seeds', 'per_seed': {seed: {metric: PairedDifference}}, 'pooled': {...},
    'holm': {metric: adjusted p}, 'significant': {metric: bool}}} for the variants other
    than the baseline that share a finished seed with it."""
    baseline = _finished(runs, sweep.baseline)
    out = {}
    for name in sweep.variants:
        if name != sweep.baseline:
            result = _compare(baseline, _finished(runs, name), sweep.references)
            if result is not None:
                out[name] = result
    for metric in significance.METRICS:
        adjusted = significance.holm({n: r["pooled"][metric].p_value for n, r in out.items()})
        for name, p in adjusted.items():
            out[name].setdefault("holm", {})[metric] = p
            out[name].setdefault("significant", {})[metric] = p < ALPHA
    return out

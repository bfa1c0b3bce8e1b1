"""Each variant against the sweep's baseline on the same test sentences.

For every seed that both the variant and the baseline finished, sacreBLEU's paired bootstrap
(`scoring.significance.paired_bootstrap`, 1,000 resamples, seeded) compares the two runs'
hypotheses (eval/<split>.hyp.txt) on the references. The table's figure pools the seeds:
the hypotheses of matching seeds are concatenated (the references repeated), so one test
covers both the test set's sampling noise and the seeds'. The pooled p-values are then
Holm-corrected over the variants (BLEU and chrF separately): `significant` marks the
differences that stay below 0.05 after the correction.

Which baseline runs a variant meets depends on its learning rate. A variant reported at the
best point of its own finished learning-rate grid meets the baseline at the baseline's best
point (best against best); every other variant runs at its configured rate and meets the
baseline at its configured rate (scale 1), so that one factor changes at a time and a
baseline tuned by its grid never stands against untuned variants.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from transformer.common.errors import UserError
from transformer.research.sweep.runs import Run, is_finished
from transformer.research.sweep.spec import Sweep
from transformer.scoring import metrics as metrics_lib
from transformer.scoring import significance

ALPHA = 0.05


def _texts(run: Run, kind: str) -> list[str]:
    return metrics_lib.read_lines(os.path.join(run.workdir, "eval", f"{run.eval_split}.{kind}.txt"))


def _finished(runs: list[Run], variant: str, scale: float) -> dict[int, Run]:
    return {r.seed: r for r in runs
            if r.variant == variant and r.lr_scale == scale and is_finished(r)}  # fmt: skip


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


def versus_baseline(sweep: Sweep, runs: list[Run], scales: Mapping[str, float],
                    reference_scales: Mapping[str, float]) -> dict[str, dict]:  # fmt: skip
    """{variant: {'seeds', 'baseline_scale', 'per_seed': {seed: {metric: PairedDifference}},
    'pooled': {...}, 'holm': {metric: adjusted p}, 'significant': {metric: bool}}} for the
    variants other than the baseline that share a finished seed with it. `scales[v]` is the
    learning-rate scale variant v is reported at; `reference_scales[v]` the baseline's scale
    it is compared with (1.0 where absent)."""
    out = {}
    for name in sweep.variants:
        if name == sweep.baseline:
            continue
        reference = reference_scales.get(name, 1.0)
        own = _finished(runs, name, scales.get(name, 1.0))
        result = _compare(_finished(runs, sweep.baseline, reference), own, sweep.references)
        if result is not None:
            out[name] = {**result, "baseline_scale": reference}
    for metric in significance.METRICS:
        adjusted = significance.holm({n: r["pooled"][metric].p_value for n, r in out.items()})
        for name, p in adjusted.items():
            out[name].setdefault("holm", {})[metric] = p
            out[name].setdefault("significant", {})[metric] = p < ALPHA
    return out

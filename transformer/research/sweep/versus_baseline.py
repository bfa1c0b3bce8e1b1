"""Each variant against the sweep's baseline on the same test sentences, two ways.

- The seed-aware test (`scoring.seed_significance`): Welch's t test on the runs' corpus
  scores, every finished run of each arm, with the test set's own sampling noise added (a
  bootstrap over sentences, every run resampled alike). Its null holds the noise of drawing
  other training runs, so it is the test the table's significance rests on. Its p-values are
  Holm-corrected over the variants (BLEU and chrF separately; the A/A arm, a check rather
  than a finding, stays out of the family): `significant` marks the differences that stay
  below 0.05 after the correction. It needs two runs in each arm.
- sacreBLEU's paired bootstrap (`scoring.significance.paired_bootstrap`, 1,000 resamples,
  seeded) on the hypotheses of paired runs concatenated (runs of the same seed, or, where
  the arms share no seed as the A/A arm does, the i-th seed of each): test-set noise only.
  The runs stay fixed, so it is reported beside the seed-aware test, never instead of it;
  with one seed per arm it is the only test.

Which baseline runs a variant meets depends on its learning rate. A variant reported at the
best point of its own finished learning-rate grid meets the baseline at the baseline's best
point (best against best); an untuned variant (the sweep config leaves it out of lr_grid)
meets the baseline at its configured rate (scale 1), so that one factor changes at a time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from transformer.common.errors import UserError
from transformer.research.sweep import lr_grid
from transformer.research.sweep.runs import Run, is_finished, outcome
from transformer.research.sweep.spec import Sweep
from transformer.scoring import metrics as metrics_lib
from transformer.scoring import seed_significance, significance

ALPHA = 0.05


def _texts(run: Run, kind: str) -> list[str]:
    return metrics_lib.read_lines(os.path.join(run.workdir, "eval", f"{run.eval_split}.{kind}.txt"))


def _finished(runs: list[Run], variant: str, scale: float) -> dict[int, Run]:
    return {
        r.seed: r for r in runs if r.variant == variant and r.lr_scale == scale and is_finished(r)
    }


def _references(run: Run, fallback: str | None, count: int) -> list[str]:
    """The references eval.py wrote beside the run's hypotheses, else the `fallback` file
    (transformer-sweep --references: for sweep directories kept without a copy of the data)."""
    path = os.path.join(run.workdir, "eval", f"{run.eval_split}.ref.txt")
    if not os.path.exists(path):
        if fallback is None:
            raise UserError(
                f"{path} is missing; pass the {run.eval_split} references with "
                "transformer-sweep --references FILE"
            )
        path = fallback
    references = metrics_lib.read_lines(path)
    if len(references) != count:
        raise UserError(
            f"{path} has {len(references)} lines but {run.workdir} translated "
            f"{count} sentences; give the {run.eval_split} references"
        )
    return references


def paired_seeds(baseline: Mapping[int, Run], variant: Mapping[int, Run]) -> list[tuple]:
    """[(baseline seed, variant seed)]: the shared seeds, or the arms' seeds in order where
    they share none (an A/A arm runs under disjoint seeds)."""
    shared = sorted(set(baseline) & set(variant))
    if shared:
        return [(s, s) for s in shared]
    return list(zip(sorted(baseline), sorted(variant), strict=False))


class _ArmCache:
    """Each arm's runs scored once on the shared sentence resamples (the baseline meets
    every variant): {(variant, scale): {metric: ArmScores}}."""

    def __init__(self, references: list[str], names=significance.METRICS):
        self.references = references
        every = metrics_lib.sacrebleu_metrics()
        self.metrics = {name: every[name] for name in names}
        self.indices = seed_significance.resample_indices(
            len(references), significance.SAMPLES, significance.SEED
        )
        self.arms: dict[tuple, dict] = {}

    def scores(self, key: tuple, runs: Mapping[int, Run]) -> dict:
        if key not in self.arms:
            hypotheses = [[h.rstrip() for h in _texts(runs[s], "hyp")] for s in sorted(runs)]
            self.arms[key] = {name: self._arm(hypotheses, m) for name, m in self.metrics.items()}
        return self.arms[key]

    def _arm(self, hypotheses: list[list[str]], metric) -> seed_significance.ArmScores:
        stats = [
            seed_significance.sacrebleu_statistics(h, self.references, metric) for h in hypotheses
        ]
        score = seed_significance.sacrebleu_score(metric)
        return seed_significance.arm_scores(stats, score, self.indices)


def _compare(cache: _ArmCache, baseline: tuple, variant: tuple, references: list[str]) -> dict:
    """Both tests of one variant; `baseline` and `variant` are (cache key, {seed: Run})."""
    (base_key, base_runs), (own_key, own_runs) = baseline, variant
    pairs = paired_seeds(base_runs, own_runs)
    hyps = {vs: (_texts(base_runs[bs], "hyp"), _texts(own_runs[vs], "hyp")) for bs, vs in pairs}
    per_seed = {vs: significance.paired_bootstrap(*hyps[vs], references) for vs in hyps}
    pooled = significance.paired_bootstrap(*significance.pool_seeds(hyps, references))
    base_arm, own_arm = cache.scores(base_key, base_runs), cache.scores(own_key, own_runs)
    seed_aware = {m: seed_significance.compare(base_arm[m], own_arm[m]) for m in base_arm}
    return {"pairs": pairs, "per_seed": per_seed, "pooled": pooled, "seed_aware": seed_aware}


def _arms(sweep: Sweep, runs: list[Run], scales, reference_scales) -> dict[str, tuple]:
    """{variant: ((baseline key, its runs), (variant key, its runs))} for each variant other
    than the baseline with a finished run and a finished baseline run to meet."""
    out = {}
    for name in sweep.variants:
        if name == sweep.baseline:
            continue
        reference = reference_scales.get(name, 1.0)
        base_runs = _finished(runs, sweep.baseline, reference)
        own_runs = _finished(runs, name, scales.get(name, 1.0))
        if base_runs and own_runs:
            base_key = (sweep.baseline, reference)
            out[name] = ((base_key, base_runs), ((name, scales.get(name, 1.0)), own_runs))
    return out


def _holm(sweep: Sweep, out: dict) -> None:
    """Holm over the variants' seed-aware p-values, per metric; the A/A arm is left out."""
    for metric in significance.METRICS:
        p_values = {
            name: r["seed_aware"][metric].p_value
            for name, r in out.items()
            if r["seed_aware"][metric] is not None and name != sweep.aa_variant
        }
        adjusted = significance.holm(p_values)
        for name, r in out.items():
            p = adjusted.get(name)
            r.setdefault("holm", {})[metric] = p
            r.setdefault("significant", {})[metric] = None if p is None else p < ALPHA


def versus_baseline(
    sweep: Sweep,
    runs: list[Run],
    scales: Mapping[str, float],
    reference_scales: Mapping[str, float],
) -> dict[str, dict]:
    """{variant: {'pairs', 'per_seed': {seed: {metric: PairedDifference}}, 'pooled': {...},
    'seed_aware': {metric: SeedAwareDifference | None}, 'holm': {metric: adjusted p | None},
    'significant': {metric: bool | None}, 'baseline_scale'}} for the variants other than the
    baseline that have a finished run and a finished baseline run to meet. `scales[v]` is
    the learning-rate scale variant v is reported at; `reference_scales[v]` the baseline's
    scale it is compared with (1.0 where absent)."""
    arms = _arms(sweep, runs, scales, reference_scales)
    if not arms:
        return {}
    references = _stripped_references(next(iter(arms.values()))[0][1], sweep.references)
    cache = _ArmCache(references)
    out = {}
    for name, (baseline, variant) in arms.items():
        out[name] = _compare(cache, baseline, variant, references)
        out[name]["baseline_scale"] = baseline[0][1]
    _holm(sweep, out)
    return out


def _stripped_references(runs: Mapping[int, Run], fallback: str | None) -> list[str]:
    """The test references of these runs' translations, right-stripped as sacreBLEU's."""
    first = runs[min(runs)]
    count = len(_texts(first, "hyp"))
    return [r.rstrip() for r in _references(first, fallback, count)]


def arm_scores_by_variant(sweep: Sweep, runs: list[Run], metric: str = "BLEU") -> dict:
    """{variant: (ArmScores of its finished runs at the scale it is reported at, scale)}."""
    choices = lr_grid.choose(sweep.lr_grid, [outcome(r) for r in runs])
    scales = {name: choices[name].scale if name in choices else 1.0 for name in sweep.variants}
    finished = {name: _finished(runs, name, scales[name]) for name in sweep.variants}
    finished = {name: found for name, found in finished.items() if found}
    if not finished:
        return {}
    references = _stripped_references(next(iter(finished.values())), sweep.references)
    cache = _ArmCache(references, names=(metric,))
    return {
        name: (cache.scores((name, scales[name]), found)[metric], scales[name])
        for name, found in finished.items()
    }

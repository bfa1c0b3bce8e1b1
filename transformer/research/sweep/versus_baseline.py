"""Each variant against the sweep's baseline on the same test sentences, two ways.

- The seed-aware test (`scoring.seed_significance`): Welch's t test on the runs' corpus
  scores, every finished run of each arm, with the test set's own sampling noise added (a
  bootstrap over sentences, every run resampled alike). Its null holds the noise of drawing
  other training runs, so it is the test the table's significance rests on. It needs two
  runs in each arm. The variants form one family per metric (BLEU and chrF separately; the
  A/A arm, a check rather than a finding, stays out): Holm's procedure on their directional
  claims decides which signs are claimed (`significant`) and gives simultaneous intervals
  that leave out 0 exactly there. Each comparison's minimum detectable differences come from
  the seed variance pooled over the study's arms, not from its own few seeds.
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

import dataclasses
import math
import os
from collections.abc import Mapping

from transformer.common.errors import UserError
from transformer.research.sweep import lr_grid
from transformer.research.sweep.runs import Run, is_finished, outcome
from transformer.research.sweep.spec import Sweep
from transformer.scoring import metrics as metrics_lib
from transformer.scoring import seed_significance, significance


def _texts(run: Run, kind: str) -> list[str]:
    return metrics_lib.read_lines(os.path.join(run.workdir, "eval", f"{run.eval_split}.{kind}.txt"))


def _finished(runs: list[Run], variant: str, scale: float) -> dict[int, Run]:
    """{seed: run} of the variant's finished compared runs at `scale` (the learning-rate
    search's own seeds stay out: their runs were selected, not drawn)."""
    return {
        r.seed: r
        for r in runs
        if r.variant == variant and r.lr_scale == scale and r.compared and is_finished(r)
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


def _family(sweep: Sweep, out: dict, metric: str) -> dict:
    """{variant: SeedAwareDifference} of Holm's family for `metric`: every variant with a
    seed-aware test but the A/A arm (a check of the noise, not a finding)."""
    return {
        name: r["seed_aware"][metric]
        for name, r in out.items()
        if r["seed_aware"][metric] is not None and name != sweep.aa_variant
    }


def _holm(sweep: Sweep, out: dict) -> None:
    """Per metric (BLEU and chrF are separate families), Holm's procedure on the variants'
    directional claims and its simultaneous intervals (seed_significance.holm_directional)."""
    for metric in significance.METRICS:
        decisions = seed_significance.holm_directional(_family(sweep, out, metric))
        for name, r in out.items():
            r.setdefault("family", {})[metric] = decisions.get(name)


@dataclasses.dataclass(frozen=True)
class Detectable:
    """A comparison's minimum detectable differences (80% power) from the study's pooled
    seed variance: one comparison's own variances, from a few seeds, would make them noise."""

    pooled_seed_sd: float  # sqrt of the between-run variance pooled over the study's arms
    per_comparison: float  # at alpha: where the unadjusted interval leaves out 0
    holm: float | None  # at alpha / m, Holm's first step: starred whatever the others show


def _detectable(sweep: Sweep, cache: _ArmCache, out: dict) -> None:
    """Per metric, each comparison's MDDs. The seed variance is pooled over every arm the
    study compares (each weighted by its runs - 1) and its estimate's degrees of freedom go
    into the MDD (seed_significance.minimum_detectable); tau^2 is the comparison's own."""
    for metric in significance.METRICS:
        arms = [scores[metric] for scores in cache.arms.values()]
        pooled = (
            seed_significance.pooled_seed_variance(arms),
            seed_significance.pooled_seed_df(arms),
        )
        first_step = seed_significance.ALPHA / max(1, len(_family(sweep, out, metric)))
        for name, r in out.items():
            d = r["seed_aware"][metric]
            strict = None if name == sweep.aa_variant else first_step
            found = None if d is None else _mdds(d, *pooled, strict)
            r.setdefault("detectable", {})[metric] = found


def _mdds(
    d: seed_significance.SeedAwareDifference, variance: float, df: int, strict: float | None
) -> Detectable:
    """The comparison's MDDs at alpha and (outside the A/A arm) at the `strict` alpha."""
    sizes = (d.baseline_runs, d.system_runs, variance, d.test_set_se**2)
    mdd = seed_significance.minimum_detectable(*sizes, seed_significance.ALPHA, df)
    holm = None if strict is None else seed_significance.minimum_detectable(*sizes, strict, df)
    return Detectable(math.sqrt(variance), mdd, holm)


def versus_baseline(
    sweep: Sweep,
    runs: list[Run],
    scales: Mapping[str, float],
    reference_scales: Mapping[str, float],
) -> dict[str, dict]:
    """{variant: {'pairs', 'per_seed': {seed: {metric: PairedDifference}}, 'pooled': {...},
    'seed_aware': {metric: SeedAwareDifference | None}, 'family': {metric: FamilyDecision |
    None (the A/A arm, or no seed-aware test)}, 'detectable': {metric: Detectable | None},
    'baseline_scale'}} for the variants other than the baseline that have a finished run and
    a finished baseline run to meet. `scales[v]` is the learning-rate scale variant v is
    reported at; `reference_scales[v]` the baseline's scale it is compared with (1.0 where
    absent)."""
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
    _detectable(sweep, cache, out)
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

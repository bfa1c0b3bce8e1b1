"""Is a variant's gap to the baseline larger than the noise of drawing other training runs
and other test sentences? A test whose null holds both, its interval, and its power.

The model. Run r of arm a (a config at one learning rate) scores, on the test set,

    Y_ar = mu_a + T_a + U_ar

- U_ar is the run's own variation: initialisation, data order, dropout, and the part of the
  sentence-level noise that differs from run to run. Runs are independent (seeds are drawn
  independently; the same seed number in two arms is not treated as a pair) and U_ar is
  Normal(0, sigma_a^2) with a variance of each arm's own.
- T_a is the arm's test-set term: how well this sample of sentences happens to suit the arm.
  Every run of the arm shares it, so it does not shrink with more seeds.

The estimate of the gap is D = mean_r Y_br - mean_r Y_ar (variant b, baseline a), with

    Var D = sigma_a^2 / n_a + sigma_b^2 / n_b + tau^2,    tau^2 = Var(T_b - T_a).

- sigma_a^2 is the sample variance of arm a's run scores (ddof 1).
- tau^2 comes from a bootstrap over test sentences, every run resampled with the same
  sentence indices. The resampled D varies by tau^2 + (1/n_a + 1/n_b) s_e^2, where s_e^2 is
  the sentence-level part of one run's own variation, which sigma^2 already holds; the
  resampled difference of two runs of one arm varies by 2 s_e^2. So, by the method of
  moments, tau^2 = max(0, V_D - (1/n_a + 1/n_b) s_e^2).
- t = D / SE with Welch-Satterthwaite degrees of freedom from the two sigma^2 terms; tau^2
  counts as known (it is estimated from the test set's many sentences, not a few seeds).
  p is two-sided and the interval is Student's t.

Assumptions: run scores Normal within an arm (the t test's), independent runs, an additive
test-set term. Welch's test keeps its level at 2-5 runs per arm where a bootstrap over seeds
cannot (three seeds have ten distinct resamples). It needs two runs in each arm: with one
there is no estimate of the runs' spread and `compare` returns None; sacreBLEU's paired
bootstrap (significance.paired_bootstrap), which covers test-set noise only, is then the
only test. tests/test_seed_significance.py checks the level and coverage by simulation.

`minimum_detectable` is the smallest true gap that the test finds with 80% probability at
its SE and degrees of freedom (noncentral t); `seeds_for_gap` plans how many runs per arm
a study needs for a given gap from a pilot study's variances.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

# [samples, sentences] indices drawn as sacreBLEU draws them, shared by every run.
from transformer.scoring.significance import resample_indices  # noqa: F401

ALPHA = 0.05
POWER = 0.8
CHUNK = 100  # resamples gathered at once: [CHUNK, sentences, statistics] stays small

# Summed sufficient statistics [..., k] -> the corpus score [...] (e.g. BLEU from n-gram counts).
ScoreFn = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class ArmScores:
    """The runs of one arm scored on the test set and on the shared sentence resamples."""

    scores: np.ndarray  # [runs] each run's corpus score on the whole test set
    resampled: np.ndarray  # [runs, samples] on resamples of the test sentences

    @property
    def runs(self) -> int:
        return len(self.scores)

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores))

    @property
    def seed_std(self) -> float | None:
        """Between-run standard deviation of the corpus score (None below two runs)."""
        return float(np.std(self.scores, ddof=1)) if self.runs >= 2 else None


@dataclasses.dataclass(frozen=True)
class SeedAwareDifference:
    """A variant against the baseline with the noise of both runs and sentences."""

    baseline: float  # mean over the baseline's runs
    system: float  # mean over the variant's runs
    difference: float  # system - baseline
    interval: tuple[float, float]  # 95% Student t interval
    p_value: float  # two-sided
    standard_error: float
    df: float  # Welch-Satterthwaite degrees of freedom
    test_set_se: float  # tau: the part of SE that more seeds cannot shrink
    baseline_runs: int
    system_runs: int
    alpha: float = ALPHA

    @property
    def minimum_detectable(self) -> float:
        """The true gap this comparison finds with 80% probability at its alpha."""
        return minimum_detectable(self.standard_error, self.df, self.alpha)


def sacrebleu_statistics(hypotheses: Sequence[str], references: Sequence[str], metric):
    """[sentences, k] sufficient statistics of a sacreBLEU metric (BLEU's n-gram counts and
    lengths, chrF's character and word n-gram counts), as its corpus score sums them."""
    stats = metric._extract_corpus_statistics(list(hypotheses), [list(references)])
    return np.asarray(stats, dtype=np.float64)


def sacrebleu_score(metric) -> ScoreFn:
    """The metric's corpus score of summed statistics [..., k] -> [...]."""

    def score(summed: np.ndarray) -> np.ndarray:
        rows = summed.reshape(-1, summed.shape[-1])
        values = [metric._compute_score_from_stats(list(row)).score for row in rows]
        return np.asarray(values).reshape(summed.shape[:-1])

    return score


def arm_scores(stats: Sequence[np.ndarray], score: ScoreFn, indices: np.ndarray) -> ArmScores:
    """`stats`: one [sentences, k] array of sufficient statistics per run of the arm."""
    scores = np.asarray(score(np.stack([s.sum(0) for s in stats])), dtype=np.float64)
    resampled = np.stack([_resampled(s, score, indices) for s in stats])
    return ArmScores(scores=scores, resampled=resampled)


def _resampled(stats: np.ndarray, score: ScoreFn, indices: np.ndarray) -> np.ndarray:
    """[samples] scores of one run on each row of `indices` [samples, sentences]."""
    sums = [stats[indices[i : i + CHUNK]].sum(1) for i in range(0, len(indices), CHUNK)]
    return np.asarray(score(np.concatenate(sums)), dtype=np.float64)  # [samples]


def sentence_residual_variance(*arms: ArmScores) -> float | None:
    """s_e^2: half the resampling variance of the difference of two runs of one arm, averaged
    over every pair of runs within each arm (None without a pair)."""
    halves = [
        0.5 * float(np.var(arm.resampled[i] - arm.resampled[j]))
        for arm in arms
        for i, j in itertools.combinations(range(arm.runs), 2)
    ]
    return float(np.mean(halves)) if halves else None


def test_set_variance(baseline: ArmScores, system: ArmScores) -> float:
    """tau^2: the resampling variance of the difference of the arms' means less the part that
    the runs' own spread already counts."""
    resampled_gap = system.resampled.mean(0) - baseline.resampled.mean(0)  # [samples]
    residual = sentence_residual_variance(baseline, system) or 0.0
    shared = (1 / baseline.runs + 1 / system.runs) * residual
    return max(0.0, float(np.var(resampled_gap)) - shared)


def compare(baseline: ArmScores, system: ArmScores, alpha: float = ALPHA):
    """The seed-aware difference of `system` to `baseline`; None unless both have 2 runs."""
    from scipy import stats  # noqa: PLC0415 - only the sweep's tables need scipy

    if baseline.runs < 2 or system.runs < 2:
        return None
    tau2 = test_set_variance(baseline, system)
    se, df = welch_se_df(baseline, system, tau2)
    difference = system.mean - baseline.mean
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    p_value = 2 * float(stats.t.sf(abs(difference) / se, df)) if se > 0 else float(difference == 0)
    return SeedAwareDifference(
        baseline=baseline.mean,
        system=system.mean,
        difference=difference,
        interval=(difference - half, difference + half),
        p_value=min(1.0, p_value),
        standard_error=se,
        df=df,
        test_set_se=math.sqrt(tau2),
        baseline_runs=baseline.runs,
        system_runs=system.runs,
        alpha=alpha,
    )


def welch_se_df(baseline: ArmScores, system: ArmScores, tau2: float) -> tuple[float, float]:
    """(SE, degrees of freedom) of the difference of the arms' means."""
    parts = [float(np.var(a.scores, ddof=1)) / a.runs for a in (baseline, system)]
    variance = sum(parts) + tau2
    denominator = sum(c * c / (a.runs - 1) for c, a in zip(parts, (baseline, system), strict=True))
    df = variance**2 / denominator if denominator > 0 else math.inf
    return math.sqrt(variance), df


def minimum_detectable(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The true difference that a two-sided t test at `alpha` with this SE and df detects with
    probability `power` (noncentral t)."""
    from scipy import optimize, stats  # noqa: PLC0415

    if se <= 0:
        return 0.0
    if math.isinf(df):
        return se * float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    critical = float(stats.t.ppf(1 - alpha / 2, df))

    def shortfall(delta: float) -> float:
        shift = delta / se
        # P(T < -c | shift) as P(T > c | -shift): scipy's cdf far in the tail can be nan.
        reach = stats.nct.sf(critical, df, shift) + stats.nct.sf(critical, df, -shift)
        return float(reach) - power

    high = se * (critical + 1)
    while shortfall(high) < 0:  # power grows with the gap: widen until it passes
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high))


def pooled_seed_variance(arms: Sequence[ArmScores]) -> float | None:
    """The between-run variance pooled over arms (each weighted by its runs - 1): a planning
    value steadier than any one arm's from a few seeds."""
    weights = [a.runs - 1 for a in arms if a.runs >= 2]
    if not weights:
        return None
    sums = [float(np.var(a.scores, ddof=1)) * (a.runs - 1) for a in arms if a.runs >= 2]
    return sum(sums) / sum(weights)


def planned_minimum_detectable(
    runs: int, seed_variance: float, tau2: float, alpha: float = ALPHA
) -> float:
    """The minimum detectable difference of a comparison of two arms of `runs` runs each,
    both with `seed_variance` (Welch's df is then 2 (runs - 1))."""
    se = math.sqrt(2 * seed_variance / runs + tau2)
    return minimum_detectable(se, 2 * (runs - 1), alpha)


def seeds_for_gap(
    gap: float, seed_variance: float, tau2: float, alpha: float = ALPHA, most: int = 100
) -> int | None:
    """The fewest runs per arm for which `gap` is detectable with 80% power; None when even
    `most` runs are not enough (tau, which seeds cannot shrink, may already exceed it)."""
    for runs in range(2, most + 1):
        if planned_minimum_detectable(runs, seed_variance, tau2, alpha) <= gap:
            return runs
    return None

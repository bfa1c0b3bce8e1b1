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

Many variants. `holm_directional` takes the m variants' comparisons as one family: Holm's
procedure over their 2m one-sided hypotheses (gap <= 0, gap >= 0) claims signs with every
claim right together with probability >= 1 - alpha under any dependence (the comparisons
share the baseline's runs), and gives the compatible simultaneous intervals of
Strassburger & Bretz (2008), which leave out 0 exactly where a sign is claimed. Each
comparison's own `interval` is unadjusted.

Power. `welch_power` is the probability that the test rejects at a true gap when both
arms' runs vary by sigma^2: the Normal probability of |D| beyond the test's reach, averaged
by quadrature over the chi-square law of the two sample variances, which make the SE and
the Welch df random (the df below its maximum). sigma^2 is an estimate: pooled over a
study's arms (`pooled_seed_variance`, on `pooled_seed_df` degrees of freedom) it is steady
where one comparison's own variances from a few seeds are not, and the power is further
averaged over the sigma^2 its estimate leaves plausible (sigma^2 = s^2 k / chi2(k)), since
power at the estimate alone is optimistic on average. `minimum_detectable` is the gap with
80% power; `seeds_for_gap` plans runs per arm from a pilot's variances. Simulated
(tests/test_seed_significance.py), the true power at these MDDs lies in 0.75-0.85 for 3, 5
and 8 runs per arm, 4 and 16 arms, alpha 0.05 and 0.05 / 14.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

# resample_indices: [samples, sentences] indices drawn as sacreBLEU draws them, shared by
# every run; holm: Holm's adjusted p-values.
from transformer.scoring.significance import holm, resample_indices  # noqa: F401

ALPHA = 0.05
POWER = 0.8
SAMPLE_NODES = 48  # quadrature nodes per arm's sample variance in `welch_power`
VARIANCE_NODES = 24  # ... and over the plausible true seed variances
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


@functools.cache
def _chi2_nodes(df: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of E f(X), X ~ chi2(df): Gauss-Legendre on the chi-square's quantile
    scale, X = F^-1(u). There the integrands below stay smooth even at 1 df, whose density is
    infinite at 0 and defeats Gauss-Laguerre. 48 nodes per sample variance put the MDD within
    0.1% of 256 nodes' even at 2 runs and alpha 0.05 / 14 (within 1e-5 from 3 runs), and the
    power agrees with simulated tests (tests/test_seed_significance.py)."""
    from scipy import stats  # noqa: PLC0415

    u, w = np.polynomial.legendre.leggauss(count)
    nodes, weights = stats.chi2.ppf((u + 1) / 2, df), w / 2
    nodes.flags.writeable = weights.flags.writeable = False  # cached: shared by every call
    return nodes, weights


def _plausible_variances(seed_variance: float, seed_df: float) -> tuple[np.ndarray, np.ndarray]:
    """True seed variances with weights that a pooled estimate on `seed_df` degrees of freedom
    leaves plausible: sigma^2 = s^2 k / chi2(k), its law under the prior 1 / sigma^2. A power
    at the estimate alone is optimistic on average (power is concave near 80%), the more so
    the fewer runs the estimate pools; averaging over this law removes that. Infinite
    `seed_df`: the variance is taken as known."""
    if math.isinf(seed_df):
        return np.array([seed_variance]), np.array([1.0])
    nodes, weights = _chi2_nodes(seed_df, VARIANCE_NODES)
    return seed_variance * seed_df / nodes, weights


def _welch_reach(
    baseline_runs: int, system_runs: int, seed_variance: float, tau2: float, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """(weights, reach) over pairs of the arms' sample variances, each s^2 = sigma^2 chi2(n - 1)
    / (n - 1): reach is the |D| the test needs to reject there, t(1 - alpha / 2, df) x SE with
    the SE and Welch df that `welch_se_df` computes from those sample variances."""
    from scipy import special  # noqa: PLC0415

    (xa, wa), (xb, wb) = (_chi2_nodes(n - 1, SAMPLE_NODES) for n in (baseline_runs, system_runs))
    a = seed_variance * xa[:, None] / (baseline_runs - 1) / baseline_runs  # s_a^2 / n_a
    b = seed_variance * xb[None, :] / (system_runs - 1) / system_runs
    variance = a + b + tau2
    denominator = a * a / (baseline_runs - 1) + b * b / (system_runs - 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # no seed variance: df infinite
        df = np.where(denominator > 0, variance**2 / denominator, np.inf)
    reach = special.stdtrit(df, 1 - alpha / 2) * np.sqrt(variance)
    return wa[:, None] * wb[None, :], reach


def _spread(baseline_runs: int, system_runs: int, seed_variance: float, tau2: float) -> float:
    """The true standard deviation of D."""
    return math.sqrt(seed_variance * (1 / baseline_runs + 1 / system_runs) + tau2)


def _power(gap: float, weights: np.ndarray, reach: np.ndarray, spread: float) -> float:
    """P(|D| > reach) for D ~ Normal(gap, spread^2), averaged with the weights."""
    from scipy import special  # noqa: PLC0415

    if spread <= 0:
        return float(np.sum(weights * (abs(gap) > reach)))
    above = special.ndtr((gap - reach) / spread) + special.ndtr((-gap - reach) / spread)
    return float(np.sum(weights * above))


@dataclasses.dataclass(frozen=True)
class _Design:
    """A comparison as planned: its arms' runs, the seed variance (and the degrees of freedom
    of its estimate), tau^2 and alpha; `power(gap)` is the seed-aware test's at a true gap."""

    baseline_runs: int
    system_runs: int
    seed_variance: float
    tau2: float
    alpha: float
    seed_df: float

    @functools.cached_property
    def _regions(self) -> list[tuple[float, np.ndarray, np.ndarray, float]]:
        sizes = (self.baseline_runs, self.system_runs)
        return [
            (w, *_welch_reach(*sizes, v, self.tau2, self.alpha), _spread(*sizes, v, self.tau2))
            for v, w in zip(*_plausible_variances(self.seed_variance, self.seed_df), strict=True)
        ]

    def power(self, gap: float) -> float:
        return sum(w * _power(gap, *region) for w, *region in self._regions)


def welch_power(
    gap: float,
    baseline_runs: int,
    system_runs: int,
    seed_variance: float,
    tau2: float,
    alpha: float = ALPHA,
    seed_df: float = math.inf,
) -> float:
    """The probability that the seed-aware test rejects at `alpha` when the true gap is `gap`,
    both arms' runs vary by `seed_variance` and the test-set term by tau2. D is Normal and
    independent of the arms' sample variances, so the power is the Normal probability of |D|
    beyond the test's reach, averaged over the chi-square law of the sample variances: the
    Welch df is random and below its maximum, which a fixed df would ignore. With a finite
    `seed_df`, also averaged over the true variances its estimate leaves plausible."""
    design = _Design(baseline_runs, system_runs, seed_variance, tau2, alpha, seed_df)
    return design.power(gap)


def minimum_detectable(
    baseline_runs: int,
    system_runs: int,
    seed_variance: float,
    tau2: float,
    alpha: float = ALPHA,
    seed_df: float = math.inf,
    power: float = POWER,
) -> float:
    """The true gap that the seed-aware test detects with probability `power` at `alpha`
    (`welch_power`), for arms of these sizes whose runs vary by `seed_variance`."""
    from scipy import optimize  # noqa: PLC0415

    design = _Design(baseline_runs, system_runs, seed_variance, tau2, alpha, seed_df)
    high = 4 * _spread(baseline_runs, system_runs, seed_variance, tau2)
    if high <= 0:
        return 0.0
    while design.power(high) < power:  # power grows with the gap: widen until it passes
        high *= 2
    return float(optimize.brentq(lambda gap: design.power(gap) - power, 0.0, high))


def pooled_seed_variance(arms: Sequence[ArmScores]) -> float | None:
    """The between-run variance pooled over arms (each weighted by its runs - 1): steadier
    than any one arm's from a few seeds, on `pooled_seed_df` degrees of freedom."""
    weights = [a.runs - 1 for a in arms if a.runs >= 2]
    if not weights:
        return None
    sums = [float(np.var(a.scores, ddof=1)) * (a.runs - 1) for a in arms if a.runs >= 2]
    return sum(sums) / sum(weights)


def pooled_seed_df(arms: Sequence[ArmScores]) -> int:
    """The degrees of freedom of `pooled_seed_variance`: the arms' runs - 1, summed."""
    return sum(a.runs - 1 for a in arms if a.runs >= 2)


def planned_minimum_detectable(
    runs: int, seed_variance: float, tau2: float, alpha: float = ALPHA, seed_df: float = math.inf
) -> float:
    """The minimum detectable difference of a comparison of two arms of `runs` runs each."""
    return minimum_detectable(runs, runs, seed_variance, tau2, alpha, seed_df)


def seeds_for_gap(
    gap: float,
    seed_variance: float,
    tau2: float,
    alpha: float = ALPHA,
    seed_df: float = math.inf,
    most: int = 100,
) -> int | None:
    """The fewest runs per arm for which `gap` is detectable with 80% power; None when even
    `most` runs are not enough (tau, which seeds cannot shrink, may already exceed it). The
    power grows with the runs, so a bisection finds them."""

    def enough(runs: int) -> bool:
        return welch_power(gap, runs, runs, seed_variance, tau2, alpha, seed_df) >= POWER

    low, high = 1, most  # not enough at `low` (one run has no test); enough at `high`
    if not enough(high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


@dataclasses.dataclass(frozen=True)
class FamilyDecision:
    """One comparison within the family of variants, by Holm's procedure on the directional
    claims (see `holm_directional`)."""

    adjusted_p: float  # Holm-adjusted p of the claim that the gap has the estimate's sign
    significant: bool  # adjusted_p < alpha: the sign is claimed
    interval: tuple[float, float]  # simultaneous; 0 is an open end where significant


def holm_directional(
    differences: Mapping[str, SeedAwareDifference], alpha: float = ALPHA
) -> dict[str, FamilyDecision]:
    """Holm's procedure over the family's 2m one-sided hypotheses (gap <= 0 and gap >= 0 for
    each of the m variants), each tested by the one-sided Welch t test, with the compatible
    simultaneous intervals of Strassburger & Bretz (2008, Stat Med 27:4914).

    Why one-sided: the table's stars are read as signs (better, worse). Holm on the m
    two-sided tests controls the familywise error of 'differs' but proves no bound on wrong
    signs when the tests are dependent, as these are (every comparison shares the baseline's
    runs); on the 2m one-sided hypotheses it bounds every wrong claim, sign included, at
    alpha under any dependence (Bonferroni inside a closed test). Its first step is the
    two-sided test at alpha / m; later steps are slightly stricter than two-sided Holm's.

    The intervals: with r claims made, a claimed gap's interval is (0, d + c SE] or
    [d - c SE, 0) and any other's d +- c SE, c the one-sided t quantile at alpha / (2m - r)
    (the hypotheses Holm did not reject). Together they cover every true gap with
    probability >= 1 - alpha, and an interval leaves out 0 exactly where Holm claims a sign:
    the step that stops at a hypothesis has its p >= alpha / (2m - r)."""
    if not differences:
        return {}
    halves = {}
    for name, d in differences.items():
        halves[(name, "same")] = d.p_value / 2  # the estimate's side: half the two-sided p
        halves[(name, "opposite")] = 1 - d.p_value / 2  # >= 0.5: never rejected
    adjusted = holm(halves)
    claimed = {name for name in differences if adjusted[(name, "same")] < alpha}
    level = alpha / (len(halves) - len(claimed))
    return {
        name: FamilyDecision(
            adjusted_p=adjusted[(name, "same")],
            significant=name in claimed,
            interval=_compatible_interval(d, level, name in claimed),
        )
        for name, d in differences.items()
    }


def _compatible_interval(
    d: SeedAwareDifference, level: float, claimed: bool
) -> tuple[float, float]:
    """d +- c SE at the one-sided `level`, its end toward 0 moved to 0 where the sign is
    claimed (Strassburger & Bretz: that end is then the hypothesis Holm rejected)."""
    from scipy import special  # noqa: PLC0415

    half = float(special.stdtrit(d.df, 1 - level)) * d.standard_error
    low, high = d.difference - half, d.difference + half
    if claimed:
        low, high = (0.0, high) if d.difference > 0 else (low, 0.0)
    return low, high

"""scoring.seed_significance against independent facts: simulations whose true difference
and variance components are known (level and coverage at 3 and 5 seeds), the power of the
test itself simulated at the printed and planned MDDs, Holm's directional claims and their
simultaneous intervals checked by hand and by simulated coverage, the textbook
normal-approximation power formula, and sacreBLEU's own pooled paired bootstrap shown
failing the same null check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special, stats

from transformer.scoring import seed_significance as ss
from transformer.scoring import significance as sig
from transformer.scoring.metrics import sacrebleu_metrics

SIMULATIONS = 1000
SENTENCES = 100
RESAMPLES = 200


def _mean_score(summed: np.ndarray) -> np.ndarray:
    """Statistics [value, 1] per sentence: the corpus score is the sentence mean."""
    return summed[..., 0] / summed[..., 1]


def _simulated_arms(rng, runs: int, true_difference: float, interaction_sd: float = 2.0):
    """Two arms of `runs` runs each on a freshly drawn test set, per-sentence scores
    y = mu_arm + sentence + arm x sentence + run + run x sentence. With 100 sentences the
    run's sentence-level part has sd 0.26 and tau = sqrt(2) * 2.0 / 10 = 0.28, near the
    Multi30k study's figures; the run effect has sd 0.5."""
    sentence = rng.normal(0.0, 10.0, SENTENCES)  # difficulty, shared by every run
    indices = ss.resample_indices(SENTENCES, RESAMPLES, int(rng.integers(1 << 30)))
    arms = []
    for mu in (0.0, true_difference):
        interaction = rng.normal(0.0, interaction_sd, SENTENCES)
        run_effect = rng.normal(0.0, 0.5, runs)
        residual = rng.normal(0.0, 2.6, (runs, SENTENCES))
        scores = mu + sentence + interaction + run_effect[:, None] + residual  # [runs, N]
        stats = [np.stack([row, np.ones(SENTENCES)], axis=-1) for row in scores]
        arms.append(ss.arm_scores(stats, _mean_score, indices))
    return arms


@pytest.mark.parametrize("runs", [3, pytest.param(5, marks=pytest.mark.slow)])
def test_the_level_is_5_percent_and_the_interval_covers_95_percent(runs):
    rng = np.random.default_rng(runs)
    rejected = sum(
        ss.compare(*_simulated_arms(rng, runs, 0.0)).p_value < 0.05 for _ in range(SIMULATIONS)
    )
    covered = 0
    for _ in range(SIMULATIONS):
        low, high = ss.compare(*_simulated_arms(rng, runs, 1.0)).interval
        covered += low <= 1.0 <= high
    assert 0.03 <= rejected / SIMULATIONS <= 0.07
    assert 0.93 <= covered / SIMULATIONS <= 0.97


@pytest.mark.slow
def test_without_the_test_set_term_five_seeds_reject_a_true_null_too_often():
    # The planted fault: drop tau^2 (treat the test set as fixed) and the same simulation
    # rejects well above 5%: the arms' per-sentence fit is noise the seeds cannot show.
    rng = np.random.default_rng(11)
    rejected = 0
    for _ in range(SIMULATIONS):
        baseline, system = _simulated_arms(rng, 5, 0.0)
        se, df = ss.welch_se_df(baseline, system, tau2=0.0)
        p = 2 * stats.t.sf(abs(system.mean - baseline.mean) / se, df)
        rejected += p < 0.05
    assert rejected / SIMULATIONS > 0.07


def test_the_test_set_term_recovers_a_known_tau_and_vanishes_for_identical_arms():
    rng = np.random.default_rng(3)
    known = 2 * 2.0**2 / SENTENCES  # Var(T_b - T_a): two independent interaction means
    estimates = [ss.test_set_variance(*_simulated_arms(rng, 5, 0.0)) for _ in range(200)]
    assert np.mean(estimates) == pytest.approx(known, rel=0.15)
    no_interaction = [
        ss.test_set_variance(*_simulated_arms(rng, 5, 0.0, interaction_sd=0.0)) for _ in range(200)
    ]
    assert np.mean(no_interaction) < 0.1 * known


def test_one_run_in_an_arm_gives_no_seed_aware_test():
    rng = np.random.default_rng(0)
    baseline, system = _simulated_arms(rng, 3, 0.0)
    single = ss.ArmScores(scores=system.scores[:1], resampled=system.resampled[:1])
    assert ss.compare(baseline, single) is None
    assert single.seed_std is None and baseline.seed_std > 0


def test_the_difference_is_the_gap_between_the_arms_mean_run_scores():
    rng = np.random.default_rng(1)
    baseline, system = _simulated_arms(rng, 4, 0.7)
    result = ss.compare(baseline, system)
    assert result.difference == pytest.approx(system.scores.mean() - baseline.scores.mean())
    low, high = result.interval
    assert (low + high) / 2 == pytest.approx(result.difference)
    half = stats.t.ppf(0.975, result.df) * result.standard_error
    assert high - low == pytest.approx(2 * half)


# Power, checked against the test itself. `_welch_p` is compare()'s Welch test written on
# arrays (checked against compare below), so a simulation runs many studies at once: D is
# Normal and independent of the arms' sample variances, each sigma^2 chi2(n - 1) / (n - 1),
# and tau^2 counts as known, as compare() treats it.
SIGMA2, TAU2 = 0.45**2, 0.3**2  # near the Multi30k study's pooled seed and test-set sd
HOLM_ALPHA = 0.05 / 14  # Holm's first step over the Multi30k study's 14 variants


def _welch_p(d, var_a, var_b, runs_a: int, runs_b: int, tau2: float) -> np.ndarray:
    a, b = var_a / runs_a, var_b / runs_b
    variance = a + b + tau2
    df = variance**2 / (a * a / (runs_a - 1) + b * b / (runs_b - 1))
    return 2 * special.stdtr(df, -np.abs(d) / np.sqrt(variance))


def _welch_rejects(rng, gap, runs_a, runs_b, sigma2, tau2, alpha) -> np.ndarray:
    """Whether the test rejects on fresh comparisons with true gaps `gap` [sims]."""
    gap = np.asarray(gap, float)
    var_a, var_b = (sigma2 * rng.chisquare(n - 1, gap.shape) / (n - 1) for n in (runs_a, runs_b))
    spread = math.sqrt(sigma2 * (1 / runs_a + 1 / runs_b) + tau2)
    d = gap + spread * rng.standard_normal(gap.shape)
    return _welch_p(d, var_a, var_b, runs_a, runs_b, tau2) < alpha


def _mc_tolerance(power: float, sims: int) -> float:
    """4 Monte Carlo standard errors of a rejection rate near `power`: a correct value fails
    with probability 6e-5."""
    return 4 * math.sqrt(power * (1 - power) / sims)


def test_the_array_welch_test_is_compares():
    rng = np.random.default_rng(2)
    for runs_a, runs_b in ((3, 3), (2, 5), (8, 4)):
        arms = [
            ss.ArmScores(scores=rng.normal(0, 1, n), resampled=np.zeros((n, 4)))
            for n in (runs_a, runs_b)
        ]  # identical resamples: tau^2 = 0
        p = _welch_p(
            arms[1].mean - arms[0].mean,
            np.var(arms[0].scores, ddof=1),
            np.var(arms[1].scores, ddof=1),
            runs_a,
            runs_b,
            0.0,
        )
        assert p == pytest.approx(ss.compare(*arms).p_value, rel=1e-9)


@pytest.mark.parametrize(
    "runs_a, runs_b, tau2, alpha, gap",
    [(2, 2, TAU2, 0.05, 2.0), (3, 3, 0.0, HOLM_ALPHA, 2.0), (5, 3, TAU2, 0.05, 1.0)],
)
def test_welch_power_is_the_rejection_rate_of_simulated_tests(runs_a, runs_b, tau2, alpha, gap):
    sims = 400_000
    rejects = _welch_rejects(
        np.random.default_rng(runs_a), np.full(sims, gap), runs_a, runs_b, SIGMA2, tau2, alpha
    )
    power = ss.welch_power(gap, runs_a, runs_b, SIGMA2, tau2, alpha)
    assert rejects.mean() == pytest.approx(power, abs=_mc_tolerance(power, sims))


def test_a_seed_variance_on_few_degrees_of_freedom_averages_the_power_over_its_law():
    # True variances drawn from s^2 k / chi2(k), then the test: welch_power with seed_df = k.
    rng, sims, k = np.random.default_rng(4), 400_000, 6
    sigma2 = SIGMA2 * k / rng.chisquare(k, sims)
    var_a, var_b = (sigma2 * rng.chisquare(2, sims) / 2 for _ in range(2))
    d = 1.5 + np.sqrt(sigma2 * 2 / 3 + TAU2) * rng.standard_normal(sims)
    rate = np.mean(_welch_p(d, var_a, var_b, 3, 3, TAU2) < 0.05)
    power = ss.welch_power(1.5, 3, 3, SIGMA2, TAU2, seed_df=k)
    assert rate == pytest.approx(power, abs=_mc_tolerance(power, sims))
    assert power < ss.welch_power(1.5, 3, 3, SIGMA2, TAU2)  # the plug-in is optimistic


def test_the_mdd_of_a_known_variance_is_the_textbook_one_where_the_runs_add_nothing():
    # No seed variance: a z test with SE tau, whose MDD is (z_0.975 + z_0.8) tau.
    assert ss.minimum_detectable(3, 3, 0.0, 1.0) == pytest.approx(1.959964 + 0.841621, abs=1e-5)


SIMULATED_STUDIES = 20_000


def _printed_mdds(rng, arms: int, runs: int, alpha: float, seed_df_known: bool = False):
    """[studies] MDDs as the table prints them: the seed variance pooled over a study of
    `arms` arms of `runs` runs (all with variance SIGMA2), its degrees of freedom averaged
    in. minimum_detectable is smooth in the pooled variance: computed at 17 of its quantiles
    and interpolated (the error, < 1e-4 BLEU, is far below the Monte Carlo error)."""
    df = arms * (runs - 1)
    pooled = SIGMA2 * rng.chisquare(df, SIMULATED_STUDIES) / df
    grid = np.quantile(pooled, np.linspace(0, 1, 17))
    seed_df = math.inf if seed_df_known else df
    mdds = [ss.minimum_detectable(runs, runs, v, TAU2, alpha, seed_df) for v in grid]
    return np.interp(pooled, grid, mdds)


@pytest.mark.parametrize("runs", [3, 5, 8])
def test_the_printed_mdd_is_detected_with_80_percent_power(runs):
    # The reviewer's check: the true power at the printed value, averaged over studies (a
    # fresh comparison at a true gap of each study's printed MDD), for a study shaped like
    # the Multi30k one (16 arms) and a small one (4 arms: baseline, A/A, two variants).
    rng = np.random.default_rng(runs)
    for arms in (4, 16):
        for alpha in (0.05, HOLM_ALPHA):
            printed = _printed_mdds(rng, arms, runs, alpha)
            power = _welch_rejects(rng, printed, runs, runs, SIGMA2, TAU2, alpha).mean()
            assert 0.75 <= power <= 0.85, (arms, alpha, power)


def test_a_printed_mdd_from_the_pooled_variance_alone_overpromises_in_a_small_study():
    # The planted fault: drop the pooled estimate's uncertainty (seed_df infinite) and a
    # 4-arm study of 3 seeds detects its printed MDD with probability about 0.73.
    rng = np.random.default_rng(9)
    printed = _printed_mdds(rng, 4, 3, HOLM_ALPHA, seed_df_known=True)
    assert _welch_rejects(rng, printed, 3, 3, SIGMA2, TAU2, HOLM_ALPHA).mean() < 0.75


@pytest.mark.parametrize("runs", [3, 5, 8])
def test_the_planned_mdd_is_detected_with_80_percent_power(runs):
    rng, sims = np.random.default_rng(runs), 40_000
    for alpha in (0.05, HOLM_ALPHA):
        # The pilot's variances taken as known: the quadrature is the test's own power.
        gap = ss.planned_minimum_detectable(runs, SIGMA2, TAU2, alpha)
        rate = _welch_rejects(rng, np.full(sims, gap), runs, runs, SIGMA2, TAU2, alpha).mean()
        assert rate == pytest.approx(ss.POWER, abs=_mc_tolerance(ss.POWER, sims))
    # From a pilot of 4 arms x 3 seeds (8 df), averaged over pilots: still 80%.
    pilots = SIGMA2 * rng.chisquare(8, SIMULATED_STUDIES) / 8
    grid = np.quantile(pilots, np.linspace(0, 1, 17))
    mdds = [ss.planned_minimum_detectable(runs, v, TAU2, HOLM_ALPHA, seed_df=8) for v in grid]
    planned = np.interp(pilots, grid, mdds)
    power = _welch_rejects(rng, planned, runs, runs, SIGMA2, TAU2, HOLM_ALPHA).mean()
    assert 0.75 <= power <= 0.85


def test_a_planner_that_fixes_welchs_df_at_its_maximum_misses_80_percent():
    # The planted fault: the noncentral t with df 2 (n - 1), the most Welch's df can be
    # (tau^2 = 0), promises 80% where the test has about 70% at 3 seeds.
    runs, se = 3, math.sqrt(2 * SIGMA2 / 3)
    critical = stats.t.ppf(0.975, 2 * (runs - 1))

    def shortfall(gap):
        shift = gap / se
        return stats.nct.sf(critical, 4, shift) + stats.nct.sf(critical, 4, -shift) - 0.8

    fixed_df = optimize.brentq(shortfall, 0.0, 10.0)
    assert ss.welch_power(fixed_df, runs, runs, SIGMA2, 0.0) < 0.72
    assert fixed_df < ss.planned_minimum_detectable(runs, SIGMA2, 0.0)


def test_seeds_for_a_gap_follow_the_textbook_sample_size():
    # Normal approximation: n = 2 sigma^2 (z_a + z_b)^2 / gap^2 per arm; the t test needs a
    # little more, never less.
    sigma2, gap = 0.25, 0.5
    textbook = 2 * sigma2 * (1.959964 + 0.841621) ** 2 / gap**2  # 15.7
    needed = ss.seeds_for_gap(gap, sigma2, tau2=0.0)
    assert math.ceil(textbook) <= needed <= math.ceil(textbook) + 2
    assert ss.planned_minimum_detectable(needed, sigma2, 0.0) <= gap
    assert ss.planned_minimum_detectable(needed - 1, sigma2, 0.0) > gap
    # A pilot's estimate on few degrees of freedom asks for more seeds.
    assert ss.seeds_for_gap(gap, sigma2, 0.0, seed_df=8) > needed
    # tau alone already exceeds the gap's reach: no number of seeds is enough.
    assert ss.seeds_for_gap(gap, sigma2, tau2=(gap / 2.5) ** 2) is None


def test_pooled_seed_variance_weights_each_arm_by_its_degrees_of_freedom():
    arms = [
        ss.ArmScores(scores=np.array(v, float), resampled=np.zeros((len(v), 2)))
        for v in ([1.0, 2.0, 3.0], [5.0, 5.0, 6.0, 8.0], [4.0])
    ]
    expected = (2 * np.var([1, 2, 3], ddof=1) + 3 * np.var([5, 5, 6, 8], ddof=1)) / 5
    assert ss.pooled_seed_variance(arms) == pytest.approx(expected)
    assert ss.pooled_seed_df(arms) == 5
    assert ss.pooled_seed_variance(arms[2:]) is None


# Holm's procedure on the directional claims, and its simultaneous intervals.


def _difference(d: float, se: float, df: float) -> ss.SeedAwareDifference:
    """A comparison as compare() reports it, from its estimate, SE and df."""
    p = 2 * special.stdtr(df, -abs(d) / se)
    return ss.SeedAwareDifference(
        baseline=0.0,
        system=d,
        difference=d,
        interval=(math.nan, math.nan),
        p_value=float(p),
        standard_error=se,
        df=df,
        test_set_se=0.0,
        baseline_runs=3,
        system_runs=3,
    )


def test_holm_on_the_signs_claims_and_bounds_as_worked_by_hand():
    # Normal tests (df infinite), SE 1. One-sided p: 3.2e-5, 0.0019, 0.31 (and their
    # complements). Holm over 6: 6 x 3.2e-5 and 5 x 0.0019 pass 0.05, 4 x 0.31 does not, so
    # two signs are claimed and the bounds use alpha / (6 - 2): z_0.9875 = 2.2414.
    family = {"up": 4.0, "down": -2.9, "flat": 0.5}
    decisions = ss.holm_directional({k: _difference(d, 1.0, math.inf) for k, d in family.items()})
    c = stats.norm.ppf(1 - 0.05 / 4)
    assert [decisions[k].significant for k in family] == [True, True, False]
    assert decisions["up"].adjusted_p == pytest.approx(6 * stats.norm.sf(4.0))
    assert decisions["down"].adjusted_p == pytest.approx(5 * stats.norm.sf(2.9))
    assert decisions["flat"].adjusted_p == 1.0  # 4 x 0.31, capped
    assert decisions["up"].interval == pytest.approx((0.0, 4.0 + c))
    assert decisions["down"].interval == pytest.approx((-2.9 - c, 0.0))
    assert decisions["flat"].interval == pytest.approx((0.5 - c, 0.5 + c))
    assert ss.holm_directional({}) == {}  # no variant with a seed-aware test


def test_holms_later_steps_claim_a_sign_that_bonferroni_would_not():
    # Two variants: one-sided p 1e-6 and 0.015. Bonferroni over 4 needs 0.0125; Holm's second
    # step needs 0.05 / 3 = 0.0167, so both signs are claimed and the intervals, at
    # alpha / (4 - 2), both leave out 0.
    second = stats.norm.isf(0.015)
    family = {"a": _difference(stats.norm.isf(1e-6), 1.0, math.inf)}
    family["b"] = _difference(-second, 1.0, math.inf)
    decisions = ss.holm_directional(family)
    assert decisions["a"].significant and decisions["b"].significant
    assert decisions["b"].adjusted_p == pytest.approx(3 * 0.015)
    assert decisions["b"].interval == pytest.approx((-second - stats.norm.ppf(0.975), 0.0))


def _study(rng, gaps: np.ndarray, runs: int, studies: int, known: bool):
    """[studies, m] estimates, SEs and dfs of m variants against one shared baseline (every
    arm's runs of variance SIGMA2; test-set terms of variance TAU2 / 2 per arm, the
    baseline's shared by every comparison, so each comparison's tau^2 is TAU2): Welch's, as
    compare() tests them, or with the variances `known` (z tests, exact p-values)."""
    m = len(gaps)
    means = rng.normal(0, math.sqrt(SIGMA2 / runs), (studies, m + 1))
    means += rng.normal(0, math.sqrt(TAU2 / 2), (studies, m + 1))
    d = gaps + means[:, 1:] - means[:, :1]
    if known:
        return d, np.full(d.shape, math.sqrt(2 * SIGMA2 / runs + TAU2)), np.full(d.shape, np.inf)
    variances = SIGMA2 * rng.chisquare(runs - 1, (studies, m + 1)) / (runs - 1)
    a, b = variances[:, :1] / runs, variances[:, 1:] / runs
    se = np.sqrt(a + b + TAU2)
    return d, se, se**4 / ((a * a + b * b) / (runs - 1))


def _claims_and_intervals(d, se, df):
    """[studies, m] significance and interval ends from holm_directional, study by study."""
    significant, low, high = (np.zeros(d.shape, bool), np.zeros(d.shape), np.zeros(d.shape))
    for i in range(d.shape[0]):
        family = {j: _difference(d[i, j], se[i, j], df[i, j]) for j in range(d.shape[1])}
        for j, decision in ss.holm_directional(family).items():
            significant[i, j] = decision.significant
            low[i, j], high[i, j] = decision.interval
    return significant, low, high


GAP_PATTERNS = {
    "no gaps": np.zeros(14),
    "half large, both signs": np.array([2.5, -2.5, 3.0, -3.0, 4.0, -4.0, 2.0] + [0.0] * 7),
    "all near the MDD": np.tile([1.5, -1.5, 1.0, -1.0, 0.5, -0.5, 2.0], 2),
}


@pytest.mark.parametrize("known", [False, True], ids=["Welch", "z"])
@pytest.mark.parametrize("pattern", list(GAP_PATTERNS))
def test_holms_intervals_cover_every_gap_together_and_leave_out_0_exactly_at_the_stars(
    pattern, known
):
    # 14 variants of 5 seeds against one baseline (the Multi30k study's family). A claimed
    # interval is open at 0: it covers a gap strictly on its side of 0 and within its far
    # end. (At 3 seeds Welch's test itself rejects more often than its p says in the far
    # tails Holm uses, and the family's coverage falls to about 0.93-0.94; see the docs.)
    gaps, studies = GAP_PATTERNS[pattern], 3000
    rng = np.random.default_rng([len(pattern), int(known)])
    d, se, df = _study(rng, gaps, 5, studies, known)
    significant, low, high = _claims_and_intervals(d, se, df)
    claimed = np.where(d > 0, (low == 0) & (high > 0), (high == 0) & (low < 0))  # open at 0
    assert np.all(np.where(significant, claimed, (low <= 0) & (0 <= high)))
    inside = (low <= gaps) & (gaps <= high)
    inside &= ~significant | np.where(d > 0, gaps > 0, gaps < 0)
    coverage = np.mean(inside.all(axis=1))
    # The procedure guarantees >= 0.95; 3 Monte Carlo SEs below it a correct one fails once
    # in 700 runs.
    assert coverage >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / studies), coverage
    if pattern == "no gaps":  # the planted fault: unadjusted intervals, read together
        unadjusted = np.abs(d) <= stats.t.ppf(0.975, df) * se
        assert np.mean(unadjusted.all(axis=1)) < 0.75


# The same null check with real BLEU on text: sacreBLEU's paired bootstrap on the seeds'
# hypotheses concatenated (the pooled test the tables used to rely on) against the
# seed-aware test, two arms drawn from one distribution.
VOCABULARY = [f"w{i}" for i in range(300)]


def _references(rng, sentences: int) -> list[str]:
    return [" ".join(rng.choice(VOCABULARY, rng.integers(6, 14))) for _ in range(sentences)]


def _text_arm(rng, references: list[str], runs: int) -> list[list[str]]:
    """Each run keeps each reference word with a probability set by the sentence's ease,
    the run's own skill and sentence-level noise, else writes a random word."""
    ease = rng.normal(0.0, 0.8, len(references))
    arm = []
    for _ in range(runs):
        logit = 0.5 + rng.normal(0.0, 0.15) + ease + rng.normal(0.0, 0.5, len(references))
        keep = 1 / (1 + np.exp(-logit))
        arm.append([_corrupt(rng, r.split(), q) for r, q in zip(references, keep, strict=True)])
    return arm


def _corrupt(rng, words: list[str], keep: float) -> str:
    return " ".join(w if rng.random() < keep else rng.choice(VOCABULARY) for w in words)


@pytest.mark.slow
def test_the_pooled_sentence_bootstrap_fails_the_null_check_that_the_seed_aware_test_passes():
    rng = np.random.default_rng(0)
    bleu = sacrebleu_metrics()["BLEU"]
    trials, runs, sentences = 40, 3, 60
    pooled_rejections = seed_aware_rejections = 0
    for trial in range(trials):
        references = _references(rng, sentences)
        baseline, system = (_text_arm(rng, references, runs) for _ in range(2))
        by_seed = {s: (baseline[s], system[s]) for s in range(runs)}
        pooled = sig.paired_bootstrap(*sig.pool_seeds(by_seed, references), samples=200)
        pooled_rejections += pooled["BLEU"].p_value < 0.05
        indices = ss.resample_indices(sentences, RESAMPLES, trial)
        arms = [
            ss.arm_scores(
                [ss.sacrebleu_statistics(h, references, bleu) for h in arm],
                ss.sacrebleu_score(bleu),
                indices,
            )
            for arm in (baseline, system)
        ]
        seed_aware_rejections += ss.compare(*arms).p_value < 0.05
    # A valid test rejects about 2 of 40 true nulls (P(>= 7) < 0.5% at 5%).
    assert pooled_rejections >= 10, pooled_rejections
    assert seed_aware_rejections <= 6, seed_aware_rejections

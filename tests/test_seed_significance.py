"""scoring.seed_significance against independent facts: simulations whose true difference
and variance components are known (level and coverage at 3 and 5 seeds), the textbook
normal-approximation power formula, a Monte Carlo noncentral t, and sacreBLEU's own pooled
paired bootstrap shown failing the same null check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

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


def test_minimum_detectable_difference_has_80_percent_power():
    # Large df: the textbook (z_0.975 + z_0.8) * SE.
    assert ss.minimum_detectable(1.0, math.inf) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    # Finite df: simulate the t statistic at the gap and count rejections.
    rng = np.random.default_rng(5)
    for df in (2.0, 4.0, 8.0):
        gap = ss.minimum_detectable(1.0, df)
        chi = np.sqrt(rng.chisquare(df, 200_000) / df)
        t = (gap + rng.standard_normal(200_000)) / chi
        power = np.mean(np.abs(t) > stats.t.ppf(0.975, df))
        assert power == pytest.approx(0.8, abs=0.005)


def test_seeds_for_a_gap_follow_the_textbook_sample_size():
    # Normal approximation: n = 2 sigma^2 (z_a + z_b)^2 / gap^2 per arm; the t test needs a
    # little more, never less.
    sigma2, gap = 0.25, 0.5
    textbook = 2 * sigma2 * (1.959964 + 0.841621) ** 2 / gap**2  # 15.7
    needed = ss.seeds_for_gap(gap, sigma2, tau2=0.0)
    assert math.ceil(textbook) <= needed <= math.ceil(textbook) + 2
    assert ss.planned_minimum_detectable(needed, sigma2, 0.0) <= gap
    assert ss.planned_minimum_detectable(needed - 1, sigma2, 0.0) > gap
    # tau alone already exceeds the gap's reach: no number of seeds is enough.
    assert ss.seeds_for_gap(gap, sigma2, tau2=(gap / 2.5) ** 2) is None


def test_pooled_seed_variance_weights_each_arm_by_its_degrees_of_freedom():
    arms = [
        ss.ArmScores(scores=np.array(v, float), resampled=np.zeros((len(v), 2)))
        for v in ([1.0, 2.0, 3.0], [5.0, 5.0, 6.0, 8.0], [4.0])
    ]
    expected = (2 * np.var([1, 2, 3], ddof=1) + 3 * np.var([5, 5, 6, 8], ddof=1)) / 5
    assert ss.pooled_seed_variance(arms) == pytest.approx(expected)
    assert ss.pooled_seed_variance(arms[2:]) is None


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

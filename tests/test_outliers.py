"""scoring/outliers.py calibrated by simulation: clean studies of normal seeds rarely flag a
run, a planted run far off is flagged and named, and the residual is the one defined."""

import numpy as np
import pytest

from transformer.scoring.outliers import THRESHOLD, outlier_runs

ARMS, SEEDS = 16, 5


def study(rng, sd=0.5, planted=None) -> dict:
    arms = {
        f"arm{a}": {f"seed {s}": 25.0 + a * 0.3 + sd * rng.standard_normal() for s in range(SEEDS)}
        for a in range(ARMS)
    }
    if planted is not None:
        arms["arm3"]["seed 2"] = 25.0 + 3 * 0.3 + planted
    return arms


def test_clean_studies_rarely_flag_a_run():
    rng = np.random.default_rng(0)
    flagged = sum(bool(outlier_runs(study(rng))) for _ in range(2000))
    assert flagged / 2000 < 0.05  # measured: 0.03


def test_a_run_six_sigmas_off_is_flagged_and_named():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(500):
        found = outlier_runs(study(rng, planted=-3.0))  # 3 BLEU low at a seed sd of 0.5
        hits += [(o.arm, o.run) for o in found] == [("arm3", "seed 2")]
    assert hits / 500 > 0.85  # measured: 0.92


def test_the_residual_is_the_value_minus_the_others_median_over_the_robust_sigma():
    clean = {"s0": 0.5, "s1": -0.5, "s2": 0.0, "s3": 0.2}
    arms = {"a": {"s0": 0.0, "s1": 0.5, "s2": -0.5, "s3": 6.0}, "b": clean, "c": clean}
    arms["d"] = clean
    (found,) = outlier_runs(arms)
    assert (found.arm, found.run, found.value) == ("a", "s3", 6.0)
    assert found.others_median == pytest.approx(0.0)  # of 0, 0.5 and -0.5
    residuals = []
    for values in arms.values():
        for run, v in values.items():
            others = [x for r, x in values.items() if r != run]
            residuals.append(v - np.median(others))
    sigma = 1.4826 * np.median(np.abs(residuals))
    assert found.sigmas == pytest.approx(residuals[3] / sigma)  # a's s3
    assert abs(found.sigmas) > THRESHOLD


def test_small_arms_and_tiny_studies_flag_nothing():
    assert outlier_runs({"a": {"s0": 0.0, "s1": 100.0}}) == []
    assert outlier_runs({"a": {"s0": 0.0, "s1": 1.0, "s2": 100.0}}) == []  # 3 residuals only
    assert outlier_runs({"a": {"s0": None, "s1": float("nan"), "s2": 1.0, "s3": 2.0}}) == []

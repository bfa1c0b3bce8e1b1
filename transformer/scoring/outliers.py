"""Runs far from the other runs of their arm, for a study's table to name.

A run's residual is its value minus the median of the other runs of its arm: an outlier
shifts its arm-mates' medians little, so they are not flagged in its stead (against the
others' mean, a run 4 BLEU low makes its neighbours look 1 BLEU high). The residuals' scale
sigma is estimated once for the whole study, robustly: 1.4826 x the median absolute residual
over every run of every arm of at least MIN_RUNS runs (a few outliers barely move it, where an
arm's own spread at five seeds would swing with them); arms of one size share one scale, so
a study whose arms differ in size is judged a little unevenly. A run whose residual exceeds
THRESHOLD sigmas is an outlier.

Calibrated by simulation (tests/test_outliers.py): 16 arms of 5 normal seeds flag some run in
under 5% of clean studies, and a run 6 seed sds off (3 BLEU at a seed sd of 0.5) is flagged,
alone, in over 85% of studies. (A rule on each arm's own spread, 3 median absolute deviations from
its median, flags some run in about a quarter of clean 5-seed arms.)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping

THRESHOLD = 4.0  # in robust sigmas
MIN_RUNS = 3  # an arm with fewer runs has no 'other runs' to speak of
MIN_RESIDUALS = 6  # fewer runs in the whole study estimate no sigma
MAD_TO_SD = 1.4826  # median absolute deviation of a normal sample -> its sd


@dataclasses.dataclass(frozen=True)
class Outlier:
    arm: str
    run: str  # the run's label within the arm, e.g. "seed 3"
    value: float
    others_median: float  # the median of the arm's other runs
    sigmas: float  # signed residual in robust sigmas


def outlier_runs(arms: Mapping[str, Mapping[str, float]]) -> list[Outlier]:
    """The outliers among {arm: {run label: value}} (module docstring), largest first."""
    rows = []  # (arm, run, value, others' mean, residual)
    for arm, values in arms.items():
        finite = {run: v for run, v in values.items() if v is not None and math.isfinite(v)}
        if len(finite) < MIN_RUNS:
            continue
        for run, value in finite.items():
            others = [v for other, v in finite.items() if other != run]
            center = statistics.median(others)
            rows.append((arm, run, value, center, value - center))
    if len(rows) < MIN_RESIDUALS:
        return []
    sigma = MAD_TO_SD * statistics.median(abs(r[-1]) for r in rows)
    if sigma == 0:
        return []
    flagged = [
        Outlier(arm, run, value, mean, residual / sigma)
        for arm, run, value, mean, residual in rows
        if abs(residual) > THRESHOLD * sigma
    ]
    return sorted(flagged, key=lambda o: -abs(o.sigmas))

"""Is a variant's gap to the baseline larger than the test set's sampling noise?

`paired_bootstrap` runs sacreBLEU's own paired bootstrap test (`sacrebleu.significance.
PairedTest`, test_type 'bs', as `sacrebleu --paired-bs`) for BLEU and chrF and adds the 95%
interval of the paired difference. sacreBLEU reports only each system's own interval, so the
difference's is taken over the same resamples: the resample indices are drawn exactly as
sacreBLEU draws them (one `numpy.random.default_rng(seed).choice` matrix shared by both
systems), and the score of each resample is sacreBLEU's own sufficient statistics summed and
scored by the metric. The test suite checks those resamples against the system interval
PairedTest reports, so both figures come from one set of resamples.

Several seeds are pooled by concatenating the hypotheses of paired seeds (and repeating the
references), one paired test on the joint corpus. That holds the runs fixed: it measures the
test set's noise only, never the noise of drawing other seeds (seed_significance.py has the
test that does). `holm` adjusts the p-values of several variants tested against one
baseline; `t_interval` is the seed spread.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

import numpy as np
from sacrebleu.significance import PairedTest

from transformer.common.errors import UserError
from transformer.scoring.metrics import sacrebleu_metrics

SAMPLES = 1000  # bootstrap resamples, as sacreBLEU's default for --paired-bs
SEED = 12345  # sacreBLEU's default SACREBLEU_SEED
METRICS = ("BLEU", "chrF")


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """One metric of a system against the baseline on the same sentences."""

    metric: str
    baseline: float
    system: float
    difference: float  # system - baseline on the whole corpus
    interval: tuple[float, float]  # 95% of the resampled differences (2.5th, 97.5th percentile)
    p_value: float  # sacreBLEU's: chance of a gap at least this large if the systems were equal
    samples: int
    seed: int


def _check(baseline: Sequence[str], system: Sequence[str], references: Sequence[str]) -> None:
    if not (len(baseline) == len(system) == len(references)):
        raise UserError(
            f"paired test needs one baseline and one system hypothesis per reference; got "
            f"{len(baseline)} baseline, {len(system)} system and {len(references)} references"
        )
    if not references:
        raise UserError("paired test needs at least one sentence")


def _paired_test(baseline, system, references, samples: int, seed: int) -> dict:
    """sacreBLEU's paired bootstrap: {metric: its Result for the system}."""
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)  # PairedTest reads its seed from here
    try:
        test = PairedTest(
            [("baseline", list(baseline)), ("system", list(system))],
            sacrebleu_metrics(),
            [list(references)],
            test_type="bs",
            n_samples=samples,
        )
        _, scores = test()
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = previous
    # PairedTest names its columns by the metrics' own names (chrF as 'chrF2').
    columns = [c for c in scores if c != "System"]  # in the order of the metrics dict
    return {name: scores[column][1] for name, column in zip(METRICS, columns, strict=True)}


def resampled_scores(hypotheses, references, metric, indices: np.ndarray) -> np.ndarray:
    """[samples] scores of `hypotheses` on each resample (rows of indices [samples, n])."""
    stats = np.array(
        metric._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype="float32"
    )
    return np.array([metric._compute_score_from_stats(s.sum(0)).score for s in stats[indices]])


def resample_indices(n: int, samples: int, seed: int) -> np.ndarray:
    """[samples, n] sentence indices, drawn as sacreBLEU's paired bootstrap draws them."""
    return np.random.default_rng(seed).choice(n, size=(samples, n), replace=True)


def paired_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    *,
    samples: int = SAMPLES,
    seed: int = SEED,
) -> dict[str, PairedDifference]:
    """{'BLEU': ..., 'chrF': ...}: the system's difference to the baseline, its 95% paired
    bootstrap interval and sacreBLEU's p-value."""
    _check(baseline, system, references)
    # As scoring.metrics.score and the command line: every line right-stripped.
    baseline, system, references = ([s.rstrip() for s in x] for x in (baseline, system, references))
    results = _paired_test(baseline, system, references, samples, seed)
    indices = resample_indices(len(references), samples, seed)
    out = {}
    for name, metric in sacrebleu_metrics().items():
        base_score = metric.corpus_score(list(baseline), [list(references)]).score
        diffs = resampled_scores(system, references, metric, indices) - resampled_scores(
            baseline, references, metric, indices
        )
        low, high = np.percentile(diffs, [2.5, 97.5])
        out[name] = PairedDifference(
            metric=name,
            baseline=base_score,
            system=results[name].score,
            difference=results[name].score - base_score,
            interval=(float(low), float(high)),
            p_value=float(results[name].p_value),
            samples=samples,
            seed=seed,
        )
    return out


def pool_seeds(
    by_seed: dict[int, tuple[Sequence[str], Sequence[str]]], references: Sequence[str]
) -> tuple[list[str], list[str], list[str]]:
    """{seed: (baseline hyps, system hyps)} -> one corpus: matching seeds concatenated in seed
    order, the references repeated once per seed."""
    baseline, system, refs = [], [], []
    for seed in sorted(by_seed):
        base_hyps, sys_hyps = by_seed[seed]
        _check(base_hyps, sys_hyps, references)
        baseline += list(base_hyps)
        system += list(sys_hyps)
        refs += list(references)
    return baseline, system, refs


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values: reject where the adjusted value is below alpha, and
    the family-wise error over all the variants stays below alpha."""
    order = sorted(p_values, key=p_values.get)
    adjusted, running = {}, 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[name]))
        adjusted[name] = running
    return adjusted


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """(mean, half-width) of Student's t interval over seeds; half-width nan below 2 values."""
    from scipy import stats  # noqa: PLC0415 - only the sweep's tables need it

    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, math.nan
    sem = float(np.std(values, ddof=1)) / math.sqrt(n)
    return mean, float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sem

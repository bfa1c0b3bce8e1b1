"""How many seeds a study needs: `transformer-sweep --plan GAP` reads a pilot sweep's finished
runs and says, before any run of the full study starts, the seeds per arm with which the
seed-aware test detects a true gap of GAP BLEU with 80% power, and what the study would cost.

From the pilot (each arm at the learning rate it is reported at):
- sigma^2: the between-run variance of test BLEU pooled over the arms with two or more runs
  (each weighted by its runs - 1), on sum(runs - 1) degrees of freedom;
- tau^2: the test-set term of the variants' comparisons with the baseline (their median),
  the part of the noise that more seeds cannot shrink. The A/A arm stays out: it is the
  baseline again, so its test-set term is about zero by design and no variant's;
- the cost of a run: the mean training + evaluation wall time of the finished runs.

The minimum detectable difference of two arms of n runs each is the power of the test the
table runs (scoring/seed_significance.py `welch_power`): Welch's t with its degrees of
freedom random, from the two arms' sample variances, and averaged over the true sigma^2 that
the pilot's estimate leaves plausible, so that a pilot of few runs does not promise too
much. The plan gives it at alpha 0.05 and at alpha / m, Holm's first step over the m
variants, which the largest of m real gaps must pass.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from transformer.common.errors import UserError
from transformer.research.sweep.runs import Run, is_finished, read_status
from transformer.research.sweep.spec import Sweep
from transformer.research.sweep.versus_baseline import arm_scores_by_variant
from transformer.scoring import seed_significance

SEED_COUNTS = (2, 3, 5, 8, 10, 15, 20, 30)


@dataclasses.dataclass(frozen=True)
class Pilot:
    seed_variance: float
    tau2: float
    run_seconds: float | None
    arms: int  # the study's arms: variants and the A/A arm
    comparisons: int  # m: the variants Holm's correction runs over
    seed_df: float = math.inf  # of seed_variance's estimate; infinite: taken as known


def read_pilot(sweep: Sweep, runs: list[Run]) -> Pilot:
    """The variances and costs of the pilot sweep's finished runs."""
    arms = arm_scores_by_variant(sweep, runs, metric="BLEU")
    scores = [a for a, _ in arms.values()]
    variance = seed_significance.pooled_seed_variance(scores)
    if variance is None:
        raise UserError(
            "--plan needs a pilot with two or more finished runs in some arm (seeds); "
            "run the sweep with at least 2 seeds first"
        )
    walls = [_wall(r) for r in runs if is_finished(r)]
    walls = [w for w in walls if w]
    taus = _test_set_variances(sweep, arms)
    return Pilot(
        seed_variance=variance,
        tau2=statistics.median(taus) if taus else 0.0,
        run_seconds=statistics.fmean(walls) if walls else None,
        arms=len(sweep.variants),
        comparisons=sum(1 for v in sweep.variants if v not in (sweep.baseline, sweep.aa_variant)),
        seed_df=seed_significance.pooled_seed_df(scores),
    )


def _test_set_variances(sweep: Sweep, arms: dict) -> list[float]:
    """tau^2 of each variant's comparison with the baseline (the A/A arm's left out)."""
    baseline = arms.get(sweep.baseline)
    if not baseline or baseline[0].runs < 2:
        return []
    return [
        seed_significance.test_set_variance(baseline[0], own)
        for name, (own, _) in arms.items()
        if name not in (sweep.baseline, sweep.aa_variant) and own.runs >= 2
    ]


def _wall(run: Run) -> float | None:
    status = read_status(run)
    parts = [status.get("train_wall_s"), status.get("eval_wall_s")]
    return sum(p for p in parts if p) or None


def plan_lines(pilot: Pilot, gap: float) -> list[str]:
    """The plan as printed: the pilot's figures, the seeds the gap needs, a table by seeds."""
    holm_alpha = seed_significance.ALPHA / max(1, pilot.comparisons)
    pooled = "pooled over arms" + (
        f", {pilot.seed_df:g} df" if math.isfinite(pilot.seed_df) else ""
    )
    lines = [
        f"pilot: between-seed sd {math.sqrt(pilot.seed_variance):.3f} BLEU ({pooled}), "
        f"test-set sd {math.sqrt(pilot.tau2):.3f} BLEU (median over the variants), "
        f"{pilot.arms} arm(s), "
        f"{pilot.comparisons} comparison(s) with the baseline"
        + (f", {pilot.run_seconds:.0f} s per run" if pilot.run_seconds else ""),
    ]
    for label, alpha in (("per comparison", seed_significance.ALPHA), ("Holm", holm_alpha)):
        lines.append(_needed_line(pilot, gap, label, alpha))
    lines += [
        "",
        f"| seeds per arm | MDD (alpha {seed_significance.ALPHA:g}) | MDD (Holm) | runs | hours |",
        "|---|---|---|---|---|",
    ]
    for n in SEED_COUNTS:
        mdd, strict = (_planned(pilot, n, alpha) for alpha in (seed_significance.ALPHA, holm_alpha))
        hours = _hours(pilot, n)
        lines.append(f"| {n} | {mdd:.2f} | {strict:.2f} | {pilot.arms * n} | {hours} |")
    return lines


def _planned(pilot: Pilot, runs: int, alpha: float) -> float:
    return seed_significance.planned_minimum_detectable(
        runs, pilot.seed_variance, pilot.tau2, alpha, pilot.seed_df
    )


def _needed_line(pilot: Pilot, gap: float, label: str, alpha: float) -> str:
    needed = seed_significance.seeds_for_gap(
        gap, pilot.seed_variance, pilot.tau2, alpha, pilot.seed_df
    )
    answer = (
        str(needed)
        if needed
        else "not reachable: the test set's noise alone exceeds it; a larger test set is needed"
    )
    power = f"{seed_significance.POWER:.0%} power"
    return f"seeds per arm to detect {gap:g} BLEU with {power} ({label}, alpha {alpha:.4f}): " + (
        answer + _cost(pilot, needed)
    )


def _cost(pilot: Pilot, seeds: int | None) -> str:
    if not seeds or not pilot.run_seconds:
        return ""
    return (
        f" ({pilot.arms * seeds} runs, {_hours(pilot, seeds)} h at the pilot's run time, "
        "plus the learning-rate search's runs on its tuning seeds)"
    )


def _hours(pilot: Pilot, seeds: int) -> str:
    if not pilot.run_seconds:
        return ""
    return f"{pilot.arms * seeds * pilot.run_seconds / 3600:.1f}"

"""A sweep's results: each run's summary (from its status.json, eval JSON and metrics.jsonl)
aggregated per variant over seeds, written as DIR/results.csv, DIR/results.md and
DIR/runs.csv beside the Sweep itself (DIR/sweep.json), with the plots DIR/valid_loss.png and
DIR/bleu.png; `readme_block` turns results.md into a README section."""

from __future__ import annotations

import math
import os
import statistics

from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.common.metrics_file import METRICS_FILE, read_metrics
from transformer.research.sweep import columns, lr_grid, plots, provenance_check
from transformer.research.sweep.runs import Run, is_finished, read_eval, read_status
from transformer.research.sweep.spec import Sweep, save_sweep, short_value
from transformer.research.sweep.versus_baseline import versus_baseline
from transformer.scoring.outliers import THRESHOLD as OUTLIER_THRESHOLD
from transformer.scoring.outliers import outlier_runs
from transformer.scoring.seed_significance import ALPHA, POWER
from transformer.scoring.significance import t_interval


def _run_summary(run: Run) -> dict:
    status = read_status(run)
    record = read_eval(run) if is_finished(run) else None
    try:
        rows = read_metrics(os.path.join(run.workdir, METRICS_FILE))
    except UserError:
        rows = []
    evals = [r for r in rows if r.get("kind") == "eval" and r.get("split", "valid") == "valid"]
    curve = [(r["step"], r["loss"]) for r in evals if "loss" in r]
    info = next((r for r in rows if r.get("kind") == "info" and "params" in r), {})
    tps = [r["tokens_per_s"] for r in rows if r.get("kind") == "train" and "tokens_per_s" in r]
    wall = status.get("train_wall_s")
    if wall is None and record is not None:
        wall = record.get("train_time_s")
    starts = provenance.read(run.workdir)
    state = "done" if record is not None else status.get("status", "not run")
    return {
        "variant": run.variant,
        "seed": run.seed,
        "role": run.role,
        "lr_scale": run.lr_scale,
        "learning_rate": run.learning_rate,
        "status": state,
        "bleu": record.get("bleu") if record else None,
        "chrf": record.get("chrf") if record else None,
        "longer_bleu": (record.get("longer") or {}).get("bleu") if record else None,
        "longer_sentences": (record.get("longer") or {}).get("sentences") if record else None,
        "best_valid_loss": min((loss for _, loss in curve if math.isfinite(loss)), default=None),
        "final_valid_loss": curve[-1][1] if curve else None,
        "test_perplexity": (record.get("reference_scores") or {}).get("perplexity")
        if record
        else None,
        "params": info.get("params"),
        "flops_per_token": info.get("flops_per_token"),
        "tokens_per_s": statistics.median(tps) if tps else None,
        "wall_s": wall,
        "eval_wall_s": status.get("eval_wall_s"),
        "machine": starts[-1].get("machine") if starts else None,
        "error": status.get("error") if state in ("failed", "diverged", "lost") else None,
        "curve": curve,
        "length_buckets": record.get("length_buckets") if record else None,
    }


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _std(values):
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) >= 2 else None


def _versus_values(comparison: dict | None) -> dict:
    """Both comparisons with the baseline, per metric: the seed-aware test's difference,
    unadjusted interval, p, Holm's p, significance and simultaneous interval, MDDs, df and
    test-set SE; sacreBLEU's pooled paired bootstrap's difference, interval and p (test-set
    noise only). None (the baseline, or no finished baseline run to meet): the row leaves
    these columns empty."""
    if comparison is None:
        return {}
    out = {"versus_baseline_lr_scale": comparison["baseline_scale"]}
    for metric in ("BLEU", "chrF"):
        key = metric.lower()
        out.update(_seed_aware_values(key, comparison, metric))
        out.update(_family_values(key, comparison["family"][metric]))
        out.update(_detectable_values(key, comparison["detectable"][metric]))
        out.update(_sentence_values(key, comparison["pooled"][metric]))
    return out


def _seed_aware_values(key: str, comparison: dict, metric: str) -> dict:
    d = comparison["seed_aware"][metric]
    if d is None:  # an arm with one run: no seed-aware test
        return {}
    return {
        f"{key}_delta": d.difference,
        f"{key}_delta_low": d.interval[0],
        f"{key}_delta_high": d.interval[1],
        f"{key}_p": d.p_value,
        f"{key}_df": d.df,
        f"{key}_test_set_se": d.test_set_se,
    }


def _family_values(key: str, decision) -> dict:
    """Holm's decision within the family (None: the A/A arm, or no seed-aware test)."""
    if decision is None:
        return {}
    return {
        f"{key}_p_holm": decision.adjusted_p,
        f"{key}_significant": decision.significant,
        f"{key}_delta_simultaneous_low": decision.interval[0],
        f"{key}_delta_simultaneous_high": decision.interval[1],
    }


def _detectable_values(key: str, detectable) -> dict:
    if detectable is None:
        return {}
    return {
        f"{key}_mdd": detectable.per_comparison,
        f"{key}_mdd_holm": detectable.holm,
        f"{key}_pooled_seed_sd": detectable.pooled_seed_sd,
    }


def _sentence_values(key: str, d) -> dict:
    return {
        f"{key}_sentence_delta": d.difference,
        f"{key}_sentence_delta_low": d.interval[0],
        f"{key}_sentence_delta_high": d.interval[1],
        f"{key}_sentence_p": d.p_value,
    }


def _per_seed_versus(per_run: list[dict], comparisons: dict) -> None:
    """Each run's own paired difference to the baseline (runs at a learning rate that was
    not chosen were not compared: None)."""
    for r in per_run:
        found = comparisons.get(r["variant"], {}).get("per_seed", {}).get(r["seed"])
        found = found if r["reported"] else None
        r["bleu_delta"] = found["BLEU"].difference if found else None
        r["bleu_p"] = found["BLEU"].p_value if found else None


def _seed_interval(values) -> float | None:
    values = [v for v in values if v is not None]
    half = t_interval(values)[1] if values else math.nan
    return None if math.isnan(half) else half


def _lr_columns(choice: lr_grid.Choice | None, run: Run | None) -> dict:
    if choice is None:
        return {
            "learning_rate": run.learning_rate if run else None,
            "lr_scale": 1.0,
            "lr_sensitivity": None,
            "lr_grid_complete": None,
            "lr_grid_edge": None,
        }
    return {
        "learning_rate": choice.learning_rate,
        "lr_scale": choice.scale,
        "lr_sensitivity": choice.sensitivity,
        "lr_grid_complete": choice.complete,
        "lr_grid_edge": choice.edge,
    }


def _reference_scales(sweep: Sweep, choices: dict[str, lr_grid.Choice]) -> dict[str, float]:
    """The baseline's learning-rate scale each variant is compared with: the baseline's
    chosen point for a variant whose own search has ended (best against best), 1.0 (the
    configured rate on both sides) for every other."""
    base = choices.get(sweep.baseline)
    best = base.scale if base is not None else 1.0
    return {
        name: best if name in choices and choices[name].complete else 1.0 for name in sweep.variants
    }


def aggregate(sweep: Sweep, runs: list[Run]) -> tuple[list[dict], list[dict]]:
    """(one row per variant, over its seeds at its chosen learning rate; one summary per
    run, every grid point included)."""
    per_run = [_run_summary(r) for r in runs]
    choices = lr_grid.choose(sweep.lr_grid, per_run)
    scales = {name: c.scale for name, c in choices.items()}  # variants without a grid: 1.0
    for r in per_run:  # the compared runs at each variant's chosen rate make its table row
        chosen = r["lr_scale"] == scales.get(r["variant"], 1.0)
        r["reported"] = chosen and r["role"] == "compared"
    comparisons = versus_baseline(sweep, runs, scales, _reference_scales(sweep, choices))
    _per_seed_versus(per_run, comparisons)
    flagged = _flag_outliers(per_run)
    table = []
    for name in sweep.variants:
        rows = [r for r in per_run if r["variant"] == name and r["reported"]]
        if rows:
            plain = next((r for r in runs if r.variant == name and r.lr_scale == 1), None)
            values = {
                **_variant_values(sweep, name, rows),
                **_versus_values(comparisons.get(name)),
                **_lr_columns(choices.get(name), plain),
                "outliers": "; ".join(flagged.get(name, [])) or None,
            }
            table.append(columns.complete(columns.TABLE, values))
    return table, [columns.complete(columns.RUNS, r) for r in per_run]


# Per-run figures whose outliers the table names (scoring/outliers.py), with their labels.
OUTLIER_METRICS = {"bleu": "BLEU", "final_valid_loss": "final valid loss"}


def _flag_outliers(per_run: list[dict]) -> dict[str, list[str]]:
    """{variant: ['seed 3: BLEU 21.10, 5.2 sigma below the others' median 24.35', ...]} over the
    finished runs each row reports; each flagged run's `outlier` field says the same."""
    done = [r for r in per_run if r["reported"] and r["status"] == "done"]
    flagged: dict[str, list[str]] = {}
    for metric, label in OUTLIER_METRICS.items():
        arms: dict[str, dict[str, float]] = {}
        for r in done:
            arms.setdefault(r["variant"], {})[f"seed {r['seed']}"] = r[metric]
        for o in outlier_runs(arms):
            side = "above" if o.sigmas > 0 else "below"
            text = (
                f"{o.run}: {label} {o.value:.2f}, {abs(o.sigmas):.1f} sigma {side} the "
                f"others' median {o.others_median:.2f}"
            )
            flagged.setdefault(o.arm, []).append(text)
            row = next(r for r in done if r["variant"] == o.arm and f"seed {r['seed']}" == o.run)
            row["outlier"] = "; ".join(filter(None, [row.get("outlier"), text]))
    return flagged


def _variant_values(sweep: Sweep, name: str, rows: list[dict]) -> dict:
    """A variant's own figures over its reported runs (means over the finished seeds)."""
    done = [r for r in rows if r["status"] == "done"]
    overrides = sweep.variants[name].items()
    return {
        "variant": name,
        "overrides": " ".join(f"{k}={short_value(v)}" for k, v in overrides),
        "runs": len(rows),
        "done": len(done),
        "bleu_mean": _mean(r["bleu"] for r in done),
        "bleu_std": _std(r["bleu"] for r in done),
        "bleu_tci": _seed_interval(r["bleu"] for r in done),
        "chrf_mean": _mean(r["chrf"] for r in done),
        "longer_bleu_mean": _mean(r["longer_bleu"] for r in done),
        "longer_bleu_std": _std(r["longer_bleu"] for r in done),
        "longer_sentences": next((r["longer_sentences"] for r in done), None),
        "best_valid_loss": _mean(r["best_valid_loss"] for r in done),
        "test_perplexity": _mean(r["test_perplexity"] for r in done),
        "params": _first(r["params"] for r in rows),
        "flops_per_token": _first(r["flops_per_token"] for r in rows),
        "tokens_per_s": _mean(r["tokens_per_s"] for r in done),
        "wall_s": _mean(r["wall_s"] for r in done),
        "diverged": sum(r["status"] == "diverged" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
    }


def _first(values):
    return next((v for v in values if v is not None), None)


def write_report(
    sweep: Sweep, runs: list[Run], workdir: str, *, allow_mixed: bool = False
) -> list[dict]:
    """Writes the tables and plots into `workdir`; returns the per-variant rows. An arm whose
    runs ran different code or data is refused unless `allow_mixed` (provenance_check)."""
    mixed = provenance_check.check(runs, allow_mixed)
    table, per_run = aggregate(sweep, runs)
    os.makedirs(workdir, exist_ok=True)
    save_sweep(sweep, workdir)
    columns.write_csv(os.path.join(workdir, "results.csv"), columns.TABLE, table)
    columns.write_csv(os.path.join(workdir, "runs.csv"), columns.RUNS, per_run)
    reported = [r for r in per_run if r["reported"]]
    choices = lr_grid.choose(sweep.lr_grid, per_run)
    _write_markdown(sweep, table, per_run, choices, workdir, mixed)
    plots.plot_valid_loss(sweep, reported, workdir)
    plots.plot_bleu(sweep, table, workdir)
    plots.plot_length_curves(sweep, reported, workdir)
    if choices:
        grid_csv = os.path.join(workdir, "lr_grid.csv")
        columns.write_csv(grid_csv, columns.LR_GRID, lr_grid.csv_rows(choices))
        plots.plot_lr_curves(choices, workdir)
    return table


def _markdown_intro(sweep: Sweep) -> list[str]:
    """The title and what every run shares: base config, seeds, evaluation, overrides."""
    n_seeds = len(sweep.seeds)
    lines = [
        f"# Sweep results: {os.path.basename(sweep.path)}",
        "",
        f"Base config `{sweep.base}`, {len(sweep.variants)} variant(s) x {n_seeds} seed(s) "
        f"{sweep.seeds}; {sweep.eval_split} BLEU/chrF from eval.py"
        + (
            " with " + ", ".join(f"`{k}={short_value(v)}`" for k, v in sweep.eval_overrides.items())
            if sweep.eval_overrides
            else ""
        )
        + ".",
    ]
    if sweep.overrides:
        shown = ", ".join(f"`{k}={short_value(v)}`" for k, v in sweep.overrides.items())
        lines += ["", f"Every run: {shown}."]
    return lines


def _markdown_notes(per_run: list[dict], mixed: list[str]) -> list[str]:
    """Arms pooled across code or data, failed and unfinished runs, then what the columns
    and plots mean."""
    lines = []
    if mixed:
        lines += ["", f"Mixed provenance, pooled by {provenance_check.ALLOW_FLAG}:", ""]
        lines += [f"- {description}" for description in mixed]
    problems = [r for r in per_run if r["status"] in ("failed", "diverged")]
    if problems:
        lines += ["", "Failed or diverged runs:", ""]
        for r in problems:
            lines.append(f"- {r['variant']} seed {r['seed']}: {r['status']}: {r['error'] or ''}")
    if any(r.get("outlier") for r in per_run):
        lines += ["", OUTLIER_NOTE]
    unfinished = [r for r in per_run if r["status"] not in ENDED]
    if unfinished:
        lines += ["", f"Not finished: {len(unfinished)} run(s) (rerun the sweep to resume)."]
    lines += compute_lines(per_run)
    lines += [
        "",
        COLUMNS_NOTE,
        "",
        "Plots: `valid_loss.png` (validation loss, mean over seeds), `bleu.png` "
        "(BLEU, error bars = std over seeds), `length_bleu.png` (BLEU per source-length "
        "bucket, mean over seeds). Per-run rows: `runs.csv`.",
        "",
    ]
    return lines


ENDED = ("done", "failed", "diverged")  # a run's states once the sweep is through with it


def compute_lines(per_run: list[dict]) -> list[str]:
    """What the study cost: the ended runs' training + evaluation wall time, summed per
    machine (from each run's provenance); the runs the table reports and the others (the
    learning-rate search's) counted."""
    ended = [r for r in per_run if r["status"] in ENDED]
    if not ended:
        return []
    seconds: dict[str, float] = {}
    for r in ended:
        machine = r["machine"] or "a machine not recorded"
        seconds[machine] = seconds.get(machine, 0.0) + (r["wall_s"] or 0) + (r["eval_wall_s"] or 0)
    reported = sum(bool(r["reported"]) for r in ended)
    spent = "; ".join(f"{s / 3600:.1f} run-hours on {m}" for m, s in sorted(seconds.items()))
    return [
        "",
        f"Compute: {len(ended)} ended run(s) ({reported} in the table, {len(ended) - reported} "
        f"only searching learning rates): {spent} (each run's training and evaluation wall "
        "time, summed; runs that ran side by side each count in full).",
    ]


def _write_markdown(sweep: Sweep, table, per_run, choices, workdir: str, mixed) -> None:
    context = columns.Context(sweep=sweep, table=table)
    lines = _markdown_intro(sweep) + [""] + columns.markdown(columns.TABLE, table, context)
    lines += lr_grid.markdown(choices) + _markdown_notes(per_run, mixed)
    lines += [f"{lr_grid.NOTE} {lr_grid.tuning_note(sweep.lr_grid)}" if choices else UNTUNED_NOTE]
    lines += [""]
    if sweep.eval_score_references:
        lines += [PERPLEXITY_NOTE.format(split=sweep.eval_split), ""]
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write("\n".join(lines))


_CONFIDENCE = f"{1 - ALPHA:.0%}"
COLUMNS_NOTE = (
    f"BLEU ± is the half-width of the {_CONFIDENCE} Student t interval over seeds; seed sd is "
    "the between-run standard deviation of test BLEU (none for one seed). ΔBLEU vs baseline, "
    "seeds + test set, is the seed-aware test (scoring/seed_significance.py): the difference "
    f"of the arms' mean run BLEU with its unadjusted {_CONFIDENCE} interval (this comparison "
    "alone, no allowance for the others) from Welch's t over the runs plus the test set's own "
    "sampling noise. p is its two-sided p-value; in brackets, Holm's adjusted p of the claim "
    "that the gap has the estimate's sign. The family is the m variants' BLEU comparisons "
    "(Holm's procedure over their 2m one-sided hypotheses, m in the header); chrF's, in "
    "results.csv, are a family of their own, so BLEU's and chrF's stars read together may "
    f"hold a false claim with probability up to 2 x {ALPHA:g}. * marks an adjusted p < "
    f"{ALPHA:g}: the sign is claimed, and the family's claims are all right together with "
    f"probability at least {_CONFIDENCE}. The simultaneous {_CONFIDENCE} CI (Holm) are the "
    "intervals compatible with those claims (Strassburger & Bretz 2008): the family's "
    f"intervals cover all their true gaps together with probability at least {_CONFIDENCE}, "
    "and one leaves out 0 exactly where * is; a starred gap's is open at 0 and bounds it on "
    "the far side only. The A/A arm (if any) is the baseline again under seeds disjoint from "
    "the sweep's: it is outside Holm's family, and a valid test gives it p < "
    f"{ALPHA:g} {ALPHA:.0%} of the time. '1 seed': an arm with one run has no seed-aware test. "
    f"MDD {POWER:.0%} is the true gap that comparison detects with probability {POWER:g}: at "
    f"p < {ALPHA:g} (where the unadjusted interval leaves out 0), then starred whatever the "
    f"other comparisons show (Holm's first step, p < {ALPHA:g} / m). Both assume the two arms' "
    "runs vary like the study's: the between-run variance is pooled over every compared arm "
    "(each arm's sample variance weighted by its runs - 1; its sd in the header), the "
    "uncertainty of that estimate is averaged in, and the comparison's own test-set term "
    "added. ΔBLEU, test set only, is sacreBLEU's paired bootstrap (1,000 resamples, seed "
    "12345) on the paired runs' hypotheses concatenated, with its p: it keeps the runs fixed, "
    "so it measures the test set's sampling noise only and is no test of the variant. Params "
    "and MFLOPs/token (analytic forward FLOPs per target token at the training batch's shape) "
    "are the training log's. Best valid loss is the lowest validation loss (NLL) of each run, "
    "averaged over seeds; train tok/s is the median of the logged training rows (source + "
    "target tokens), averaged over seeds."
)
OUTLIER_NOTE = (
    "Outlier runs: a reported run whose test BLEU or final validation loss lies more than "
    f"{OUTLIER_THRESHOLD:g} sigma from the median of its arm's other runs, sigma estimated "
    "robustly from every run of the study (scoring/outliers.py); look at its curves before "
    "trusting its arm's mean (runs.csv's `outlier` says the same per run)."
)
UNTUNED_NOTE = (
    "lr: no lr_grid, so every variant runs untuned at its configured learning rate and "
    "meets the baseline there."
)
PERPLEXITY_NOTE = (
    "{split} perplexity: exp of the mean per-token NLL of the references under the model "
    "(eval.py --score_references, forced decoding), mean over seeds."
)


def readme_block(workdir: str, command: str) -> str:
    """DIR/results.md for a README section: its title demoted to bold, the command first."""
    with open(os.path.join(workdir, "results.md")) as f:
        lines = f.read().splitlines()
    if lines and lines[0].startswith("# "):
        lines[0] = f"**{lines[0][2:]}** (rendered by `{command}`)"
    return "\n".join(lines) + "\n"

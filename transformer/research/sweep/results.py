"""A sweep's results: each run's summary (from its status.json, eval JSON and metrics.jsonl)
aggregated per variant over seeds, written as DIR/results.csv, DIR/results.md and
DIR/runs.csv, with the plots DIR/valid_loss.png and DIR/bleu.png; `readme_block` turns
results.md into a README section."""

from __future__ import annotations

import csv
import math
import os
import statistics

from transformer.common.errors import UserError
from transformer.research.sweep import lr_grid, plots
from transformer.research.sweep.runs import Run, is_finished, read_eval, read_status
from transformer.research.sweep.spec import Sweep, short_value
from transformer.research.sweep.versus_baseline import versus_baseline
from transformer.scoring.significance import t_interval

VERSUS = [f"{m}_{k}" for m in ("bleu", "chrf")
          for k in ("delta", "delta_low", "delta_high", "p", "p_holm", "significant")]  # fmt: skip
TABLE_COLUMNS = ["variant", "overrides", "runs", "done", "bleu_mean", "bleu_std", "bleu_tci",
                 "chrf_mean", *VERSUS, "versus_baseline_lr_scale", "longer_bleu_mean",
                 "longer_bleu_std", "longer_sentences",
                 "best_valid_loss", "test_perplexity", "learning_rate", "lr_scale",
                 "lr_sensitivity", "lr_grid_complete", "lr_grid_edge", "params", "flops_per_token",
                 "tokens_per_s", "wall_s", "diverged", "failed"]  # fmt: skip
RUN_COLUMNS = ["variant", "seed", "lr_scale", "learning_rate", "reported", "status", "bleu",
               "chrf", "bleu_delta", "bleu_p", "longer_bleu", "best_valid_loss",
               "final_valid_loss", "test_perplexity", "params", "flops_per_token",
               "tokens_per_s", "wall_s", "error"]  # fmt: skip


def _run_summary(run: Run) -> dict:
    from transformer.training.logger import read_metrics

    status = read_status(run)
    record = read_eval(run) if is_finished(run) else None
    try:
        rows = read_metrics(os.path.join(run.workdir, "metrics.jsonl"))
    except UserError:
        rows = []
    evals = [r for r in rows if r.get("kind") == "eval" and r.get("split", "valid") == "valid"]
    curve = [(r["step"], r["loss"]) for r in evals if "loss" in r]
    info = next((r for r in rows if r.get("kind") == "info" and "params" in r), {})
    tps = [r["tokens_per_s"] for r in rows if r.get("kind") == "train" and "tokens_per_s" in r]
    wall = status.get("train_wall_s")
    if wall is None and record is not None:
        wall = record.get("train_time_s")
    state = "done" if record is not None else status.get("status", "not run")
    return {
        "variant": run.variant,
        "seed": run.seed,
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
        "error": status.get("error") if state in ("failed", "diverged") else None,
        "curve": curve,
        "length_buckets": record.get("length_buckets") if record else None,
    }


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _std(values):
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) >= 2 else None


def _versus_columns(comparison: dict | None) -> dict:
    """The table's pooled difference to the baseline, its interval and (Holm) p-values."""
    if comparison is None:
        return dict.fromkeys([*VERSUS, "versus_baseline_lr_scale"])
    out = {"versus_baseline_lr_scale": comparison["baseline_scale"]}
    for metric in ("BLEU", "chrF"):
        d, key = comparison["pooled"][metric], metric.lower()
        out.update({f"{key}_delta": d.difference, f"{key}_delta_low": d.interval[0],
                    f"{key}_delta_high": d.interval[1], f"{key}_p": d.p_value,
                    f"{key}_p_holm": comparison["holm"][metric],
                    f"{key}_significant": comparison["significant"][metric]})  # fmt: skip
    return out


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
        return {"learning_rate": run.learning_rate if run else None, "lr_scale": 1.0,
                "lr_sensitivity": None, "lr_grid_complete": None, "lr_grid_edge": None}  # fmt: skip
    return {"learning_rate": choice.learning_rate, "lr_scale": choice.scale,
            "lr_sensitivity": choice.sensitivity, "lr_grid_complete": choice.complete,
            "lr_grid_edge": choice.edge}  # fmt: skip


def _reference_scales(sweep: Sweep, choices: dict[str, lr_grid.Choice]) -> dict[str, float]:
    """The baseline's learning-rate scale each variant is compared with: the baseline's
    chosen point for a variant whose own grid has finished (best against best), 1.0 (the
    configured rate on both sides) for every other."""
    base = choices.get(sweep.baseline)
    best = base.scale if base is not None else 1.0
    return {name: best if name in choices and choices[name].complete else 1.0
            for name in sweep.variants}  # fmt: skip


def aggregate(sweep: Sweep, runs: list[Run]) -> tuple[list[dict], list[dict]]:
    """(one row per variant, over its seeds at its chosen learning rate; one summary per
    run, every grid point included)."""
    per_run = [_run_summary(r) for r in runs]
    choices = lr_grid.choose(sweep.lr_grid, per_run)
    scales = {name: c.scale for name, c in choices.items()}  # variants without a grid: 1.0

    def chosen(variant: str, scale: float) -> bool:
        return scale == scales.get(variant, 1.0)

    for r in per_run:  # the runs at each variant's chosen learning rate make its table row
        r["reported"] = chosen(r["variant"], r["lr_scale"])
    comparisons = versus_baseline(sweep, runs, scales, _reference_scales(sweep, choices))
    _per_seed_versus(per_run, comparisons)
    table = []
    for name in sweep.variants:
        rs = [r for r in per_run if r["variant"] == name and chosen(name, r["lr_scale"])]
        if not rs:
            continue
        done = [r for r in rs if r["status"] == "done"]
        table.append({
            "variant": name,
            "overrides": " ".join(f"{k}={short_value(v)}" for k, v in sweep.variants[name].items()),
            "runs": len(rs),
            "done": len(done),
            "bleu_mean": _mean(r["bleu"] for r in done),
            "bleu_std": _std(r["bleu"] for r in done),
            "bleu_tci": _seed_interval(r["bleu"] for r in done),
            "chrf_mean": _mean(r["chrf"] for r in done),
            **_versus_columns(comparisons.get(name)),
            "longer_bleu_mean": _mean(r["longer_bleu"] for r in done),
            "longer_bleu_std": _std(r["longer_bleu"] for r in done),
            "longer_sentences": next((r["longer_sentences"] for r in done), None),
            "best_valid_loss": _mean(r["best_valid_loss"] for r in done),
            "test_perplexity": _mean(r["test_perplexity"] for r in done),
            **_lr_columns(choices.get(name),
                          next((r for r in runs if r.variant == name and r.lr_scale == 1), None)),
            "params": next((r["params"] for r in rs if r["params"] is not None), None),
            "flops_per_token": next(
                (r["flops_per_token"] for r in rs if r["flops_per_token"] is not None), None
            ),
            "tokens_per_s": _mean(r["tokens_per_s"] for r in done),
            "wall_s": _mean(r["wall_s"] for r in done),
            "diverged": sum(r["status"] == "diverged" for r in rs),
            "failed": sum(r["status"] == "failed" for r in rs),
        })  # fmt: skip
    return table, per_run


def _fmt(value, spec: str = "{:.2f}") -> str:
    if value is None:
        return ""
    return spec.format(value)


def _write_csv(path: str, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row[k] is None else row[k] for k in columns})


def write_report(sweep: Sweep, runs: list[Run], workdir: str) -> list[dict]:
    """Writes the tables and plots into `workdir`; returns the per-variant rows."""
    table, per_run = aggregate(sweep, runs)
    os.makedirs(workdir, exist_ok=True)
    _write_csv(os.path.join(workdir, "results.csv"), TABLE_COLUMNS, table)
    _write_csv(os.path.join(workdir, "runs.csv"), RUN_COLUMNS, per_run)
    reported = [r for r in per_run if r["reported"]]
    choices = lr_grid.choose(sweep.lr_grid, per_run)
    _write_markdown(sweep, table, per_run, choices, workdir)
    plots.plot_valid_loss(sweep, reported, workdir)
    plots.plot_bleu(sweep, table, workdir)
    plots.plot_length_curves(sweep, reported, workdir)
    if choices:
        _write_csv(os.path.join(workdir, "lr_grid.csv"), lr_grid.CSV_COLUMNS,
                   lr_grid.csv_rows(choices))  # fmt: skip
        plots.plot_lr_curves(choices, workdir)
    return table


def _mean_std(mean, std) -> str:
    text = _fmt(mean)
    if std is not None:
        text += f" ± {std:.2f}"
    return text


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


def _markdown_table(sweep: Sweep, table: list[dict]) -> list[str]:
    """One row per variant; a long-sentence BLEU column when the sweep scores one."""
    longer = sweep.eval_longer_than is not None
    longer_head = ""
    if longer:
        over = sweep.eval_longer_than
        over = "data.max_source_len" if over == "train" else over
        n = next((r["longer_sentences"] for r in table if r["longer_sentences"] is not None), None)
        longer_head = f" BLEU, source > {over} tokens" + (f" ({n} sent.)" if n else "") + " |"
    grid, ppl = bool(sweep.lr_grid), sweep.eval_score_references
    ppl_head = f" {sweep.eval_split} perplexity |" if ppl else ""
    lr_head = " lr (best on valid) | valid-loss spread over lr grid |" if grid else ""
    lines = [
        "",
        "| variant | overrides | BLEU (mean ± 95% t) | chrF | ΔBLEU vs baseline [95% CI] | "
        "p (Holm) |"
        + longer_head
        + " best valid loss |"
        + ppl_head
        + lr_head
        + " params | MFLOPs/token | train tok/s | wall s/run | done | diverged | failed |",
        "|---|---|---|---|---|---|"
        + ("---|" if longer else "")
        + ("---|" if ppl else "")
        + ("---|---|" if grid else "")
        + "---|---|---|---|---|---|---|---|",
    ]
    baseline_scale = next((r["lr_scale"] for r in table if r["variant"] == sweep.baseline), 1.0)
    for row in table:
        bleu = _mean_std(row["bleu_mean"], row["bleu_tci"])
        delta, p_cell = _versus_cells(row, sweep.baseline, baseline_scale)
        longer_cell = ""
        if longer:
            longer_cell = f" {_mean_std(row['longer_bleu_mean'], row['longer_bleu_std'])} |"
        lines.append(
            f"| {row['variant']} | {row['overrides'] or '(base)'} | {bleu} | "
            f"{_fmt(row['chrf_mean'])} | {delta} | {p_cell} |{longer_cell} "
            f"{_fmt(row['best_valid_loss'], '{:.3f}')} |"
            f"{' ' + _fmt(row['test_perplexity']) + ' |' if ppl else ''}"
            f"{_lr_cells(row, sweep) if grid else ''} "
            f"{_fmt(row['params'], '{:,}')} | {_mflops(row['flops_per_token'])} | "
            f"{_fmt(row['tokens_per_s'], '{:,.0f}')} | "
            f"{_fmt(row['wall_s'], '{:.0f}')} | {row['done']}/{row['runs']} | "
            f"{row['diverged']} | {row['failed']} |"
        )
    return lines


def _lr_cells(row: dict, sweep: Sweep) -> str:
    """' 0.004 (x2, top of grid) | 0.153 |': the chosen learning rate (flagged where it is
    the grid's largest or smallest) and its grid's sensitivity."""
    lr = _fmt(row["learning_rate"], "{:g}")
    if row["variant"] not in sweep.lr_grid:
        return f" {lr} | |"
    if not row["lr_grid_complete"]:
        return f" {lr} (x1, grid incomplete) | |"
    spread = _fmt(row["lr_sensitivity"], "{:.3f}")
    edge = f", {row['lr_grid_edge']} of grid" if row["lr_grid_edge"] else ""
    return f" {lr} ({lr_grid.scale_label(row['lr_scale'])}{edge}) | {spread} |"


def _mflops(flops: float | None) -> str:
    return "" if flops is None else f"{flops / 1e6:.2f}"


def _versus_cells(row: dict, baseline: str, baseline_scale: float) -> tuple[str, str]:
    """'+1.07 [+0.21, +1.90]' and '0.004 (0.012) *' (* = significant after Holm); the
    difference names the baseline's learning-rate scale where it is not the one the
    baseline's own row shows ('+1.07 [+0.21, +1.90] vs x1')."""
    if row["variant"] == baseline:
        return "baseline", ""
    if row["bleu_delta"] is None:
        return "", ""
    delta = (f"{row['bleu_delta']:+.2f} [{row['bleu_delta_low']:+.2f}, "
             f"{row['bleu_delta_high']:+.2f}]")  # fmt: skip
    if row["versus_baseline_lr_scale"] != baseline_scale:
        delta += f" vs {lr_grid.scale_label(row['versus_baseline_lr_scale'])}"
    star = " *" if row["bleu_significant"] else ""
    return delta, f"{row['bleu_p']:.3f} ({row['bleu_p_holm']:.3f}){star}"


def _markdown_notes(per_run: list[dict]) -> list[str]:
    """Failed and unfinished runs, then what the columns and plots mean."""
    lines = []
    problems = [r for r in per_run if r["status"] in ("failed", "diverged")]
    if problems:
        lines += ["", "Failed or diverged runs:", ""]
        for r in problems:
            lines.append(f"- {r['variant']} seed {r['seed']}: {r['status']}: {r['error'] or ''}")
    unfinished = [r for r in per_run if r["status"] not in ("done", "failed", "diverged")]
    if unfinished:
        lines += ["", f"Not finished: {len(unfinished)} run(s) (rerun the sweep to resume)."]
    lines += [
        "",
        "BLEU ± is the half-width of the 95% Student t interval over seeds (none for one "
        "seed). ΔBLEU is the variant minus the baseline on the test set with the hypotheses of "
        "matching seeds concatenated, its interval the 2.5-97.5th percentiles of sacreBLEU's "
        "paired bootstrap (1,000 resamples, seed 12345) and p its p-value, in brackets after "
        "Holm's correction over the variants; * marks p < 0.05 after the correction "
        "(chrF's in results.csv). The interval is percentile-based while sacreBLEU's p "
        "comes from its own centred test, so at the margin an interval touching 0 can sit "
        "beside p < 0.05. Params and MFLOPs/token (analytic forward FLOPs per target "
        "token at the training batch's shape) are the training log's. Best valid loss is the "
        "lowest validation loss (NLL) of each run, averaged over seeds; train tok/s is the "
        "median of the logged training rows (source + target tokens), averaged over seeds.",
        "",
        "Plots: `valid_loss.png` (validation loss, mean over seeds), `bleu.png` "
        "(BLEU, error bars = std over seeds), `length_bleu.png` (BLEU per source-length "
        "bucket, mean over seeds). Per-run rows: `runs.csv`.",
        "",
    ]
    return lines


def _write_markdown(sweep: Sweep, table, per_run, choices, workdir: str) -> None:
    lines = _markdown_intro(sweep) + _markdown_table(sweep, table)
    lines += lr_grid.markdown(choices) + _markdown_notes(per_run)
    if choices:
        lines += [lr_grid.NOTE, ""]
    if sweep.eval_score_references:
        lines += [f"{sweep.eval_split} perplexity: exp of the mean per-token NLL of the "
                  "references under the model (eval.py --score_references, forced decoding), "
                  "mean over seeds.", ""]  # fmt: skip
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write("\n".join(lines))


def readme_block(workdir: str, command: str) -> str:
    """DIR/results.md for a README section: its title demoted to bold, the command first."""
    with open(os.path.join(workdir, "results.md")) as f:
        lines = f.read().splitlines()
    if lines and lines[0].startswith("# "):
        lines[0] = f"**{lines[0][2:]}** (rendered by `{command}`)"
    return "\n".join(lines) + "\n"

"""The sweep's plots: validation loss curves, BLEU per variant and BLEU per source-length
bucket, written as PNGs beside results.md."""

from __future__ import annotations

import os
import warnings

from transformer.research.sweep.spec import Sweep
from transformer.scoring.length_buckets import bucket_label


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend (sweeps run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_COLOURS = 10  # matplotlib's default cycle, C0-C9
_LINESTYLES = ("-", "--", ":")
_MARKERS = ("o", "s", "^")


def line_style(index: int) -> dict:
    """Colour, line style and marker of the index-th variant's line: past the ten colours
    the style and marker change, so that no two of up to 30 variants look alike."""
    turn = index // _COLOURS % len(_LINESTYLES)
    return {
        "color": f"C{index % _COLOURS}",
        "linestyle": _LINESTYLES[turn],
        "marker": _MARKERS[turn],
    }


def _save(plt, fig, ax, path: str) -> None:
    """Grid, a legend when there are labelled lines, and the PNG at path."""
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_valid_loss(sweep: Sweep, per_run: list[dict], workdir: str) -> None:
    """DIR/valid_loss.png: each variant's validation loss curve, mean over its seeds."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, name in enumerate(sweep.variants):
        curves = [dict(r["curve"]) for r in per_run if r["variant"] == name and r["curve"]]
        if not curves:
            continue
        steps = sorted(set().union(*curves))
        mean = [np.nanmean([c.get(s, np.nan) for c in curves]) for s in steps]
        ax.plot(steps, mean, markersize=3, label=name, **line_style(i))
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (NLL)")
    ax.set_title("Validation loss (mean over seeds)")
    _save(plt, fig, ax, os.path.join(workdir, "valid_loss.png"))


def plot_bleu(sweep: Sweep, table: list[dict], workdir: str) -> None:
    """DIR/bleu.png: a bar per variant, its mean BLEU with the std over seeds as error bar."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(table) + 2), 5))
    names = [row["variant"] for row in table]
    means = [row["bleu_mean"] if row["bleu_mean"] is not None else np.nan for row in table]
    stds = [row["bleu_std"] or 0.0 for row in table]
    x = np.arange(len(names))
    ax.bar(x, means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{sweep.eval_split} BLEU")
    ax.set_title(f"BLEU per variant ({len(sweep.seeds)} seed(s), error bars = std)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "bleu.png"), dpi=100)
    plt.close(fig)


def plot_length_curves(sweep: Sweep, per_run: list[dict], workdir: str) -> None:
    """DIR/length_bleu.png: each variant's BLEU per source-length bucket (eval.py's
    length_buckets), mean over its seeds; empty buckets are left out."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    labels: list[str] = []
    for i, name in enumerate(sweep.variants):
        runs = [
            r["length_buckets"] for r in per_run if r["variant"] == name and r["length_buckets"]
        ]
        if not runs:
            continue
        labels = [bucket_label(b) for b in runs[0]]
        bleu = [[b["bleu"] if b["bleu"] is not None else np.nan for b in r] for r in runs]
        with warnings.catch_warnings():  # a bucket empty in every seed stays a gap
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(bleu, axis=0)
        ax.plot(range(len(labels)), mean, label=name, **line_style(i))
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("source tokens (EOS included)")
    ax.set_ylabel(f"{sweep.eval_split} BLEU")
    ax.set_title("BLEU by source length (mean over seeds)")
    _save(plt, fig, ax, os.path.join(workdir, "length_bleu.png"))


def plot_lr_curves(choices, workdir: str) -> None:
    """DIR/lr_valid_loss.png: final validation loss against learning rate (log scale) for
    each variant of the learning-rate grid, the chosen point ringed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, choice in choices.items():
        points = [p for p in choice.points if p.valid_loss_mean is not None and not p.diverged]
        if not points:
            continue
        (line,) = ax.plot(
            [p.learning_rate for p in points],
            [p.valid_loss_mean for p in points],
            marker="o",
            label=name,
        )
        best = [p for p in points if choice.complete and p.scale == choice.scale]
        for p in best:
            ax.plot(
                [p.learning_rate],
                [p.valid_loss_mean],
                marker="o",
                markersize=12,
                markerfacecolor="none",
                color=line.get_color(),
            )
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss (NLL), mean over seeds")
    ax.set_title("Learning-rate grid (ring: chosen on validation)")
    _save(plt, fig, ax, os.path.join(workdir, "lr_valid_loss.png"))

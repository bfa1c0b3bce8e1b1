"""Plots of the attention analysis: per-sentence heatmaps and per-head statistic grids.

`plot_sentence` draws one PNG per (kind, layer) with a panel per head, SentencePiece pieces
on the axes (rows = queries, columns = keys), and an overview of layers x kinds averaged over
heads; `plot_statistics` draws a layers x heads grid per kind for each statistic. Matplotlib
is imported on first use with the Agg backend, so nothing needs a display.
"""

from __future__ import annotations

import os

import numpy as np

from transformer.research.attention_stats import KINDS, STATS


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def token_pieces(tok, ids) -> list[str]:
    return [tok.id_to_piece(int(i)) for i in ids]


def _heatmap(ax, matrix, rows, cols, title, *, fontsize=7):
    ax.imshow(
        matrix, cmap="viridis", vmin=0.0, vmax=max(float(np.max(matrix)), 1e-6), aspect="auto"
    )
    ax.set_title(title, fontsize=fontsize + 2)
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(rows)), rows, fontsize=fontsize)


def plot_sentence(out_dir, attention, src_pieces, tgt_in_pieces, num_heads) -> list[str]:
    """One PNG per (layer, kind) with a panel per head, and an overview; returns paths.

    attention: kind -> [layers] of [H, T, S] (one sentence); *_pieces label the axes.
    """
    os.makedirs(out_dir, exist_ok=True)
    axes_labels = {  # kind -> (query labels, key labels)
        "encoder_self": (src_pieces, src_pieces),
        "decoder_self": (tgt_in_pieces, tgt_in_pieces),
        "cross": (tgt_in_pieces, src_pieces),
    }
    cell = max(2.5, 0.18 * max(len(src_pieces), len(tgt_in_pieces)) + 1.0)  # inches per panel
    paths = []
    for kind in KINDS:
        for layer, probs in enumerate(attention[kind]):
            path = os.path.join(out_dir, f"{kind}_layer{layer}.png")
            title = f"{kind} layer {layer} (rows: queries, columns: keys)"
            _plot_heads(path, probs, axes_labels[kind], title, num_heads, cell)
            paths.append(path)
    path = os.path.join(out_dir, "overview.png")
    _plot_overview(path, attention, axes_labels, cell)
    paths.append(path)
    return paths


def _plot_heads(path, probs, labels, title, num_heads, cell) -> None:
    """probs [H, T, S]: a grid of at most 4 panels a row, one per head."""
    plt = _plt()
    cols = min(num_heads, 4)
    rows = -(-num_heads // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cell * cols, cell * rows), squeeze=False)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= num_heads:
            ax.axis("off")
            continue
        _heatmap(ax, probs[h], labels[0], labels[1], f"head {h}")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _plot_overview(path, attention, axes_labels, cell) -> None:
    """Layers x kinds, each panel the mean over heads."""
    plt = _plt()
    layers = max(len(attention[k]) for k in KINDS)
    fig, axes = plt.subplots(layers, 3, figsize=(cell * 3, cell * layers), squeeze=False)
    for c, kind in enumerate(KINDS):
        for layer in range(layers):
            ax = axes[layer][c]
            if layer >= len(attention[kind]):
                ax.axis("off")
                continue
            r_labels, c_labels = axes_labels[kind]
            mean = np.mean(attention[kind][layer], axis=0)
            _heatmap(ax, mean, r_labels, c_labels, f"{kind} L{layer} (head mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_statistics(out_dir, per_head: dict) -> list[str]:
    """OUT/stats_<name>.png: a layers x heads heatmap per kind, values written in cells."""
    plt = _plt()
    paths = []
    for name in (*STATS, "importance"):
        kinds = [k for k in KINDS if k in per_head and name in per_head[k]]
        if not kinds:
            continue
        fig, axes = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 3), squeeze=False)
        for ax, kind in zip(axes[0], kinds, strict=True):
            m = np.asarray(per_head[kind][name], np.float64)
            im = ax.imshow(m, cmap="magma", aspect="auto")
            ax.set_title(kind, fontsize=9)
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_xticks(range(m.shape[1]))
            ax.set_yticks(range(m.shape[0]))
            for (i, j), v in np.ndenumerate(m):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="cyan")
            fig.colorbar(im, ax=ax, fraction=0.046)
        fig.suptitle(name)
        fig.tight_layout()
        path = os.path.join(out_dir, f"stats_{name}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths

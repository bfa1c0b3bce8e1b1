"""The sweep's tables, each column defined once: its name in results.csv / runs.csv, its
Markdown header (None: the CSV only), how its Markdown cell is written and when the Markdown
table shows it. Both files and the Markdown table are rendered from these lists, so a new
statistic is one `Column` entry here plus its value where `results.aggregate` builds a row.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable

from transformer.research.sweep import lr_grid
from transformer.research.sweep.spec import Sweep


@dataclasses.dataclass(frozen=True)
class Context:
    """What a header or cell may depend on besides its own row."""

    sweep: Sweep
    table: list[dict]  # every row of the table

    @property
    def baseline_scale(self) -> float:
        rows = (r for r in self.table if r["variant"] == self.sweep.baseline)
        return next((r["lr_scale"] for r in rows), 1.0)


def _always(context: Context) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Column:
    name: str  # the CSV field, and the row's key
    header: str | Callable[[Context], str] | None = None  # None: CSV only
    cell: Callable[[dict, Context], str] | None = None  # default: the value by `spec`
    spec: str = "{:.2f}"
    shown: Callable[[Context], bool] = _always

    def title(self, context: Context) -> str:
        return self.header(context) if callable(self.header) else self.header

    def text(self, row: dict, context: Context) -> str:
        if self.cell is not None:
            return self.cell(row, context)
        return fmt(row.get(self.name), self.spec)


def fmt(value, spec: str = "{:.2f}") -> str:
    return "" if value is None else spec.format(value)


def write_csv(path: str, columns: list[Column], rows: list[dict]) -> None:
    names = [c.name for c in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, names)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in names})


def markdown(columns: list[Column], rows: list[dict], context: Context) -> list[str]:
    """The header, the separator and one line per row of the columns shown."""
    shown = [c for c in columns if c.header is not None and c.shown(context)]
    lines = [
        "| " + " | ".join(c.title(context) for c in shown) + " |",
        "|" + "---|" * len(shown),
    ]
    for row in rows:
        lines.append("| " + " | ".join(c.text(row, context) for c in shown) + " |")
    return lines


# Cells of the variant table.


def _variant(row: dict, context: Context) -> str:
    return row["variant"] + (" (A/A)" if row["variant"] == context.sweep.aa_variant else "")


def _overrides(row: dict, context: Context) -> str:
    if row["variant"] == context.sweep.aa_variant:
        return "the baseline's, seeds + 1000"
    return row["overrides"] or "(base)"


def _mean_pm(mean_key: str, pm_key: str) -> Callable[[dict, Context], str]:
    def cell(row: dict, context: Context) -> str:
        text = fmt(row[mean_key])
        return text + (f" ± {row[pm_key]:.2f}" if row[pm_key] is not None else "")

    return cell


def _interval(row: dict, key: str) -> str:
    return f"{row[key]:+.2f} [{row[key + '_low']:+.2f}, {row[key + '_high']:+.2f}]"


def _seed_aware_delta(row: dict, context: Context) -> str:
    """'+1.07 [+0.21, +1.90]', naming the baseline's scale where it is not the one the
    baseline's row shows ('... vs x1')."""
    if row["variant"] == context.sweep.baseline:
        return "baseline"
    if row["bleu_delta"] is None:
        return "1 seed" if row["bleu_sentence_delta"] is not None else ""
    text = _interval(row, "bleu_delta")
    if row["versus_baseline_lr_scale"] != context.baseline_scale:
        text += f" vs {lr_grid.scale_label(row['versus_baseline_lr_scale'])}"
    return text


def _seed_aware_p(row: dict, context: Context) -> str:
    """'0.004 (0.012) *': p, Holm's p, * where significant after Holm; the A/A arm's p alone
    (it is a check, outside Holm's family)."""
    if row["bleu_p"] is None:
        return ""
    if row["bleu_p_holm"] is None:
        return f"{row['bleu_p']:.3f} (A/A)"
    star = " *" if row["bleu_significant"] else ""
    return f"{row['bleu_p']:.3f} ({row['bleu_p_holm']:.3f}){star}"


def _sentence_delta(row: dict, context: Context) -> str:
    if row["bleu_sentence_delta"] is None:
        return ""
    return _interval(row, "bleu_sentence_delta") + f" (p {row['bleu_sentence_p']:.3f})"


def _longer_header(context: Context) -> str:
    over = context.sweep.eval_longer_than
    over = "data.max_source_len" if over == "train" else over
    counts = (r["longer_sentences"] for r in context.table if r["longer_sentences"] is not None)
    n = next(counts, None)
    return f"BLEU, source > {over} tokens" + (f" ({n} sent.)" if n else "")


def _learning_rate(row: dict, context: Context) -> str:
    """'0.004 (x2, top of grid)': the chosen rate, flagged at the search's cap; 'untuned'
    for a variant outside the lr_grid."""
    lr = fmt(row["learning_rate"], "{:g}")
    if row["variant"] not in context.sweep.lr_grid:
        return f"{lr} (untuned)"
    if not row["lr_grid_complete"]:
        return f"{lr} (x1, grid incomplete)"
    edge = f", {row['lr_grid_edge']} of grid" if row["lr_grid_edge"] else ""
    return f"{lr} ({lr_grid.scale_label(row['lr_scale'])}{edge})"


def _sensitivity(row: dict, context: Context) -> str:
    return fmt(row["lr_sensitivity"], "{:.3f}") if row["lr_grid_complete"] else ""


def _mflops(row: dict, context: Context) -> str:
    flops = row["flops_per_token"]
    return "" if flops is None else f"{flops / 1e6:.2f}"


def _done(row: dict, context: Context) -> str:
    return f"{row['done']}/{row['runs']}"


def _has_longer(context: Context) -> bool:
    return context.sweep.eval_longer_than is not None


def _has_perplexity(context: Context) -> bool:
    return context.sweep.eval_score_references


def _has_grid(context: Context) -> bool:
    return bool(context.sweep.lr_grid)


def _versus(metric: str) -> list[Column]:
    """The CSV columns of one metric's two comparisons with the baseline."""
    seed_aware = [f"{metric}_{k}" for k in ("delta", "delta_low", "delta_high", "p", "p_holm")]
    extra = [f"{metric}_{k}" for k in ("significant", "mdd", "df", "test_set_se")]
    sentence = [f"{metric}_sentence_{k}" for k in ("delta", "delta_low", "delta_high", "p")]
    return [Column(name) for name in seed_aware + extra + sentence]


def _bleu_versus() -> list[Column]:
    """BLEU's comparison columns, those of them the Markdown table shows among them."""
    shown = {
        "bleu_delta": Column(
            "bleu_delta", "ΔBLEU vs baseline, seeds + test set [95% CI]", _seed_aware_delta
        ),
        "bleu_p": Column("bleu_p", "p (Holm)", _seed_aware_p),
        "bleu_mdd": Column("bleu_mdd", "MDD 80%"),
        "bleu_sentence_delta": Column(
            "bleu_sentence_delta", "ΔBLEU, test set only [95% CI] (sacreBLEU p)", _sentence_delta
        ),
    }
    return [shown.get(c.name, c) for c in _versus("bleu")]


# The per-variant table: results.csv, and results.md's columns in this order.
TABLE: list[Column] = [
    Column("variant", "variant", _variant),
    Column("overrides", "overrides", _overrides),
    Column("runs"),
    Column("bleu_mean", "BLEU (mean ± 95% t)", _mean_pm("bleu_mean", "bleu_tci")),
    Column("bleu_std", "seed sd"),
    Column("bleu_tci"),
    Column("chrf_mean", "chrF"),
    *_bleu_versus(),
    *_versus("chrf"),
    Column("versus_baseline_lr_scale"),
    Column(
        "longer_bleu_mean",
        _longer_header,
        _mean_pm("longer_bleu_mean", "longer_bleu_std"),
        shown=_has_longer,
    ),
    Column("longer_bleu_std"),
    Column("longer_sentences"),
    Column("best_valid_loss", "best valid loss", spec="{:.3f}"),
    Column(
        "test_perplexity",
        lambda context: f"{context.sweep.eval_split} perplexity",
        shown=_has_perplexity,
    ),
    Column("learning_rate", "lr (best on valid)", _learning_rate),
    Column("lr_scale"),
    Column("lr_sensitivity", "valid-loss spread over lr grid", _sensitivity, shown=_has_grid),
    Column("lr_grid_complete"),
    Column("lr_grid_edge"),
    Column("params", "params", spec="{:,}"),
    Column("flops_per_token", "MFLOPs/token", _mflops),
    Column("tokens_per_s", "train tok/s", spec="{:,.0f}"),
    Column("wall_s", "wall s/run", spec="{:.0f}"),
    Column("done", "done", _done),
    Column("diverged", "diverged", spec="{}"),
    Column("failed", "failed", spec="{}"),
]

# One row per run: runs.csv.
RUNS: list[Column] = [
    Column(name)
    for name in (
        "variant", "seed", "lr_scale", "learning_rate", "reported", "status", "bleu", "chrf",
        "bleu_delta", "bleu_p", "longer_bleu", "best_valid_loss", "final_valid_loss",
        "test_perplexity", "params", "flops_per_token", "tokens_per_s", "wall_s", "error",
    )
]  # fmt: skip

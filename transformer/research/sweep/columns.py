"""The sweep's tables, each column defined once: its name in results.csv / runs.csv, its
Markdown header (None: the CSV only), how its value is found, how its Markdown cell is
written and when the Markdown table shows it. Both files and the Markdown table are rendered
from the lists below, so a new statistic is one `Column` entry in one list, plus its value
where `results.aggregate` builds a row (or a `value` function of the row's other figures).
`read_csv` reads a written file back into the rows it was written from, so that the study's
HTML page (research/html) renders the very cells of the Markdown table.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable

from transformer.research.sweep import lr_grid
from transformer.research.sweep.spec import Sweep
from transformer.scoring.seed_significance import ALPHA, POWER


@dataclasses.dataclass(frozen=True)
class Context:
    """What a header, a cell or whether a column is shown may depend on besides one row."""

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
    """One column of a table, in the CSV and (with a header) in the Markdown table."""

    name: str  # the CSV field, and the row's key
    header: str | Callable[[Context], str] | None = None  # None: the CSV only
    cell: Callable[[dict, Context], str] | None = None  # default: the value by `spec`
    spec: str = "{:.2f}"  # str.format of a plain cell; None is an empty cell
    shown: Callable[[Context], bool] = _always  # whether the Markdown table has it
    value: Callable[[dict], object] | None = None  # from the row's figures; default row[name]
    text_field: bool = False  # a name or free text in the CSV, never read back as a number

    def title(self, context: Context) -> str:
        return self.header(context) if callable(self.header) else self.header

    def text(self, row: dict, context: Context) -> str:
        if self.cell is not None:
            return self.cell(row, context)
        return fmt(row[self.name], self.spec)


def fmt(value, spec: str = "{:.2f}") -> str:
    return "" if value is None else spec.format(value)


def complete(columns: list[Column], row: dict) -> dict:
    """The row with every column's value: a `value` column's computed from the row's other
    figures, None for a figure it lacks (a baseline has no difference to itself). Both
    renderings then read each column by its name alone."""
    out = {c.name: None for c in columns} | row
    for c in columns:
        if c.value is not None:
            out[c.name] = c.value(out)
    return out


def write_csv(path: str, columns: list[Column], rows: list[dict]) -> None:
    names = [c.name for c in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, names)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in names})


def read_csv(path: str, columns: list[Column]) -> list[dict]:
    """The rows `write_csv` wrote, each value as it was before: None for an empty field,
    bools, ints and floats by their text, strings for `text_field` columns. A column the file
    lacks (one written before the column existed) is None in every row."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    kinds = {c.name: c.text_field for c in columns}
    return [
        complete(columns, {k: _parsed(v, kinds.get(k, False)) for k, v in row.items()})
        for row in rows
    ]


def _parsed(text: str | None, text_field: bool):
    if text is None or text == "":
        return None
    if text_field:
        return text
    if text in ("True", "False"):
        return text == "True"
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def shown(columns: list[Column], context: Context) -> list[Column]:
    """The columns a rendered table has, in order: those with a header the study measures."""
    return [c for c in columns if c.header is not None and c.shown(context)]


def markdown(columns: list[Column], rows: list[dict], context: Context) -> list[str]:
    """The header, the separator and one line per row of the columns shown."""
    shown_columns = shown(columns, context)
    lines = [
        "| " + " | ".join(c.title(context) for c in shown_columns) + " |",
        "|" + "---|" * len(shown_columns),
    ]
    for row in rows:
        lines.append("| " + " | ".join(c.text(row, context) for c in shown_columns) + " |")
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
    """'0.004 (0.012) *': p, Holm's p, * where the sign is claimed after Holm; the A/A arm's p
    alone (it is a check, outside Holm's family)."""
    if row["bleu_p"] is None:
        return ""
    if row["bleu_p_holm"] is None:
        return f"{row['bleu_p']:.3f} (A/A)"
    star = " *" if row["bleu_significant"] else ""
    return f"{row['bleu_p']:.3f} ({row['bleu_p_holm']:.3f}){star}"


def _family_size(context: Context) -> int:
    return sum(r["bleu_p_holm"] is not None for r in context.table)


def _p_header(context: Context) -> str:
    return f"p (Holm over {_family_size(context)} variants)"


def _simultaneous(row: dict, context: Context) -> str:
    """'[-1.10, +0.40]', or where the sign is claimed the interval open at 0: '(0, +1.90]'."""
    low, high = row["bleu_delta_simultaneous_low"], row["bleu_delta_simultaneous_high"]
    if low is None:
        return ""
    if row["bleu_significant"]:
        return f"(0, {high:+.2f}]" if row["bleu_delta"] > 0 else f"[{low:+.2f}, 0)"
    return f"[{low:+.2f}, {high:+.2f}]"


def _mdd(row: dict, context: Context) -> str:
    """'0.89 / 1.31': at p < 0.05, then at Holm's first step (the A/A arm: the first only)."""
    if row["bleu_mdd"] is None:
        return ""
    strict = row["bleu_mdd_holm"]
    return f"{row['bleu_mdd']:.2f}" + ("" if strict is None else f" / {strict:.2f}")


def _mdd_header(context: Context) -> str:
    sds = (r["bleu_pooled_seed_sd"] for r in context.table if r["bleu_pooled_seed_sd"] is not None)
    sd = next(sds, None)
    title = f"MDD {POWER:.0%} (p < {ALPHA:g} / *)"
    return title + (f", pooled seed sd {sd:.2f}" if sd is not None else "")


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


def _perplexity_header(context: Context) -> str:
    return f"{context.sweep.eval_split} perplexity"


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


# When the Markdown table shows a column: only where the sweep measures it.


def _has_longer(context: Context) -> bool:
    return context.sweep.eval_longer_than is not None


def _has_perplexity(context: Context) -> bool:
    return bool(context.sweep.eval_score_references)


def _has_outliers(context: Context) -> bool:
    return any(row.get("outliers") for row in context.table)


def _has_grid(context: Context) -> bool:
    return bool(context.sweep.lr_grid)


# The per-variant table: results.csv, and results.md's columns in this order.
TABLE: list[Column] = [
    Column("variant", "variant", _variant, text_field=True),
    Column("overrides", "overrides", _overrides, text_field=True),
    Column("runs"),
    Column("bleu_mean", "BLEU (mean ± 95% t)", _mean_pm("bleu_mean", "bleu_tci")),
    Column("bleu_std", "seed sd"),
    Column("bleu_tci"),
    Column("chrf_mean", "chrF"),
    # BLEU against the baseline by the seed-aware test (versus_baseline.py) ...
    Column(
        "bleu_delta",
        f"ΔBLEU vs baseline, seeds + test set [unadjusted {1 - ALPHA:.0%} CI]",
        _seed_aware_delta,
    ),
    Column("bleu_delta_low"),
    Column("bleu_delta_high"),
    Column("bleu_p", _p_header, _seed_aware_p),
    Column("bleu_p_holm"),
    Column("bleu_significant"),
    Column("bleu_delta_simultaneous_low", f"simultaneous {1 - ALPHA:.0%} CI (Holm)", _simultaneous),
    Column("bleu_delta_simultaneous_high"),
    Column("bleu_mdd", _mdd_header, _mdd),
    Column("bleu_mdd_holm"),
    Column("bleu_pooled_seed_sd"),
    Column("bleu_df"),
    Column("bleu_test_set_se"),
    # ... and by sacreBLEU's paired bootstrap over the pooled seeds (test-set noise only).
    Column("bleu_sentence_delta", "ΔBLEU, test set only [95% CI] (sacreBLEU p)", _sentence_delta),
    Column("bleu_sentence_delta_low"),
    Column("bleu_sentence_delta_high"),
    Column("bleu_sentence_p"),
    # chrF's two comparisons, in results.csv only.
    Column("chrf_delta"),
    Column("chrf_delta_low"),
    Column("chrf_delta_high"),
    Column("chrf_p"),
    Column("chrf_p_holm"),
    Column("chrf_significant"),
    Column("chrf_delta_simultaneous_low"),
    Column("chrf_delta_simultaneous_high"),
    Column("chrf_mdd"),
    Column("chrf_mdd_holm"),
    Column("chrf_pooled_seed_sd"),
    Column("chrf_df"),
    Column("chrf_test_set_se"),
    Column("chrf_sentence_delta"),
    Column("chrf_sentence_delta_low"),
    Column("chrf_sentence_delta_high"),
    Column("chrf_sentence_p"),
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
    Column("test_perplexity", _perplexity_header, shown=_has_perplexity),
    Column("learning_rate", "lr (best on valid)", _learning_rate),
    Column("lr_scale"),
    Column("lr_sensitivity", "valid-loss spread over lr grid", _sensitivity, shown=_has_grid),
    Column("lr_grid_complete"),
    Column("lr_grid_edge", text_field=True),
    Column("params", "params", spec="{:,}"),
    Column("flops_per_token", "MFLOPs/token", _mflops),
    Column("tokens_per_s", "train tok/s", spec="{:,.0f}"),
    Column("wall_s", "wall s/run", spec="{:.0f}"),
    Column("done", "done", _done),
    Column("diverged", "diverged", spec="{}"),
    Column("failed", "failed", spec="{}"),
    Column("outliers", "outlier runs", spec="{}", shown=_has_outliers, text_field=True),
]

# One row per run: runs.csv.
RUNS: list[Column] = [
    Column("variant", text_field=True),
    Column("seed"),
    Column("role", text_field=True),
    Column("lr_scale"),
    Column("learning_rate"),
    Column("reported"),
    Column("status", text_field=True),
    Column("bleu"),
    Column("chrf"),
    Column("bleu_delta"),
    Column("bleu_p"),
    Column("longer_bleu"),
    Column("best_valid_loss"),
    Column("final_valid_loss"),
    Column("test_perplexity"),
    Column("params"),
    Column("flops_per_token"),
    Column("tokens_per_s"),
    Column("wall_s"),
    Column("eval_wall_s"),
    Column("machine", text_field=True),
    Column("error", text_field=True),
    Column("outlier", text_field=True),
]

# One row per (variant, learning-rate grid point): lr_grid.csv. Its Markdown table has a
# column per grid point instead (lr_grid.markdown).
LR_GRID: list[Column] = [Column(name, text_field=name == "variant") for name in lr_grid.CSV_COLUMNS]

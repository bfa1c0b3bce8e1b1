"""A study's page (DIR/results.html): the results table, the forest plots, each arm's
learning-rate search, loss curves and BLEU by source length, test sentences side by side
and the provenance, in one self-contained HTML file.

The table is results.csv read back and written cell by cell by the very `Column`s that write
results.md's table (research/sweep/columns.py), so the two show the same figures, stars and
A/A row; the forest plot and the learning-rate charts are drawn from the same files'
columns, the curves, length buckets and sentences from the reported runs' own files. Nothing
is recomputed here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from transformer.common import provenance
from transformer.common.fileio import atomic_write
from transformer.research.html import charts, forest, lr_chart, markup, samples, study_files
from transformer.research.html.study_files import Study
from transformer.research.sweep import columns, results
from transformer.scoring.length_buckets import bucket_label

PAGE = "results.html"  # beside results.md


def write(
    workdir: str,
    out: str | None,
    command: str,
    config: str | None = None,
    references: str | None = None,
    sources: str | None = None,
) -> str:
    """Renders the study in `workdir` to `out` (default DIR/results.html); returns the path."""
    study = study_files.load(workdir, config)
    path = out or os.path.join(workdir, PAGE)
    atomic_write(path, render(study, command, references, sources))
    return path


def render(
    study: Study, command: str, references: str | None = None, sources: str | None = None
) -> str:
    """The page's HTML."""
    sections = [
        ("results", "Results", results_section(study)),
        ("forest", "Differences from the baseline", forest_section(study)),
        ("lr-search", "Learning-rate search", lr_section(study)),
        ("valid-loss", "Validation loss", curve_section(study, "valid")),
        ("train-loss", "Training loss", curve_section(study, "train")),
        ("length", "BLEU by source length", length_section(study)),
        ("samples", "Test sentences side by side", samples_section(study, references, sources)),
        ("provenance", "Provenance", provenance_section(study, command)),
    ]
    return markup.page(f"Study {os.path.basename(os.path.abspath(study.workdir))}", sections)


# Results: results.md's text around a sortable table of results.csv's rows.


def results_section(study: Study) -> str:
    intro, notes = _split_markdown(study.markdown)
    legend = markup.tag("details", markup.tag("summary", "What the columns mean") + notes)
    hint = markup.tag("p", "Click a column's header to sort by it.", class_="caption")
    return intro + hint + results_table(study) + legend


def results_table(study: Study) -> str:
    context = columns.Context(sweep=study.sweep, table=study.table)
    shown = columns.shown(columns.TABLE, context)
    rows = [[(c.text(row, context), row[c.name]) for c in shown] for row in study.table]
    return markup.table(
        [c.title(context) for c in shown],
        rows,
        row_classes=[_row_class(study, row) for row in study.table],
        sortable=True,
        table_id="results-table",
    )


def _row_class(study: Study, row: dict) -> str | None:
    if row["variant"] == study.sweep.baseline:
        return "baseline"
    if row["variant"] == study.sweep.aa_variant:
        return "aa"
    return "significant" if row.get("bleu_significant") else None


def _split_markdown(text: str) -> tuple[str, str]:
    """(results.md before its first table, after it) as HTML; the title line left out (the
    page has its own)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), len(lines))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    intro = [line for line in lines[:start] if not line.startswith("# ")]
    return markup.markdown("\n".join(intro)), markup.markdown("\n".join(lines[end:]))


# The forest plots.


def forest_section(study: Study) -> str:
    parts = []
    for metric, name in (("bleu", "BLEU"), ("chrf", "chrF")):
        rows = forest.comparisons(study.table, metric, study.sweep.baseline, study.sweep.aa_variant)
        parts.append(
            markup.tag(
                "figure", forest.plot(rows, name, study.sweep.baseline), id=f"forest-{metric}"
            )
        )
    return "".join(parts) + markup.tag("p", markup.escape(forest.LEGEND), class_="caption")


# The learning-rate search.


def lr_section(study: Study) -> str:
    if not study.grid:
        return markup.tag(
            "p",
            "This study has no learning-rate search (no lr_grid): every arm ran at its "
            "configured rate.",
            class_="caption",
        )
    searches = lr_chart.by_variant(study.grid)
    shared = lr_chart.axes(searches)
    figures = [(lr_chart.panel(shared, name, rows), "") for name, rows in searches.items()]
    return charts.multiples(figures) + markup.tag("p", lr_chart.CAPTION, class_="caption")


# Curves and length buckets: one chart per arm over its reported runs.


def _arms(study: Study) -> list[str]:
    return [row["variant"] for row in study.table]


def _runs_of(study: Study, name: str) -> list[dict]:
    return [r for r in study.reported if r["variant"] == name and r["status"] == "done"]


def curve_section(study: Study, which: str) -> str:
    """Validation ('valid') or training ('train') loss over steps, per arm."""
    bands = {
        name: charts.band(
            [study_files.curves(study.run_path(r))[which] for r in _runs_of(study, name)]
        )
        for name in _arms(study)
    }
    steps = sorted({x for b in bands.values() if b for x in b.xs})
    if not steps:
        return markup.tag("p", f"No {which} loss in the reported runs' metrics.jsonl.")
    positions, labels = charts.x_ticks(steps)
    shared = charts.shared_axes(list(bands.values()), positions, labels, "step")
    return _multiples(study, bands, shared) + markup.tag(
        "p", markup.escape(_curve_caption(which, steps)), class_="caption"
    )


def _curve_caption(which: str, steps: Sequence[int]) -> str:
    what = "Validation loss (NLL)" if which == "valid" else "Training loss (label-smoothed)"
    text = (
        f"{what} over training steps, each arm over its reported runs: line, the mean over "
        "seeds; band (or whisker), the range from the lowest to the highest run; dashed, the "
        "baseline's mean. All charts share their axes."
    )
    if len(steps) == 1:
        text += (
            f" Validation ran once per run, at step {steps[0]} (train.eval_every >= "
            "train.num_steps), so each chart is one point; the training loss shows the course."
        )
    return text


def length_section(study: Study) -> str:
    split = study.sweep.eval_split
    bands, labels = {}, []
    for name in _arms(study):
        records = [study_files.eval_record(study.run_path(r), split) for r in _runs_of(study, name)]
        buckets = [r["length_buckets"] for r in records if r and r.get("length_buckets")]
        labels = labels or ([bucket_label(b) for b in buckets[0]] if buckets else [])
        bands[name] = charts.band(
            [{i: b["bleu"] for i, b in enumerate(run) if b["bleu"] is not None} for run in buckets]
        )
    if not labels:
        return markup.tag("p", f"The reported runs' eval/{split}.json have no length_buckets.")
    shared = charts.shared_axes(
        list(bands.values()), list(range(len(labels))), labels, "source tokens (EOS included)"
    )
    caption = (
        f"{split} BLEU per source-length bucket (eval.py's length_buckets), each arm over its "
        "reported runs: line, the mean over seeds; band, the range; dashed, the baseline's "
        "mean. An empty bucket has no point. All charts share their axes."
    )
    return _multiples(study, bands, shared) + markup.tag(
        "p", markup.escape(caption), class_="caption"
    )


def _multiples(study: Study, bands: dict, shared: charts.Axes) -> str:
    reference = bands.get(study.sweep.baseline)
    figures = [
        (
            charts.band_panel(
                shared, name, band, None if name == study.sweep.baseline else reference
            ),
            "",
        )
        for name, band in bands.items()
    ]
    return charts.multiples(figures)


# Test sentences.


def samples_section(study: Study, references: str | None, sources: str | None) -> str:
    split = study.sweep.eval_split
    first = _first_runs(study)
    outputs = {
        name: found
        for name, path in first.items()
        if (found := study_files.texts(path, split, "hyp")) is not None
    }
    if study.sweep.baseline not in outputs:
        return markup.tag("p", f"No eval/{split}.hyp.txt of the baseline's reported runs.")
    base_path = first[study.sweep.baseline]
    count = len(outputs[study.sweep.baseline])
    refs = study_files.texts_or_file(
        base_path, split, "ref", references or study.sweep.references, count
    )
    srcs = study_files.texts_or_file(base_path, split, "src", sources, count)
    positions = samples.most_disputed(outputs)
    base_outputs = outputs[study.sweep.baseline]
    compare = {name: None if name == study.sweep.baseline else base_outputs for name in outputs}
    rule = samples.STUDY_RULE.format(count=len(positions))
    return (
        markup.tag("p", markup.escape(rule), class_="caption")
        + samples.missing_texts_note(refs, srcs)
        + samples.table(positions, outputs, compare, srcs, refs)
    )


def _first_runs(study: Study) -> dict[str, str]:
    """{variant: the directory of its reported run with the lowest seed}."""
    out = {}
    for name in _arms(study):
        runs = sorted(_runs_of(study, name), key=lambda r: r["seed"])
        if runs:
            out[name] = study.run_path(runs[0])
    return out


# Provenance.


def provenance_section(study: Study, command: str) -> str:
    sweep = study.sweep
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in study.reported}))
    finished = sum(r["status"] == "done" for r in study.reported)
    items = [
        ("study directory", study.workdir),
        ("sweep config", sweep.path),
        ("base run config", sweep.base),
        ("arms", str(len(study.table))),
        ("reported runs", f"{len(study.reported)} ({finished} finished), seeds {seeds}"),
    ]
    for key, n in study_files.code_versions(study).items():
        items.append((f"code of {n} finished run(s)", key))
    spent = results.compute_lines(study.runs)  # results.md's line, from runs.csv
    if spent:
        items.append(("compute", spent[-1].removeprefix("Compute: ")))
    items.append(("rendered by", _code_line(provenance.code_provenance())))
    items.append(("files read", FILES_READ))
    return (
        markup.table([], [[(k, k), (v, v)] for k, v in items])
        + markup.tag("p", "Rendered by:", class_="caption")
        + markup.tag("pre", markup.escape(command), id="command")
    )


FILES_READ = (
    "sweep.json (or --config), results.csv, runs.csv, lr_grid.csv, results.md; each reported "
    "run's metrics.jsonl, provenance.json and eval/ files"
)


def _code_line(code: dict) -> str:
    commit = code.get("git_commit") or "no git checkout"
    dirty = " (dirty)" if code.get("git_dirty") else ""
    return f"transformer {code.get('package_version')}, {commit}{dirty}"

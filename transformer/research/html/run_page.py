"""One run's page (RUN/report.html): its curves, evaluation results, BLEU by source length,
sample translations and, where transformer-analyze has written its output under the run (or
--analysis names it), the attention heatmaps and per-head statistics, in one self-contained
HTML file. Everything is read from the run's own files: metrics.jsonl, eval/<name>.json
and its .hyp/.src/.ref.txt, provenance.json, and the analysis' report.json and PNGs.
"""

from __future__ import annotations

import glob
import json
import os

from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.common.metrics_file import METRICS_FILE, read_metrics
from transformer.research.html import charts, markup, samples, study_files
from transformer.research.report import format_decode, format_score, format_step
from transformer.scoring.length_buckets import bucket_label

PAGE = "report.html"
ANALYSIS_REPORT = "report.json"  # what transformer-analyze writes into its --out


def is_run(workdir: str) -> bool:
    return os.path.isfile(os.path.join(workdir, METRICS_FILE)) or bool(_eval_paths(workdir))


def write(
    workdir: str,
    out: str | None,
    command: str,
    analysis: str | None = None,
    references: str | None = None,
    sources: str | None = None,
) -> str:
    """Renders the run in `workdir` to `out` (default RUN/report.html); returns the path."""
    if analysis is not None and not os.path.isfile(os.path.join(analysis, ANALYSIS_REPORT)):
        raise UserError(
            f"--analysis {analysis} has no {ANALYSIS_REPORT}; give the directory "
            "transformer-analyze wrote (its --out)"
        )
    path = out or os.path.join(workdir, PAGE)
    atomic_write(path, render(workdir, command, analysis, references, sources))
    return path


def render(
    workdir: str,
    command: str,
    analysis: str | None = None,
    references: str | None = None,
    sources: str | None = None,
) -> str:
    records = _eval_records(workdir)
    sections = [
        ("curves", "Curves", curves_section(workdir)),
        ("eval", "Evaluation", eval_section(records)),
        ("length", "BLEU by source length", length_section(records)),
        ("samples", "Sample translations", samples_section(workdir, records, references, sources)),
        ("attention", "Attention", attention_section(workdir, analysis)),
        ("provenance", "Provenance", provenance_section(workdir, command)),
    ]
    return markup.page(f"Run {os.path.basename(os.path.abspath(workdir))}", sections)


def _eval_paths(workdir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(workdir, "eval", "*.json")))


def _eval_records(workdir: str) -> dict[str, dict]:
    """{name: eval/<name>.json} for the records that parse (eval.py's, one per --name)."""
    out = {}
    for path in _eval_paths(workdir):
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "bleu" in record:
            out[os.path.basename(path)[: -len(".json")]] = record
    return out


# Curves: one chart per logged quantity.

CURVES = (  # (row kind, split, field, chart title)
    ("train", None, "loss", "training loss"),
    ("eval", "valid", "loss", "validation loss"),
    ("eval", "valid", "bleu", "validation BLEU"),
    ("train", None, "learning_rate", "learning rate"),
)


def curves_section(workdir: str) -> str:
    try:
        rows = read_metrics(os.path.join(workdir, METRICS_FILE))
    except UserError:
        rows = []
    figures = []
    for kind, split, field, title in CURVES:
        own = charts.band([_curve(rows, kind, split, field)])
        if own is not None:
            positions, labels = charts.x_ticks(own.xs)
            shared = charts.shared_axes([own], positions, labels, "step")
            figures.append((charts.band_panel(shared, title, own), ""))
    if not figures:
        return markup.tag("p", "No metrics.jsonl rows: the run has not logged a step yet.")
    return charts.multiples(figures)


def _curve(rows: list[dict], kind: str, split: str | None, field: str) -> dict[int, float]:
    """{step: value} of `field` in the rows of `kind` (and eval `split`)."""
    return {
        r["step"]: r[field]
        for r in rows
        if r.get("kind") == kind
        and field in r
        and "step" in r
        and (split is None or r.get("split", "valid") == split)
    }


# Evaluation results: eval.py's records, formatted as transformer-report's table.


def eval_section(records: dict[str, dict]) -> str:
    if not records:
        return markup.tag(
            "p", "No eval/*.json: evaluate the run with transformer-eval --workdir RUN."
        )
    headers = ["name", "split", "BLEU", "chrF", "step", "decoding", "sentences", "signature"]
    rows = [_eval_row(name, r) for name, r in records.items()]
    return markup.table(headers, rows, sortable=True)


def _eval_row(name: str, r: dict) -> list[tuple[str, object]]:
    """(cell text, sort value) of each column: the figures as transformer-report writes them."""
    signature = r.get("signature")
    if isinstance(signature, dict):
        signature = "; ".join(f"{k}: {v}" for k, v in signature.items())
    chrf = r.get("chrf")
    return [
        (name, name),
        (str(r.get("split", "")), r.get("split")),
        (format_score(r["bleu"]), r["bleu"]),
        ("" if chrf is None else format_score(chrf), chrf),
        (format_step(r) if "step" in r else "", r.get("step")),
        (format_decode(r["decode"]) if isinstance(r.get("decode"), dict) else "", None),
        (str(r.get("sentences", "")), r.get("sentences")),
        ("" if signature is None else str(signature), None),
    ]


# Length buckets.


def length_section(records: dict[str, dict]) -> str:
    parts = []
    for name, r in records.items():
        buckets = r.get("length_buckets")
        if not buckets:
            continue
        labels = [bucket_label(b) for b in buckets]
        figures = []
        for metric, title in (("bleu", "BLEU"), ("chrf", "chrF")):
            own = charts.band(
                [{i: b[metric] for i, b in enumerate(buckets) if b[metric] is not None}]
            )
            shared = charts.shared_axes([own], list(range(len(labels))), labels, "source tokens")
            figures.append((charts.band_panel(shared, f"{name}: {title}", own), ""))
        sizes = ", ".join(f"{bucket_label(b)}: {b['sentences']}" for b in buckets)
        parts.append(
            charts.multiples(figures)
            + markup.tag("p", markup.escape(f"Sentences per bucket: {sizes}."), class_="caption")
        )
    if not parts:
        return markup.tag("p", "No eval record has length_buckets (eval.py writes them).")
    return "".join(parts)


# Sample translations.


def samples_section(
    workdir: str, records: dict[str, dict], references: str | None, sources: str | None
) -> str:
    """The first evaluation's translations (by name) that eval.py kept."""
    for name in records:
        hyps = study_files.texts(workdir, name, "hyp")
        if hyps is None:
            continue
        refs = study_files.texts_or_file(workdir, name, "ref", references, len(hyps))
        srcs = study_files.texts_or_file(workdir, name, "src", sources, len(hyps))
        positions = samples.evenly_spaced(len(hyps))
        rule = samples.RUN_RULE.format(count=len(positions), split=name)
        return (
            markup.tag("p", markup.escape(rule), class_="caption")
            + samples.missing_texts_note(refs, srcs)
            + samples.table(positions, {"output": hyps}, {"output": refs}, srcs, refs)
        )
    return markup.tag("p", "No eval/<name>.hyp.txt: evaluate the run with transformer-eval.")


# Attention: transformer-analyze's output.


def analysis_dirs(workdir: str, analysis: str | None) -> list[str]:
    """--analysis, else every directory up to two levels under the run holding an analysis
    report.json (one with 'statistics' and 'sentences')."""
    if analysis is not None:
        return [analysis]
    found = []
    for pattern in ("*", os.path.join("*", "*")):
        for path in sorted(glob.glob(os.path.join(workdir, pattern, ANALYSIS_REPORT))):
            report = _json(path)
            if isinstance(report, dict) and "statistics" in report and "sentences" in report:
                found.append(os.path.dirname(path))
    return found


def _json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def attention_section(workdir: str, analysis: str | None) -> str:
    dirs = analysis_dirs(workdir, analysis)
    if not dirs:
        return markup.tag(
            "p",
            "transformer-analyze has not run on this run: transformer-analyze --workdir RUN "
            "--out RUN/analysis draws its heatmaps and head statistics, and this page then "
            "shows them.",
            class_="caption",
        )
    return "".join(_analysis(d) for d in dirs)


def _analysis(directory: str) -> str:
    report = _json(os.path.join(directory, ANALYSIS_REPORT)) or {}
    parts = [markup.tag("h3", markup.escape(f"{directory} (step {report.get('step')})"))]
    for i, sentence in enumerate(report.get("sentences", [])):
        text = f"source: {sentence.get('source')} / output: {sentence.get('translation')}"
        parts.append(markup.tag("p", markup.escape(text), class_="caption"))
        parts.append(_image(os.path.join(directory, f"sentence{i}", "overview.png"), "heatmap"))
    for path in sorted(glob.glob(os.path.join(directory, "stats_*.png"))):
        parts.append(_image(path, os.path.basename(path)))
    flagged = report.get("flagged") or {}
    if flagged:
        items = "".join(markup.tag("li", markup.escape(f"{k}: {v}")) for k, v in flagged.items())
        parts.append(markup.tag("p", "Flagged heads:") + markup.tag("ul", items))
    return "".join(parts)


def _image(path: str, alt: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return markup.tag("p", markup.escape(f"missing: {path}"), class_="caption")
    return f'<img class="heatmap" alt="{markup.escape(alt)}" src="{markup.png_data_uri(data)}">'


# Provenance.


def provenance_section(workdir: str, command: str) -> str:
    rows = []
    for start in provenance.read(workdir):
        code = start.get("code", {})
        rows.append(
            [
                (str(start.get("start_step")), start.get("start_step")),
                (str(start.get("started_at")), start.get("started_at")),
                (f"{code.get('git_commit')}{' (dirty)' if code.get('git_dirty') else ''}", None),
                (str(start.get("machine")), None),
            ]
        )
    table = (
        markup.table(["start step", "started at", "code", "machine"], rows)
        if rows
        else markup.tag("p", "No provenance.json (the run predates it).")
    )
    return (
        markup.tag("p", markup.escape(f"Run directory: {workdir}"))
        + table
        + markup.tag("p", "Rendered by:", class_="caption")
        + markup.tag("pre", markup.escape(command), id="command")
    )

"""Side-by-side table of benchmark figures, with the performance targets and whether each is met.

    python -m benchmarks.throughput --config configs/bench_base.py --json > jax.jsonl
    python -m benchmarks.throughput --config configs/bench_base.py --what decode --int8 \
        --json > jaxint8.jsonl
    python -m benchmarks.compare_torch --json > torch.jsonl
    python -m benchmarks.compare_ctranslate2 --json > ct2.jsonl
    python -m benchmarks.real_data_speed --workdir RUN --json > real.jsonl  # same weights
    python -m benchmarks.table jax.jsonl jaxint8.jsonl torch.jsonl ct2.jsonl real.jsonl \
        [--readme README.md --section Performance]

Reads the JSON lines the benchmark scripts print (`{"figure", "value", "impl", ...}`; other
lines are ignored) and puts each figure in a row with one column per implementation: ours
(float32), MarianMT, ours with int8 decoding, CTranslate2 float32 and int8, then any other;
the `ratio` column is the first two's. Below it the targets: ratios against the PyTorch peer
(float32 and int8 decoding over generate()), ratios within this project (packed over padded
batches, cached over uncached decoding), the int8 BLEU cost on real data, and the ratios to
CTranslate2 at each precision, stated without a target. The output is deterministic, so a
README section rendered from unchanged files stays byte-identical.

Rounds: each file is one run of one script, and files of the same script given again are
its later rounds (benchmarks/side_by_side.sh alternates the scripts, A B A B ..., each run a
fresh process, because one process's speed on a shared VM drifts by a third between runs).
A figure measured in several rounds shows its median and, in brackets, its min-max over the
rounds; a ratio between two implementations is taken round by round (the k-th run of one over
the k-th of the other, side by side in time) and shown as the median with its spread; a
target is met only when every round's ratio clears it ("unsettled" when the median does and
the spread does not). Peak memory keeps the largest of all rounds.

Each figure keeps the load average its run's `setup` line recorded before it started. A ratio
involving a run that started on a busy machine (benchmarks/common.busy: more than half a
runnable process per core) is withheld: the cell says `busy`, the target row `withheld`, and a
note under the tables names the run's file and load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence

from benchmarks.common import (
    CT2_FLOAT32,
    CT2_INT8,
    MAX_BACKGROUND_LOAD_PER_CORE,
    OURS,
    OURS_INT8,
    PEER,
    PEER_COMPILED,
    busy,
)

# Columns in this order, then any other implementation's; the ratio column is the first two's.
IMPLS = (OURS, PEER, OURS_INT8, CT2_FLOAT32, CT2_INT8)

# benchmarks/real_data_speed.py: a trained run's test set translated by both sides holding the
# same weights; agreement is the share of identical greedy outputs (the peer's row only).
REAL_DATA_FIGURES = (
    "greedy_sentences_per_s",
    "beam4_sentences_per_s",
    "greedy_bleu",
    "beam4_bleu",
    "greedy_agreement",
    "beam4_agreement",
)
GREEDY, SAMPLE, BEAM4 = (
    "decode_greedy_tokens_per_s",
    "decode_sample_tokens_per_s",
    "decode_beam4_sentences_per_s",
)
REAL_GREEDY, REAL_BEAM4 = "greedy_sentences_per_s", "beam4_sentences_per_s"


def _target(text, figure, other, target, ours=OURS, kind="min"):
    """A TARGETS row comparing `ours`'s figure with implementation `other`'s."""
    return (text, (ours, figure), (other, figure), target, kind)


# The accelerator table (render_gpu): columns, figures per model size, targets (issue #36:
# one H200, bf16, medians of alternating rounds).
GPU_IMPLS = (OURS, PEER, PEER_COMPILED)
GPU_FIGURES = (
    "train_tokens_per_s",
    "train_step_s",
    "mfu",
    "compile_s",
    "device_peak_mib",
    "decode_greedy_tokens_per_s",
    "decode_sample_tokens_per_s",
    "decode_beam4_sentences_per_s",
)
PROFILE_KIND = "step_kind_ms"  # benchmarks/experiments/profile_step.py, one row per kind
GPU_TARGETS = (
    (
        "Transformer-big training tokens/s vs compiled MarianMT",
        (OURS, "train_tokens_per_s [big]"),
        (PEER_COMPILED, "train_tokens_per_s [big]"),
        1.3,
        "min",
    ),
    ("Transformer-big MFU", (OURS, "mfu [big]"), None, 0.45, "min"),
    (
        "Transformer-base training tokens/s vs compiled MarianMT",
        (OURS, "train_tokens_per_s [base]"),
        (PEER_COMPILED, "train_tokens_per_s [base]"),
        1.5,
        "min",
    ),
    ("Transformer-base MFU", (OURS, "mfu [base]"), None, 0.30, "min"),
)

# Figures shown, in order (others in the files are ignored).
FIGURES = (
    "train_tokens_per_s",
    "train_step_s",
    "compile_s",
    "matmul_peak_gflops",
    "mfu",
    "train_real_tokens_per_s",
    "train_padded_real_tokens_per_s",
    "padding_fraction",
    "padded_padding_fraction",
    "decode_greedy_tokens_per_s",
    "decode_greedy_tokens_per_s_256",
    "decode_sample_tokens_per_s",
    "decode_sample_tokens_per_s_256",
    "decode_beam4_sentences_per_s",
    "decode_beam4_sentences_per_s_256",
    "decode_greedy_nocache_tokens_per_s",
    "decode_greedy_nocache_tokens_per_s_256",
    *REAL_DATA_FIGURES,
)
# Each benchmark run ends with its peak memory; a row per kind of run (train, decode, ...), so
# the training run's peak is not overwritten by a later decoding run's, holding the largest
# peak of the runs of that kind (a short greedy-only run must not hide the beam run's).
PEAK_RSS = "peak_rss_mib"
PIPELINE_FIGURES = {
    "train_real_tokens_per_s",
    "train_padded_real_tokens_per_s",
    "padding_fraction",
    "padded_padding_fraction",
}

# (description, numerator (impl, figure), denominator (impl, figure) or None, target, kind):
# kind 'min' = the value (a ratio with a denominator) must be >= target, 'max' = <= target,
# 'min_diff' = numerator minus denominator must be >= target, 'info' = a ratio stated beside
# the targets, with none of its own (target None).
TARGETS = (
    _target("training tokens/s vs MarianMT (milestone)", "train_tokens_per_s", PEER, 1.0),
    _target("training tokens/s vs MarianMT (goal)", "train_tokens_per_s", PEER, 1.2),
    ("MFU (fraction of the measured matmul peak)", (OURS, "mfu"), None, 0.70, "min"),
    (
        "real-data tokens/s, packed vs padded batches",
        (OURS, "train_real_tokens_per_s"),
        (OURS, "train_padded_real_tokens_per_s"),
        1.5,
        "min",
    ),
    ("padding fraction of packed batches", (OURS, "padding_fraction"), None, 0.05, "max"),
    _target("greedy tokens/s vs generate()", GREEDY, PEER, 2.0),
    _target("sampling tokens/s vs generate()", SAMPLE, PEER, 2.0),
    _target("beam-4 sentences/s vs generate()", BEAM4, PEER, 1.5),
    _target("int8 greedy tokens/s vs generate()", GREEDY, PEER, 3.0, OURS_INT8),
    _target("int8 sampling tokens/s vs generate()", SAMPLE, PEER, 3.0, OURS_INT8),
    _target("int8 beam-4 sentences/s vs generate()", BEAM4, PEER, 2.0, OURS_INT8),
    (
        "cached vs uncached greedy at 256 tokens",
        (OURS, "decode_greedy_tokens_per_s_256"),
        (OURS, "decode_greedy_nocache_tokens_per_s_256"),
        5.0,
        "min",
    ),
    # The uncached decoder's cost grows quadratically with length, the cached one's about
    # linearly: the ratio at 64 tokens is a lower bound of the ratio at 256.
    (
        "cached vs uncached greedy at 64 tokens (lower bound of the 256 figure)",
        (OURS, "decode_greedy_tokens_per_s"),
        (OURS, "decode_greedy_nocache_tokens_per_s"),
        5.0,
        "min",
    ),
    _target("real-data greedy sentences/s vs generate(), same weights", REAL_GREEDY, PEER, 2.0),
    (
        "real-data greedy BLEU, int8 minus float32",
        (OURS_INT8, "greedy_bleu"),
        (OURS, "greedy_bleu"),
        -0.3,
        "min_diff",
    ),
    # How far this project is from the engine users pick for CPU translation, at each
    # precision: stated, with no target of its own.
    *(
        _target(f"{text} vs {ct2}", figure, ct2, None, ours, "info")
        for ours, ct2 in ((OURS, CT2_FLOAT32), (OURS_INT8, CT2_INT8))
        for text, figure in (
            ("greedy tokens/s", GREEDY),
            ("sampling tokens/s", SAMPLE),
            ("beam-4 sentences/s", BEAM4),
            ("real-data greedy sentences/s", REAL_GREEDY),
            ("real-data beam-4 sentences/s", REAL_BEAM4),
        )
    ),
)


def _part(figure: str) -> str:
    if figure in PIPELINE_FIGURES:
        return "pipeline"
    if figure in REAL_DATA_FIGURES:
        return "real_data"
    return "decode" if figure.startswith("decode_") else "train"


def _peak_rss_key(record: dict, seen: set[str]) -> str:
    """'peak_rss_mib (train)' etc.: the run's parts from its `what` field, or (files written
    before it existed) from the figures the run printed before its peak."""
    what = record.get("what")
    parts = what.split(",") if isinstance(what, str) and what else sorted(seen)
    return f"{PEAK_RSS} ({'+'.join(parts) or 'run'})"


def _start_load(setup: dict, path: str) -> dict | None:
    """{'file', 'load', 'cpus'} of a run whose setup line shows a busy machine, else None."""
    load = setup.get("loadavg_1m", setup.get("loadavg_1m_before"))
    cpus = setup.get("cpus")
    if isinstance(load, int | float) and isinstance(cpus, int) and busy(load, cpus):
        return {"file": os.path.basename(path), "load": load, "cpus": cpus}
    return None


def read_figures(paths: Sequence[str]) -> dict[tuple[str, str], list[dict]]:
    """{(impl, figure): [record per round]} from JSON-lines files in round order: within a
    file the last record of a pair wins, and each file adds one round; peak memory rows keep
    one record, the largest. A record from a run that started on a busy machine carries
    `_busy` ({'file', 'load', 'cpus'})."""
    figures: dict[tuple[str, str], list[dict]] = {}
    for path in paths:
        for key, record in _file_figures(path).items():
            if not key[1].startswith(PEAK_RSS):
                figures.setdefault(key, []).append(record)
            elif key not in figures or figures[key][0]["value"] < record["value"]:
                figures[key] = [record]
    return figures


def _file_figures(path: str) -> dict[tuple[str, str], dict]:
    """{(impl, figure): record} of one file; the last record of a pair wins, except peak
    memory rows, which keep the largest."""
    figures = {}
    seen: set[str] = set()  # parts of the run in progress: its figures so far
    started_busy = None  # the run in progress: its setup line's load, if busy
    for record in _records(path):
        figure = record["figure"]
        if figure == "setup":
            started_busy = _start_load(record, path)
            continue
        if started_busy:
            record["_busy"] = started_busy
        figure = _row_name(record)
        key = (record["impl"], figure)
        if figure == PEAK_RSS:  # the last line of a run
            key, seen = (record["impl"], _peak_rss_key(record, seen)), set()
            if key in figures and figures[key]["value"] > record["value"]:
                continue
        elif figure in FIGURES:
            seen.add(_part(figure))
        figures[key] = record
    return figures


def _row_name(record: dict) -> str:
    """The row a record fills: its figure, with the model size it was measured at
    (`train_tokens_per_s [big]`) or the kind of work of a profile's row
    (`step_kind_ms (matrix products)`)."""
    figure = record["figure"]
    if figure == PROFILE_KIND:
        figure = f"{figure} ({record.get('kind')})"
    size = record.get("size")
    # A model size is a label ("big"); files written before throughput_train.py named its
    # peak product's matrix side `matmul_size` carry that side as an integer `size`.
    return f"{figure} [{size}]" if isinstance(size, str) and size else figure


def _records(path: str):
    """The figure records of a JSON-lines file (other lines are ignored)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "figure" in record and "impl" in record:
                yield record


def _fmt(value) -> str:
    if value is None:
        return ""
    if abs(value) >= 100:
        return f"{value:,.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{value:.3f}"


def _spread_cell(values: list[float], fmt) -> str:
    """The median, and with several rounds its min-max in brackets."""
    median = fmt(statistics.median(values))
    if len(values) < 2:
        return median
    between = " to " if min(values) < 0 else "-"  # "-0.3 to -0.1", not "-0.3--0.1"
    return f"{median} ({fmt(min(values))}{between}{fmt(max(values))})"


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def _round_ratios(top: list[dict], bottom: list[dict]) -> list[float]:
    """Round k's numerator over round k's denominator, for the rounds both have."""
    return [t["value"] / b["value"] for t, b in zip(top, bottom, strict=False) if b["value"]]


def _withheld(*rounds: list[dict]) -> bool:
    return any(r.get("_busy") for records in rounds for r in records)


def render(figures: dict[tuple[str, str], list[dict]]) -> str:
    if any(_size_of(name) for _, name in figures):
        return render_gpu(figures)
    impls = [i for i in IMPLS if any(k[0] == i for k in figures)]
    impls += sorted({k[0] for k in figures} - set(impls))
    lines = [
        "| figure | unit | " + " | ".join(impls) + " | ratio |",
        "|---|---|" + "---|" * len(impls) + "---|",
    ]
    peaks = sorted({k[1] for k in figures if k[1].startswith(PEAK_RSS)})
    for name in (*FIGURES, *peaks):
        row = [figures.get((impl, name), []) for impl in impls]
        if not any(row):
            continue
        lines.append(_figure_line(name, row, name in peaks))
    lines += ["", "| target | measured | needed | met |", "|---|---|---|---|"]
    for target in TARGETS:
        lines.append(_target_line(figures, *target))
    return "\n".join(lines + _busy_notes(figures)) + "\n"


def _size_of(name: str) -> str:
    return name[name.rindex("[") + 1 : -1] if name.endswith("]") else ""


def render_gpu(figures: dict[tuple[str, str], list[dict]]) -> str:
    """The accelerator table (benchmarks/gpu_side_by_side.sh): a row per figure and model
    size with this project, MarianMT eager and MarianMT under torch.compile; the ratio is
    ours over compiled MarianMT where it ran, else over eager; then GPU_TARGETS and the
    profile's device time by kind."""
    impls = [i for i in GPU_IMPLS if any(k[0] == i for k in figures)]
    lines = [
        "| figure | size | unit | " + " | ".join(impls) + " | ratio |",
        "|---|---|---|" + "---|" * len(impls) + "---|",
    ]
    sizes = sorted({_size_of(n) for _, n in figures} - {""}, key=_size_order)
    for size in sizes:
        for figure in GPU_FIGURES:
            row = [figures.get((impl, f"{figure} [{size}]"), []) for impl in impls]
            if any(row):
                lines.append(_gpu_line(figure, size, impls, row))
    lines += ["", "| target | measured | needed | met |", "|---|---|---|---|"]
    lines += [_target_line(figures, *target) for target in GPU_TARGETS]
    return "\n".join(lines + _profile_lines(figures) + _busy_notes(figures)) + "\n"


def _size_order(size: str) -> tuple[int, str]:
    order = {"base": 0, "big": 1}
    return (order.get(size.split("-")[0], 2), size)


def _gpu_line(figure: str, size: str, impls: list[str], row: list[list[dict]]) -> str:
    unit = next(records[0]["unit"] for records in row if records)
    cells = [
        _spread_cell([r["value"] for r in records], _fmt) if records else "" for records in row
    ]
    by_impl = dict(zip(impls, row, strict=True))
    ours = by_impl.get(OURS, [])
    peer = by_impl.get(PEER_COMPILED) or by_impl.get(PEER) or []
    ratio = ""
    if ours and peer and unit.endswith("/s"):
        ratios = _round_ratios(ours, peer)
        if ratios:
            ratio = _spread_cell(ratios, _ratio)
    return f"| `{figure}` | {size} | {unit} | " + " | ".join(cells) + f" | {ratio} |"


def _profile_lines(figures) -> list[str]:
    """Where the profiled step's device time goes: a row per kind, ms and share."""
    rows = [
        (name, records)
        for (impl, name), records in figures.items()
        if impl == OURS and name.startswith(PROFILE_KIND)
    ]
    if not rows:
        return []
    lines = [
        "",
        "| profiled step: kind of work | ms per step | share of the step |",
        "|---|---|---|",
    ]
    for name, records in sorted(rows, key=lambda nr: -nr[1][-1]["value"]):
        kind = name[len(PROFILE_KIND) + 2 : name.index(")")]
        share = records[-1].get("share")
        shown = f"{100 * share:.1f}%" if isinstance(share, int | float) else ""
        lines.append(f"| {kind} | {_fmt(records[-1]['value'])} | {shown} |")
    return lines


def _figure_line(name: str, row: list[list[dict]], peak: bool) -> str:
    unit = next(records[0]["unit"] for records in row if records)
    cells = [
        _spread_cell([r["value"] for r in records], _fmt) if records else "" for records in row
    ]
    ratio = ""
    if len(row) >= 2 and unit.endswith("/s"):
        ratios = _round_ratios(row[0], row[1])
        if ratios and all(ratios):
            ratio = "busy" if _withheld(row[0], row[1]) else _spread_cell(ratios, _ratio)
    label = f"`{PEAK_RSS}`{name[len(PEAK_RSS) :]}" if peak else f"`{name}`"
    return f"| {label} | {unit} | " + " | ".join(cells) + f" | {ratio} |"


def _target_line(figures, text: str, num, den, target, kind: str) -> str:
    top = figures.get(num, [])
    bottom = figures.get(den, []) if den else []
    values = _target_values(top, bottom, den, kind)
    need = _need(target, kind, den)
    if not values:
        return f"| {text} | not measured | {need} | |"
    if _withheld(top, bottom):
        return f"| {text} | withheld (busy) | {need} |  |"
    shown = _spread_cell(values, _target_format(den, kind))
    if kind == "info":
        return f"| {text} | {shown} | {need} |  |"
    clears = [_clears(v, target, kind) for v in values]
    if all(clears):
        verdict = "yes"
    elif _clears(statistics.median(values), target, kind):
        verdict = "unsettled"
    else:
        verdict = "no"
    return f"| {text} | {shown} | {need} | {verdict} |"


def _target_values(top: list[dict], bottom: list[dict], den, kind: str) -> list[float]:
    """The target's figure per round: a ratio or difference of the two sides, round by
    round, or the numerator's own values."""
    if not den:
        return [r["value"] for r in top]
    if kind == "min_diff":
        return [t["value"] - b["value"] for t, b in zip(top, bottom, strict=False)]
    return _round_ratios(top, bottom)


def _target_format(den, kind: str):
    if kind == "min_diff":
        return lambda v: f"{v:+.2f}"
    return _ratio if den else (lambda v: f"{v:.3f}")


def _clears(value: float, target: float, kind: str) -> bool:
    return value <= target if kind == "max" else value >= target


def _busy_notes(figures: dict[tuple[str, str], dict]) -> list[str]:
    runs = {
        (b["file"], b["load"], b["cpus"])
        for records in figures.values()
        for r in records
        if (b := r.get("_busy"))
    }
    if not runs:
        return []
    return [""] + [
        f"Withheld: the run in `{name}` started at load average {load:g} on {cpus} cores "
        f"(more than {MAX_BACKGROUND_LOAD_PER_CORE:g} per core); rerun it on a quiet machine."
        for name, load, cpus in sorted(runs)
    ]


def _need(target, kind: str, ratio) -> str:
    if kind == "info":
        return "(stated)"
    sign = ">=" if kind in ("min", "min_diff") else "<="
    if kind == "min_diff":
        return f"{sign} {target:+g}"
    return f"{sign} {target:g}x" if ratio else f"{sign} {target:g}"


def main(argv: Sequence[str] | None = None) -> int:
    from transformer.common.errors import UserError, exit_on_user_error

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="JSON-lines outputs of the benchmark scripts")
    parser.add_argument("--readme", help="write the table into this file's section")
    parser.add_argument("--section", default="Performance", help="README section marker name")
    args = parser.parse_args(argv)

    with exit_on_user_error():
        for path in args.files:
            if not os.path.isfile(path):
                raise UserError(f"{path} does not exist; run the benchmark scripts with --json")
        figures = read_figures(args.files)
        if not figures:
            raise UserError(f"no benchmark figures in {', '.join(args.files)}")
        table = render(figures)
        if args.readme:
            from transformer.research.report import update_readme

            changed = update_readme(args.readme, args.section, table)
            print(f"{args.readme}: section {args.section} {'updated' if changed else 'unchanged'}")
        else:
            sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a study page reads, all of it written by the sweep: the Sweep it ran (sweep.json, or
the config file given), its tables (results.csv, runs.csv, lr_grid.csv, read back by the
column definitions that wrote them, and results.md's text), and from each reported run's
directory its curves (metrics.jsonl), evaluation record (eval/<split>.json) and translations
(eval/<split>.{hyp,src,ref}.txt).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os

from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.common.metrics_file import METRICS_FILE, read_metrics
from transformer.research.sweep import columns
from transformer.research.sweep.runs import run_dir
from transformer.research.sweep.spec import SWEEP_FILE, Sweep, load_sweep, read_saved_sweep
from transformer.scoring.metrics import read_lines

RESULTS = "results.csv"


@dataclasses.dataclass
class Study:
    workdir: str
    sweep: Sweep
    table: list[dict]  # results.csv: one row per variant, as results.md shows them
    runs: list[dict]  # runs.csv: one row per run
    grid: list[dict]  # lr_grid.csv ([] without a learning-rate search)
    markdown: str  # results.md

    @property
    def reported(self) -> list[dict]:
        """The runs.csv rows of the runs the table reports, in the file's order."""
        return [r for r in self.runs if r["reported"]]

    def run_path(self, row: dict) -> str:
        return run_dir(self.workdir, row["variant"], row["seed"], row["lr_scale"])


def is_study(workdir: str) -> bool:
    return os.path.isfile(os.path.join(workdir, RESULTS))


def load(workdir: str, config: str | None = None) -> Study:
    """The study in `workdir`; `config` (a sweep config file) stands in for sweep.json."""
    return Study(
        workdir=workdir,
        sweep=_sweep(workdir, config),
        table=_csv(os.path.join(workdir, RESULTS), columns.TABLE),
        runs=_optional_csv(os.path.join(workdir, "runs.csv"), columns.RUNS),
        grid=_optional_csv(os.path.join(workdir, "lr_grid.csv"), columns.LR_GRID),
        markdown=_optional_text(os.path.join(workdir, "results.md")),
    )


def _sweep(workdir: str, config: str | None) -> Sweep:
    if config is not None:
        return load_sweep(config)
    sweep = read_saved_sweep(workdir)
    if sweep is None:
        raise UserError(
            f"{workdir} has no {SWEEP_FILE}; pass its sweep config with --config FILE, or "
            "write the file with transformer-sweep --config FILE --workdir DIR --report_only"
        )
    return sweep


def _csv(path: str, schema: list[columns.Column]) -> list[dict]:
    """The rows of one of the sweep's tables; a file that is not one is a one-line error."""
    try:
        rows = columns.read_csv(path, schema)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(
            f"cannot read {path} ({e}); rerun transformer-sweep --report_only"
        ) from None
    if any(row.get("variant") is None for row in rows):
        raise UserError(
            f"{path} has a row without a variant: not a sweep's table; rerun transformer-sweep "
            "--report_only"
        )
    return rows


def _optional_csv(path: str, schema: list[columns.Column]) -> list[dict]:
    return _csv(path, schema) if os.path.exists(path) else []


def _optional_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def curves(workdir: str) -> dict[str, dict[int, float]]:
    """{'valid': {step: validation loss}, 'train': {step: training loss}} of a run ({} each
    without metrics.jsonl)."""
    try:
        rows = read_metrics(os.path.join(workdir, METRICS_FILE))
    except UserError:
        rows = []
    valid = {
        r["step"]: r["loss"]
        for r in rows
        if r.get("kind") == "eval" and r.get("split", "valid") == "valid" and "loss" in r
    }
    train = {r["step"]: r["loss"] for r in rows if r.get("kind") == "train" and "loss" in r}
    return {"valid": valid, "train": train}


def eval_record(workdir: str, split: str) -> dict | None:
    try:
        with open(os.path.join(workdir, "eval", f"{split}.json"), encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def texts(workdir: str, split: str, kind: str) -> list[str] | None:
    """eval/<split>.<kind>.txt (kind: hyp, src or ref) as lines; None where absent."""
    path = os.path.join(workdir, "eval", f"{split}.{kind}.txt")
    return read_lines(path) if os.path.exists(path) else None


def texts_or_file(workdir: str, split: str, kind: str, fallback: str | None, count: int):
    """The run's eval/<split>.<kind>.txt, else the `fallback` file (a --references or
    --sources flag); None without either. Its line count must match the translations'."""
    found = texts(workdir, split, kind)
    path = os.path.join(workdir, "eval", f"{split}.{kind}.txt")
    if found is None and fallback:
        found, path = read_lines(fallback), fallback
    if found is not None and len(found) != count:
        raise UserError(
            f"{path} has {len(found)} lines but the runs translated {count} sentences; give "
            f"the {split} split's file"
        )
    return found


def code_versions(study: Study) -> dict[str, int]:
    """{'commit abc123 (dirty), source ...' | 'not recorded': number of finished reported
    runs}, from each run's provenance.json (its last start: the code that finished it)."""
    counts: dict[str, int] = {}
    for row in study.reported:
        if row["status"] != "done":
            continue
        starts = provenance.read(study.run_path(row))
        code = starts[-1]["code"] if starts else None
        if code is None:
            key = "not recorded (no provenance.json)"
        else:
            key = f"commit {code.get('git_commit') or '?'}" + (
                " (dirty)" if code.get("git_dirty") else ""
            )
            key += f", source {str(code.get('source_sha256'))[:12]}"
        counts[key] = counts.get(key, 0) + 1
    return counts

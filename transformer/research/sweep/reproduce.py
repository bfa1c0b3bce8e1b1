"""Does a study reproduce? `transformer-sweep --reproduce N` reruns N of its finished compared
runs, chosen at random (seeded) and spread over the arms, from the config each run recorded
(its `config.json`, the values it actually trained with), into a scratch directory, and says
per run whether the final validation loss, the test BLEU/chrF and the translations match the
recorded ones.

A rerun on the same code (source SHA-256), libraries and machine kind as the recorded run
(both `provenance.json`) must match it to the bit: training is deterministic given its config
(seeded initialisation, data order and dropout; a resumed run is bit-exact), so any difference
there is a failure, and the command exits 1. Where the setup differs (other code, library
versions or CPU; or a run recorded before provenance was) the report gives the differences and
what differs in the setup, which is how far the study's numbers move with it.

The scratch directory resumes like a sweep: a rerun that finished is read, not run again.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
from collections.abc import Sequence

from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.research.sweep import columns, lr_grid
from transformer.research.sweep.runs import Run, is_finished, outcome, read_eval
from transformer.research.sweep.spec import Sweep
from transformer.training import run_config

SCRATCH = "reproduce"  # under the sweep directory unless --scratch names another
RECORDED_CONFIG = "recorded_config"  # .json (a copy) and .py (what train.py --config loads)
# What must match for a bit-identical rerun: each a path into a provenance.json entry.
SETUP = {
    "code": ("code", "source_sha256"),
    "libraries": ("libraries",),
    "machine": ("machine",),
}
# The recorded path on a line of its own: a line with no space passes the line-length lint
# however deep the study lies, so a study kept in a linted repository stays clean.
CONFIG_MODULE = '''"""The config that this run recorded, for transformer-sweep --reproduce:
{source}
"""

import os

from transformer.training import run_config


def get_config():
    return run_config.load_file(os.path.join(os.path.dirname(__file__), "{name}"))
'''


def reported_runs(sweep: Sweep, runs: Sequence[Run]) -> list[Run]:
    """The finished compared runs at each variant's chosen learning rate: those the table
    rests on."""
    choices = lr_grid.choose(sweep.lr_grid, [outcome(r) for r in runs])
    scales = {name: c.scale for name, c in choices.items()}
    return [
        r
        for r in runs
        if r.compared and r.lr_scale == scales.get(r.variant, 1.0) and is_finished(r)
    ]


def choose(runs: Sequence[Run], count: int, seed: int) -> list[Run]:
    """`count` runs drawn with random.Random(seed), one arm at a time in a shuffled order of
    the arms, so that N >= the number of arms covers every arm."""
    if count < 1:
        raise UserError(f"--reproduce takes a positive number of runs, got {count}")
    if count > len(runs):
        raise UserError(
            f"--reproduce {count}: the study has only {len(runs)} finished reported run(s); "
            f"ask for at most {len(runs)}"
        )
    rng = random.Random(seed)
    arms: dict[str, list[Run]] = {}
    for run in runs:
        arms.setdefault(run.variant, []).append(run)
    queues = [rng.sample(members, len(members)) for members in arms.values()]
    rng.shuffle(queues)
    chosen: list[Run] = []
    while len(chosen) < count:
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop())
    return chosen


def rerun_of(run: Run, sweep_dir: str, scratch: str) -> Run:
    """The run again in `scratch` (its path below the sweep directory kept), training from a
    copy of the config it recorded rather than from today's sweep config."""
    where = os.path.join(scratch, os.path.relpath(run.workdir, sweep_dir))
    os.makedirs(where, exist_ok=True)
    recorded = os.path.join(run.workdir, run_config.CONFIG_FILE)
    if not os.path.exists(recorded):
        raise UserError(f"{recorded} is missing: {run.label} cannot be rerun as it trained")
    json_copy = os.path.join(where, RECORDED_CONFIG + ".json")
    shutil.copyfile(recorded, json_copy)
    module = os.path.join(where, RECORDED_CONFIG + ".py")
    with open(module, "w", encoding="utf-8") as f:
        f.write(CONFIG_MODULE.format(source=recorded, name=os.path.basename(json_copy)))
    return dataclasses.replace(run, workdir=where, base=module, overrides={})


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One rerun beside its recorded run."""

    run: Run
    recorded: dict  # {'final_valid_loss', 'bleu', 'chrf'}
    rerun: dict
    differing_sentences: int | None  # translations that differ (None: a side has none)
    setup_differs: list[str] | None  # of SETUP; None: the recorded run has no provenance

    @property
    def identical(self) -> bool:
        same = all(_same(self.recorded[k], self.rerun[k]) for k in self.recorded)
        return same and self.differing_sentences == 0

    @property
    def failed(self) -> bool:
        """Not identical although code, libraries and machine are the recorded ones."""
        return not self.identical and self.setup_differs == []

    @property
    def verdict(self) -> str:
        if self.identical:
            return "bit-identical"
        if self.setup_differs is None:
            return "differs (the recorded run has no provenance)"
        if not self.setup_differs:
            return "DIFFERS on the same code, libraries and machine"
        return f"differs (other {', '.join(self.setup_differs)})"


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def figures(run: Run) -> dict:
    """What a rerun must match: the final validation loss and the test scores."""
    record = read_eval(run) or {}
    return {
        "final_valid_loss": outcome(run)["final_valid_loss"],
        "bleu": record.get("bleu"),
        "chrf": record.get("chrf"),
    }


def _translations(run: Run) -> list[str] | None:
    path = os.path.join(run.workdir, "eval", f"{run.eval_split}.hyp.txt")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def differing_sentences(recorded: Run, rerun: Run) -> int | None:
    a, b = _translations(recorded), _translations(rerun)
    if a is None or b is None:
        return None
    return sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))


def setup_differences(recorded: Run, rerun: Run) -> list[str] | None:
    """Which of code, libraries and machine differ between the runs' last starts (None when
    either has no provenance)."""
    before, after = provenance.read(recorded.workdir), provenance.read(rerun.workdir)
    if not before or not after:
        return None
    last, now = before[-1], after[-1]
    return [name for name, path in SETUP.items() if _field(last, path) != _field(now, path)]


def _field(entry: dict, path: tuple[str, ...]):
    for key in path:
        entry = entry.get(key) if isinstance(entry, dict) else None
    return entry


def compare(recorded: Run, rerun: Run) -> Comparison:
    return Comparison(
        run=recorded,
        recorded=figures(recorded),
        rerun=figures(rerun),
        differing_sentences=differing_sentences(recorded, rerun),
        setup_differs=setup_differences(recorded, rerun),
    )


def _difference(key: str, label: str, spec: str):
    def value(row: dict):
        a, b = row[f"recorded_{key}"], row[f"rerun_{key}"]
        return None if a is None or b is None else b - a

    return columns.Column(f"{key}_difference", f"Δ {label}", spec=spec, value=value)


# One row per rerun: reproduce.csv, and reproduce.md's columns in this order.
TABLE: list[columns.Column] = [
    columns.Column("variant", "variant", spec="{}"),
    columns.Column("seed", "seed", spec="{}"),
    columns.Column("lr_scale", "lr", cell=lambda row, _: lr_grid.scale_label(row["lr_scale"])),
    columns.Column("recorded_final_valid_loss", "valid loss, recorded", spec="{:.6f}"),
    columns.Column("rerun_final_valid_loss", "rerun", spec="{:.6f}"),
    _difference("final_valid_loss", "valid loss", "{:+.2e}"),
    columns.Column("recorded_bleu", "BLEU, recorded", spec="{:.4f}"),
    columns.Column("rerun_bleu", "rerun", spec="{:.4f}"),
    _difference("bleu", "BLEU", "{:+.4f}"),
    columns.Column("recorded_chrf"),
    columns.Column("rerun_chrf"),
    _difference("chrf", "chrF", "{:+.4f}"),
    columns.Column("differing_sentences", "translations differing", spec="{}"),
    columns.Column("setup_differs", "setup differs", spec="{}"),
    columns.Column("verdict", "verdict", spec="{}"),
]


def row(comparison: Comparison) -> dict:
    out = {
        "variant": comparison.run.variant,
        "seed": comparison.run.seed,
        "lr_scale": comparison.run.lr_scale,
        "differing_sentences": comparison.differing_sentences,
        "setup_differs": _setup_cell(comparison.setup_differs),
        "verdict": comparison.verdict,
    }
    for key in comparison.recorded:
        out[f"recorded_{key}"] = comparison.recorded[key]
        out[f"rerun_{key}"] = comparison.rerun[key]
    return columns.complete(TABLE, out)


def _setup_cell(differs: list[str] | None) -> str:
    if differs is None:
        return "not recorded"
    return ", ".join(differs) or "none"


def summary(comparisons: Sequence[Comparison]) -> str:
    identical = sum(c.identical for c in comparisons)
    failed = sum(c.failed for c in comparisons)
    line = f"{identical} of {len(comparisons)} rerun(s) bit-identical to the recorded run"
    if failed:
        line += f"; {failed} DIFFER on the same code, libraries and machine: not reproducible"
    return line


def write(comparisons: Sequence[Comparison], sweep: Sweep, directory: str, command: str) -> str:
    """Writes reproduce.csv and reproduce.md into `directory`; returns the Markdown."""
    rows = [row(c) for c in comparisons]
    columns.write_csv(os.path.join(directory, "reproduce.csv"), TABLE, rows)
    context = columns.Context(sweep=sweep, table=rows)
    lines = [
        f"# Reproduction: {os.path.basename(sweep.path)}",
        "",
        f"Rendered by `{command}`: each run retrained from the config it recorded and "
        "evaluated again, beside its recorded figures. A rerun on the same code (source "
        "SHA-256), libraries and machine as the recorded run must be bit-identical; 'setup "
        "differs' names what was not the same (provenance.json of each).",
        "",
        *columns.markdown(TABLE, rows, context),
        "",
        summary(comparisons) + ".",
        "",
    ]
    text = "\n".join(lines)
    with open(os.path.join(directory, "reproduce.md"), "w", encoding="utf-8") as f:
        f.write(text)
    return text

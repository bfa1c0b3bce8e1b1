"""Which page a directory gets: a study (results.csv, written by transformer-sweep) or a run
(metrics.jsonl or eval/*.json, written by transformer-train and transformer-eval)."""

from __future__ import annotations

import os

from transformer.common.errors import UserError
from transformer.research.html import run_page, study_files, study_page


def write(
    directory: str,
    out: str | None,
    command: str,
    *,
    config: str | None = None,
    references: str | None = None,
    sources: str | None = None,
    analysis: str | None = None,
) -> str:
    """Writes the page of `directory` (a study or a run); returns its path."""
    if not os.path.isdir(directory):
        raise UserError(
            f"--html {directory}: no such directory; give a sweep's --workdir or a run's"
        )
    if out is not None:
        _check_out(out)
    if study_files.is_study(directory):
        return study_page.write(directory, out, command, config, references, sources)
    if run_page.is_run(directory):
        return run_page.write(directory, out, command, analysis, references, sources)
    raise UserError(
        f"--html {directory} is neither a study (results.csv, written by transformer-sweep) nor "
        "a run (metrics.jsonl or eval/*.json); give a sweep's --workdir or a run directory"
    )


def _check_out(out: str) -> None:
    """--out must name a file whose directory exists and can be written."""
    if os.path.isdir(out):
        raise UserError(f"--out {out} is a directory; give the HTML file, e.g. {out}/page.html")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UserError(f"--out {out}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UserError(f"--out {out}: directory {parent} is not writable; write elsewhere")

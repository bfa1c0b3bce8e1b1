"""Runs pooled into one arm must come from the same code and data: read each run's
provenance (common/provenance.py) and refuse, in one line naming the runs and what differs,
an arm whose runs ran different source code or trained on different data, unless the study
is told to pool them anyway (`--allow_mixed_provenance`), in which case the report lists
every such arm under the table.

A run's code is the set of source SHA-256s of all its starts (a run resumed under other
code has two), its data the set of its starts' data fingerprints. Runs written before
provenance was recorded have neither and are left out of the check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.research.sweep.runs import Run

ALLOW_FLAG = "--allow_mixed_provenance"


def run_identity(run: Run) -> dict[str, tuple[str, ...]] | None:
    """{'code': source hashes, 'data': data fingerprints} of a run, or None without a record."""
    starts = provenance.read(run.workdir)
    if not starts:
        return None
    return {
        "code": tuple(sorted({s["code"]["source_sha256"] for s in starts})),
        "data": tuple(sorted({json.dumps(s["data"], sort_keys=True) for s in starts})),
    }


def mixed_arms(runs: Sequence[Run]) -> list[str]:
    """One description per arm whose recorded runs differ in code or data ([] when none)."""
    arms: dict[str, list[tuple[Run, dict]]] = {}
    for run in runs:
        identity = run_identity(run)
        if identity is not None:
            arms.setdefault(run.variant, []).append((run, identity))
    out = []
    for variant, members in arms.items():
        for what, label in (("code", "source"), ("data", "data")):
            groups: dict[tuple, list[str]] = {}
            for run, identity in members:
                groups.setdefault(identity[what], []).append(_run_name(run))
            if len(groups) > 1:
                out.append(
                    f"variant {variant}: its runs ran different {what} ({_groups(groups, label)})"
                )
    return out


def _groups(groups: dict[tuple, list[str]], label: str) -> str:
    """'seed 0, seed 1: source 1a2b3c4d5e6f; seed 2: source 9f8e7d6c5b4a'."""
    return "; ".join(f"{', '.join(names)}: {label} {_short(key)}" for key, names in groups.items())


def check(runs: Sequence[Run], allow_mixed: bool) -> list[str]:
    """The mixed arms (for the report's notes) when allowed; otherwise a UserError naming the
    first and how to proceed."""
    mixed = mixed_arms(runs)
    if mixed and not allow_mixed:
        more = f" (and {len(mixed) - 1} more)" if len(mixed) > 1 else ""
        raise UserError(
            f"{mixed[0]}{more}; rerun them on one code and data, or pass {ALLOW_FLAG} to "
            "pool them anyway (the report then marks the arm)"
        )
    return mixed


def _run_name(run: Run) -> str:
    lr = "" if run.lr_scale == 1.0 else f" lr x{run.lr_scale:g}"
    return f"seed {run.seed}{lr}"


def _short(key: tuple[str, ...]) -> str:
    """The hashes of one group, 12 characters each (data fingerprints hashed first)."""
    shown = [k if len(k) == 64 else hashlib.sha256(k.encode()).hexdigest() for k in key]
    return "+".join(h[:12] for h in shown)

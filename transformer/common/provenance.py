"""Where a run's numbers come from: the code, the libraries, the machine and the data, written
into its directory each time training starts (`provenance.json`), so a study can tell runs of
the same code from runs of different code.

Each start appends one entry: the step it started from, the time, and

- `code`: this package's version, a SHA-256 of its installed source files (every `.py` below
  the package, by relative path and content: what actually ran, whatever git says), and,
  where the package sits in a git checkout, the commit and whether tracked files differ from
  it (`git_dirty`);
- `libraries`: the versions of Python, JAX, jaxlib, Flax, Optax, Orbax and NumPy;
- `machine`: `machine.describe_machine` of the backend;
- `data`: what the caller fingerprints the data with (the training loop: the vocabularies'
  fingerprints and a SHA-256 of the tokenized training split).

A run resumed under other code shows two entries that differ; `read` returns them all.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path

from transformer.common.fileio import atomic_write
from transformer.common.machine import describe_machine

PROVENANCE_FILE = "provenance.json"
PACKAGE = "transformer"
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the installed `transformer` package


def source_digest(root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 over the package's `.py` files: each relative path and its bytes, in order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_state(root: Path = PACKAGE_ROOT) -> dict:
    """{'git_commit', 'git_dirty'} of the checkout holding `root` (None, None outside one or
    without git): dirty when a tracked file differs from the commit."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit.strip(), "git_dirty": None if status is None else bool(status)}


def library_versions() -> dict:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def code_provenance() -> dict:
    """{'package_version', 'source_sha256', 'git_commit', 'git_dirty'} of the running code."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"package_version": version, "source_sha256": source_digest(), **git_state()}


def entry(start_step: int, data: dict, backend: str) -> dict:
    """One start's provenance (module docstring)."""
    return {
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "start_step": int(start_step),
        "code": code_provenance(),
        "libraries": library_versions(),
        "machine": describe_machine(backend),
        "data": data,
    }


def read(workdir: str) -> list[dict]:
    """Every start's entry, oldest first ([] for a run without the file)."""
    path = os.path.join(workdir, PROVENANCE_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)["starts"]


def record(workdir: str, start: dict) -> None:
    """Appends `start` (an `entry`) to the run's provenance file, atomically."""
    starts = [*read(workdir), start]
    text = json.dumps({"starts": starts}, indent=2, sort_keys=True) + "\n"
    atomic_write(os.path.join(workdir, PROVENANCE_FILE), text)

"""Runs that several tests read, each built once per test session.

The first pytest-xdist worker to ask for one builds it (under a file lock, in the session's
shared folder that conftest.py makes) and every later asker, on any worker, reads the same
directory: the suite trains each such run once, however its readers are spread over the
workers. Readers must leave a run as they found it: a test that damages, resumes or moves a
run works on a copy (tests/test_bad_inputs.copy_run).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable

from tests.helpers import run, tiny_args

SHARED_DIR_ENV = "TRANSFORMER_TESTS_SHARED_DIR"  # set by conftest.py for the whole session
DONE = ".built"  # FOLDER.built, written last: without it, a build that failed or was cut

# train.py on configs/default.py made tiny (tests/helpers.tiny_args), checkpoints at steps
# 10 and 20, a train row every step, evaluated once at the end without BLEU's decoding.
CHECKPOINTED_RUN = dict(
    train__num_steps=20,
    train__checkpoint_every=10,
    train__log_every=1,
    train__eval_every=1000,
    train__eval_bleu_sentences=0,
)


def built_once(name: str, build: Callable[[str], None]) -> str:
    """The folder `build(folder)` fills, built by the first caller of this session and read
    by every other. A build that raised is built again by the next caller (and fails it too,
    with its own error) rather than handed out half made."""
    folder = os.path.join(os.environ[SHARED_DIR_ENV], name)
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.exists(folder + DONE):
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            build(folder)
            with open(folder + DONE, "w") as f:
                json.dump(fingerprint(folder), f)
    return folder


def changed_files(folder: str) -> list[str]:
    """The files of a shared folder that a reader added, removed or changed since its build."""
    with open(folder + DONE) as f:
        built = json.load(f)
    now = fingerprint(folder)
    return sorted(name for name in built.keys() | now.keys() if built.get(name) != now.get(name))


def fingerprint(folder: str) -> dict[str, list[int]]:
    """Each file's [size, modification time in ns], by its path inside `folder`."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            stat = os.stat(os.path.join(root, name))
            path = os.path.relpath(os.path.join(root, name), folder)
            files[path] = [stat.st_size, stat.st_mtime_ns]
    return files


def checkpointed_run() -> tuple[str, str]:
    """(workdir, what train.py printed, stdout then stderr) of the CHECKPOINTED_RUN."""
    folder = built_once("checkpointed_run", _train_checkpointed)
    with open(os.path.join(folder, "train_output.json")) as f:
        return os.path.join(folder, "run"), json.load(f)


def _train_checkpointed(folder: str) -> None:
    workdir = os.path.join(folder, "run")
    args = ["train.py", "--config", "configs/default.py", "--workdir", workdir]
    proc = run([*args, *tiny_args(**CHECKPOINTED_RUN)], check=True)
    with open(os.path.join(folder, "train_output.json"), "w") as f:
        json.dump(proc.stdout + proc.stderr, f)

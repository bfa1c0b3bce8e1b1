import json
import os
import shutil
import sys
import tempfile

import pytest

from tests import shared_runs
from tests.shared_runs import SHARED_DIR_ENV

# Tests run on CPU; keep XLA from grabbing every core twice under pytest-xdist.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile hundreds of tiny programs and run each a few times: skipping LLVM's
# optimisation passes saves a fifth of the suite's time (fast tier 504 -> 391 CPU-s). XLA's
# own HLO passes still run, so the programs compute the same thing; results may differ from an
# optimised build in the last bits only, and every comparison in the suite is between programs
# built the same way or within a tolerance. Subprocesses inherit it; a user's XLA_FLAGS win.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"
os.environ.setdefault("XLA_FLAGS", TEST_XLA_FLAGS)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# JAX's persistent compilation cache, one per test session, for the hundreds of train.py /
# eval.py / decode.py subprocesses the suite starts: they compile the same programs again and
# again (a 20-step train.py subprocess on the quiet 2-core CPU: 14.7 s without, 11.2 s with
# the cache filled). Entries are keyed by the program's HLO, the compile options, XLA_FLAGS
# and the jax/jaxlib versions, so a hit is the executable a fresh compile builds. A fresh
# directory per session keeps the suite's figures those of a clean clone; a user's own cache
# dir wins (point it at a lasting folder to make reruns of the inner loop faster still).
COMPILE_CACHE_ENV = {
    # The programs that take long to compile (train, eval and decode steps) hold nearly all
    # of a subprocess's compile time; caching the thousands of millisecond ones too would
    # cost more in writes and lookups than it saves.
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.2",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    # A size limit turns on JAX's file lock around each read and write: without it one
    # process can read an entry another is still writing (a warning, and a recompile). Each
    # write then scans every entry, which the threshold above keeps to a few hundred.
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(4 << 30),
}


def pytest_configure(config):
    """The controller (or the only process) makes the session's folders; xdist workers and
    every subprocess inherit them through the environment."""
    if _runs_tests(config):
        _no_compile_cache_in_this_process()
    if hasattr(config, "workerinput"):
        return
    config._session_dirs = []
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = _session_dir(config, "jax-cache")
        for name, value in COMPILE_CACHE_ENV.items():
            os.environ.setdefault(name, value)
    os.environ[SHARED_DIR_ENV] = _session_dir(config, "shared-runs")


def _runs_tests(config) -> bool:
    """An xdist worker or the only process; not the xdist controller, which needs no JAX."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def _no_compile_cache_in_this_process():
    """The compile cache serves the suite's subprocesses. In the test processes themselves,
    tests compile thousands of millisecond programs, each once per process: looking each up
    and writing it costs more than it saves (tests/test_model.py on the loaded 2-core machine:
    173 s without, 295 s with)."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


def _session_dir(config, what: str) -> str:
    path = tempfile.mkdtemp(prefix=f"transformer-tests-{what}-")
    config._session_dirs.append(path)
    return path


def pytest_unconfigure(config):
    for path in getattr(config, "_session_dirs", ()):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def checkpointed_run():
    """(workdir, train.py's output) of tests/shared_runs.CHECKPOINTED_RUN, trained once; the
    session fails if a test changed it (tests that change a run work on a copy)."""
    workdir, output = shared_runs.checkpointed_run()
    yield workdir, output
    changed = shared_runs.changed_files(os.path.dirname(workdir))
    assert not changed, f"a test changed the shared run {workdir}: {changed[:10]}"


# Module fixtures that train a run; with `--dist loadgroup` every test using one of them
# goes to the same xdist worker, so each run is trained once per suite, not once per worker.
SHARED_RUN_FIXTURES = ("trained", "trained_run")
# Each module's seconds in a full run on the 2-core machine (tests/scripts/module_seconds.py).
MODULE_SECONDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_seconds.json")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        for name in SHARED_RUN_FIXTURES:
            if _module_scoped(fixtures, name):
                item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{name}"))
    _costliest_modules_first(items)


def _module_scoped(fixtures, name) -> bool:
    definitions = fixtures.name2fixturedefs.get(name) if fixtures else None
    return bool(definitions) and definitions[-1].scope == "module"


def _costliest_modules_first(items):
    """xdist hands out tests in this order (after its groups): the long modules start early
    and the short ones fill the end, so both workers finish together. Each module's tests
    stay together and in their order (its module fixtures are built once per worker)."""
    with open(MODULE_SECONDS) as f:
        seconds = json.load(f)
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))

import os
import sys

import pytest

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

# Module fixtures that train a run; with `--dist loadgroup` every test using one of them
# goes to the same xdist worker, so each run is trained once per suite, not once per worker.
SHARED_RUN_FIXTURES = ("trained", "trained_run")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in SHARED_RUN_FIXTURES:
            if name in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{name}"))

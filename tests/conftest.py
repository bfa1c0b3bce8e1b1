import os
import sys

# Tests run on CPU; keep XLA from grabbing every core twice under pytest-xdist.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

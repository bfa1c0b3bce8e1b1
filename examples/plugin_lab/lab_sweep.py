"""my_lab's positional scheme against the one it generalises: KERPLE-log vs ALiBi, two arms
of examples/plugin_lab/lab.py, three seeds each.

Command (from the repository root):
    PYTHONPATH=examples/plugin_lab transformer-sweep --config examples/plugin_lab/lab_sweep.py \
        --workdir runs/lab_sweep
Every run trains and evaluates in its own subprocess, which imports my_lab from the run's
config (plugins.modules) and finds it on the PYTHONPATH it inherits.
"""


def get_config():
    return {
        "base": "examples/plugin_lab/lab.py",
        "variants": {"kerple_log": {}, "alibi": {"model.position": "alibi"}},
        "baseline": "alibi",
        "seeds": [0, 1, 2],
        "eval_overrides": {"decode.strategy": "greedy"},
    }

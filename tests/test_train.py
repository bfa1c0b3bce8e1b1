"""Training runs end to end: the loss falls, resume is exact, device layouts agree."""

import json
import os

import jax
import numpy as np
import pytest

from tests.helpers import fast_subset, run, tiny_config
from transformer.common.metrics_file import read_metrics
from transformer.training.checkpoint import Checkpointer
from transformer.training.loop import train_and_evaluate


def train_losses(workdir):
    return {
        r["step"]: r["loss"]
        for r in read_metrics(os.path.join(workdir, "metrics.jsonl"))
        if r["kind"] == "train"
    }


def test_default_config_trains_and_loss_falls(tmp_path):
    workdir = str(tmp_path / "run")
    config = tiny_config(
        train__num_steps=150, train__log_every=5, train__eval_every=150, train__checkpoint_every=75
    )
    result = train_and_evaluate(config, workdir)
    assert result.step == 150
    losses = train_losses(workdir)
    assert sorted(losses) == list(range(5, 151, 5))
    assert losses[150] < losses[5] - 1.5, losses  # in nats, from ~ln(vocab) at the start
    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert all({"loss", "learning_rate", "tokens_per_s", "nll"} <= set(r) for r in train_rows)
    evals = [r for r in rows if r["kind"] == "eval"]
    assert evals and evals[-1]["step"] == 150 and 0 <= evals[-1]["bleu"] <= 100
    assert Checkpointer(workdir, read_only=True).all_steps() == [75, 150]
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["model"]["d_model"] == 32
    assert os.path.exists(os.path.join(workdir, "vocab", "shared.model"))


# A stop and a rerun in-process. Resuming subword sampling and Philox dropout bitwise, after
# a SIGKILL, is tests/test_faults.py::test_kill9_resume_with_random_draws_is_the_uninterrupted_run.
def test_resumed_run_reproduces_uninterrupted_run(tmp_path):
    overrides = dict(
        train__log_every=1,
        train__checkpoint_every=10,
        train__eval_every=1000,
        train__eval_bleu_sentences=0,
        model__dropout_rate=0.1,
    )
    straight = str(tmp_path / "straight")
    train_and_evaluate(tiny_config(train__num_steps=30, **overrides), straight)
    resumed = str(tmp_path / "resumed")
    first = train_and_evaluate(tiny_config(train__num_steps=20, **overrides), resumed)
    assert first.step == 20
    second = train_and_evaluate(tiny_config(train__num_steps=30, **overrides), resumed)
    assert second.step == 30
    a, b = train_losses(straight), train_losses(resumed)
    assert sorted(b) == list(range(1, 31))  # no duplicate or missing steps after resume
    assert [a[s] for s in range(1, 31)] == [b[s] for s in range(1, 31)]  # bitwise
    pa = Checkpointer(straight, read_only=True)
    pb = Checkpointer(resumed, read_only=True)
    template = _abstract(straight)
    sa, _, _ = pa.restore(30, template)
    sb, _, _ = pb.restore(30, template)
    for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _abstract(workdir):
    from transformer.training import run_config
    from transformer.training.optim import make_optimizer
    from transformer.training.run_state import abstract_train_state

    config = run_config.load(workdir)
    model_cfg = run_config.validate(config).model
    state = abstract_train_state(model_cfg, make_optimizer(config.train)[0])
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state}


# The fast tier checks an FSDP-sharded mesh and pmap; the full suite every layout.
@pytest.mark.parametrize(
    "layouts", fast_subset(["mesh_fsdp2,pmap", "mesh,mesh_accum2"], ["mesh_fsdp2,pmap"])
)
def test_mesh_fsdp_pmap_and_accumulation_match_one_device(layouts):
    proc = run(["tests/scripts/parallel_equivalence.py", layouts], timeout=900, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in layouts.split(","):
        assert result[name]["loss_diff"] < 1e-5, (name, result)
        assert result[name]["param_diff"] < 1e-5, (name, result)
    assert result["losses"][-1] < result["losses"][0]


BAD_CONFIG_VALUES = [
    ("--config.train.schedule=linear", "unknown train.schedule 'linear'"),
    ("--config.model.num_heads=5", "num_heads=5 must divide d_model=256"),
    ("--config.train.nonexistent=1", "nonexistent"),
    ("--config.data.batching=random", "data.batching='random'"),
    ("--config.train.remat=full", "train.remat must be one of none, block"),
    ("--config.model.attention_impl=flash", "unknown attention_impl 'flash'"),
    ("--config.model.attention_impl=cudnn", "needs dtype='bfloat16'"),
    ("--config.model.attention_impl=cudnn --config.model.dtype=bfloat16", "needs an NVIDIA GPU"),
]


@pytest.mark.parametrize("override,message", fast_subset(BAD_CONFIG_VALUES, BAD_CONFIG_VALUES[1:2]))
def test_bad_config_values_give_one_line_errors(tmp_path, override, message):
    proc = run(
        [
            "train.py",
            "--config",
            "configs/default.py",
            "--workdir",
            str(tmp_path / "w"),
            *override.split(),
        ]
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]

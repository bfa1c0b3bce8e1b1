"""Run with 4 fake CPU devices: mesh, mesh+FSDP, pmap and gradient accumulation must give
the losses and parameters of one device. Prints one JSON line of the max differences.

    python tests/scripts/parallel_equivalence.py [LAYOUT,...]   (default: all of LAYOUTS)
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=4"]
)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from transformer import ModelConfig, Transformer  # noqa: E402
from transformer.training.base_config import get_base_config  # noqa: E402
from transformer.training.optim import make_optimizer  # noqa: E402
from transformer.training.parallel import Parallel  # noqa: E402
from transformer.training.steps import init_state, make_train_step  # noqa: E402


def batches(n, rows=8, length=12):
    rng = np.random.RandomState(0)
    out = []
    for _ in range(n):
        src = rng.randint(4, 40, (rows, length)).astype(np.int32)
        tgt = rng.randint(4, 40, (rows, length)).astype(np.int32)
        src[:, rng.randint(6, length) :] = 0
        tgt[:, rng.randint(4, length) :] = 0
        pos = np.broadcast_to(np.arange(length), (rows, length)).astype(np.int32)
        out.append(
            dict(
                src=src,
                tgt=tgt,
                src_segments=(src != 0).astype(np.int32),
                tgt_segments=(tgt != 0).astype(np.int32),
                src_positions=pos,
                tgt_positions=pos,
            )
        )
    return out


def run(kind, fsdp, accum):
    config = get_base_config().train
    config.warmup_steps, config.grad_accum_steps = 2, accum
    # Adam divides by sqrt(v) + eps: with the default eps 1e-9, gradient entries near zero
    # turn float summation-order noise (different device splits) into updates of up to the
    # learning rate. A larger eps keeps the comparison about the parallel layouts.
    config.adam_eps = 1e-3
    optimizer, schedule = make_optimizer(config)
    cfg = ModelConfig(
        vocab_size=40,
        d_model=16,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        dropout_rate=0.0,
    )
    graphdef, state = init_state(Transformer(cfg, rngs=nnx.Rngs(0)), optimizer)
    rng = jax.random.key(0)
    losses = []
    if kind == "single":
        step = jax.jit(make_train_step(graphdef, optimizer, schedule, config))
        for batch in batches(1) * 4:
            state, metrics = step(state, batch, rng)
            losses.append(float(metrics["loss"]))
        return losses, state.params
    parallel = Parallel(kind, fsdp)
    step = parallel.compile_train_step(
        lambda axis: make_train_step(graphdef, optimizer, schedule, config, axis_name=axis), state
    )
    state = parallel.place_state(state)
    for batch in batches(1) * 4:
        state, metrics = step(state, parallel.shard_batch(batch), rng)
        losses.append(float(metrics["loss"]))
    return losses, parallel.logical_state(state).params


# name: (parallelism, fsdp, grad_accum_steps)
LAYOUTS = {
    "mesh": ("mesh", 1, 1),
    "mesh_fsdp2": ("mesh", 2, 1),
    "pmap": ("pmap", 1, 1),
    "mesh_accum2": ("mesh", 1, 2),
}


def main():
    assert jax.device_count() == 4
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(LAYOUTS)
    ref_losses, ref_params = run("single", 1, 1)
    result = {}
    for name in names:
        losses, params = run(*LAYOUTS[name])
        diffs = jax.tree.map(
            lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), params, ref_params
        )
        result[name] = {
            "loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)),
            "param_diff": max(jax.tree.leaves(diffs)),
        }
    result["losses"] = ref_losses
    print(json.dumps(result))


if __name__ == "__main__":
    main()

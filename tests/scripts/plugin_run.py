"""Checks a run trained with examples/plugin_lab's my_lab, in a process that finds my_lab
only through PYTHONPATH, as a user's process would. Prints one JSON line.

    PYTHONPATH=examples/plugin_lab python tests/scripts/plugin_run.py WORKDIR
"""

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from tests.helpers import cached_logits  # noqa: E402
from transformer import restore_run  # noqa: E402
from transformer.common.special_ids import BOS_ID, EOS_ID  # noqa: E402
from transformer.inference.translator import Translator  # noqa: E402


def cache_difference(model) -> float:
    """Largest |cached - uncached| logit over random sources and teacher-forced targets."""
    rng = np.random.default_rng(0)
    src = rng.integers(4, model.cfg.vocab_size, (3, 9))
    src[:, -1], src[1, 5:] = EOS_ID, 0  # one padded row
    tgt_in = rng.integers(4, model.cfg.vocab_size, (3, 7))
    tgt_in[:, 0] = BOS_ID
    src, tgt_in = jnp.asarray(src, jnp.int32), jnp.asarray(tgt_in, jnp.int32)
    graphdef, state = nnx.split(model)

    @jax.jit  # one compiled program: op-by-op, the token loop alone takes longer
    def difference(state):
        m = nnx.merge(graphdef, state)
        full = m(src, tgt_in)  # [B, T, V]
        return jnp.max(jnp.abs(cached_logits(m, src, tgt_in) - full))

    return float(difference(state))


def outputs(run, sources, **settings) -> list:
    """Token ids of the run's translations under its decode settings with `settings` changed."""
    new = dataclasses.replace(run.translator.settings, **settings)
    t = run.translator
    translator = Translator(t.graphdef, t.model_cfg, new, t.src_tok, t.tgt_tok)
    return translator.translate_ids(run.params, sources)[0]


def main(workdir: str) -> None:
    run = restore_run(workdir)  # imports my_lab, named in the run's config.json
    model = nnx.merge(run.graphdef, run.params)
    rng = np.random.default_rng(1)
    sources = [[*rng.integers(4, 100, n).tolist(), EOS_ID] for n in (3, 5, 8, 4)]
    hot = dict(strategy="sample", temperature=5.0, seed=3)  # far from greedy unless filtered
    result = {
        "position": type(model.encoder_positions).__name__,
        "activation": type(model.encoder_layers[0].ffn.act).__name__,
        "cache_max_abs_diff": cache_difference(model),
        "slope_weights": np.asarray(model.decoder_positions.slope_weight[...]).tolist(),
        "greedy": outputs(run, sources, strategy="greedy"),
        "min_p_1": outputs(run, sources, filters="min_p=1.0", **hot),
        "min_p_0": outputs(run, sources, filters="min_p=0", **hot),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])

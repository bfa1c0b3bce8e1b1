"""Small shared pieces of the test suite: a tiny run config and a subprocess runner."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def recipe(name: str):
    """The ConfigDict of configs/<name>.py, loaded by path as train.py --config loads it."""
    from transformer import load_config_file

    return load_config_file(os.path.join(ROOT, "configs", f"{name}.py"))


def tiny_model_config(**overrides):
    """A 1+1-layer, d_model 16 ModelConfig for in-process model tests; overrides win."""
    from transformer import ModelConfig

    values = dict(
        vocab_size=40,
        d_model=16,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        max_len=16,
        dropout_rate=0.0,
    )
    return ModelConfig(**{**values, **overrides})


def tiny_config(**train_overrides):
    """configs/default.py shrunk to seconds: a 2-layer model on a small synthetic corpus."""
    config = recipe("default")
    m = config.model
    m.d_model, m.num_heads, m.d_ff = 32, 4, 64
    m.num_encoder_layers = m.num_decoder_layers = 1
    m.max_len = 64
    m.dropout_rate = 0.0
    d = config.data
    d.vocab_size = 200
    d.synthetic_train_size, d.synthetic_eval_size = 1500, 40
    d.max_source_len = d.max_target_len = 32
    t = config.train
    t.batch_size, t.num_steps, t.warmup_steps = 16, 40, 10
    t.schedule = "rsqrt"
    t.learning_rate = 3e-3
    t.log_every = t.eval_every = t.checkpoint_every = 20
    t.eval_bleu_sentences = 8
    config.decode.batch_size = 8
    config.decode.max_len_b = 5
    for key, value in train_overrides.items():
        section, _, field = key.partition("__")
        config[section][field] = value
    return config


def tiny_args(**overrides) -> list[str]:
    """tiny_config(**overrides) as the `--config.section.field=value` flags that turn
    configs/default.py into it (only the fields that differ)."""
    default, config = recipe("default"), tiny_config(**overrides)
    args = []
    for section in config.keys():
        for field in config[section].keys():
            value = config[section][field]
            if value != default[section][field]:
                args.append(f"--config.{section}.{field}={value}")
    return args


def run(args, *, env=None, timeout=600, check=False):
    """Runs a project command in a subprocess (from the repository root)."""
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def fast_subset(cases, fast) -> list:
    """Parametrize cases in which those outside `fast` are marked slow: the fast tier
    (`-m "not slow"`) runs a concept's representatives, the full suite every case."""
    cases, fast = list(cases), list(fast)
    missing = [case for case in fast if case not in cases]
    assert not missing, f"fast cases that are not cases: {missing}"
    return [
        case if case in fast else pytest.param(*_as_tuple(case), marks=pytest.mark.slow)
        for case in cases
    ]


def _as_tuple(case):
    return case if isinstance(case, tuple) else (case,)


def cached_logits(model, src, tgt_in):
    """Feeds tgt_in one token at a time through the KV cache; returns [B, T, V]."""
    import jax.numpy as jnp

    segments = (src != 0).astype(jnp.int32)
    encoded = model.encode(src, src_segments=segments)
    cross = model.cross_kv(encoded)
    cache = model.init_cache(src.shape[0], tgt_in.shape[1] + 2)
    steps = []
    for i in range(tgt_in.shape[1]):
        logits, cache = model.decode(
            None,
            segments,
            tgt_in[:, i : i + 1],
            cross_kv=cross,
            cache=cache,
            cache_index=jnp.int32(i),
        )
        steps.append(logits)
    return jnp.concatenate(steps, axis=1)


def next_token_logits(model, source: list[int], prefix: list[int], pad_to: int = 16):
    """Logits [V] of the token after BOS + prefix given source, by one full forward pass (no
    cache): the naive reference of the searches. Compiled once per model and source length:
    the target is padded to `pad_to` (with EOS), which cannot change the logits read at the
    prefix's end because the decoder is causal."""
    import jax.numpy as jnp

    from transformer.common.special_ids import BOS_ID, EOS_ID

    assert len(prefix) < pad_to, (prefix, pad_to)
    tgt_in = [BOS_ID, *prefix] + [EOS_ID] * (pad_to - 1 - len(prefix))
    src = jnp.asarray([source], jnp.int32)
    return _full_forward()(model, src, jnp.asarray([tgt_in], jnp.int32))[0, len(prefix)]


@functools.cache
def _full_forward():
    from flax import nnx

    return nnx.jit(lambda model, src, tgt_in: model(src, tgt_in))

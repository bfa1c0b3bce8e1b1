"""Adding a positional scheme is one class: a scheme defined and registered in this file alone
(no edit to the package) builds from the config, matches its formula, decodes with the KV
cache as the full pass does, trains, checkpoints and translates with every search."""

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import next_token_logits, tiny_config, tiny_model_config
from tests.test_translate import cached_logits
from transformer import Transformer, restore_run, train_and_evaluate
from transformer.common.special_ids import EOS_ID
from transformer.inference.translator import Translator
from transformer.model.position_schemes import SCHEMES, PositionScheme, register
from transformer.training.logger import read_metrics

NAME = "test_distance_decay"


@register(NAME)
class LearnedDistanceDecay(PositionScheme):
    """A learned penalty per head on the query-key distance: bias -softplus(w_h) * |i - j|."""

    def __init__(self, cfg, *, causal: bool, rngs: nnx.Rngs):
        self.weight = nnx.Param(jnp.zeros((cfg.num_heads,), jnp.float32))  # [H]

    def bias(self, q_positions, k_positions):
        distance = jnp.abs(q_positions[:, :, None] - k_positions[:, None, :])  # [B, Tq, Tk]
        slopes = jax.nn.softplus(self.weight[...])  # [H]
        return -slopes[None, :, None, None] * distance[:, None].astype(jnp.float32)


def test_the_scheme_is_a_config_value_and_unknown_names_list_it():
    assert SCHEMES[NAME] is LearnedDistanceDecay
    assert tiny_model_config(position=NAME).position == NAME
    with pytest.raises(ValueError, match=f"unknown position 'xpos'; valid: .*'{NAME}'"):
        tiny_model_config(position="xpos")


def test_a_name_registers_once():
    with pytest.raises(ValueError, match="already registered"):

        @register(NAME)
        class Other(PositionScheme):
            pass


def test_bias_is_the_formula_element_by_element():
    scheme = LearnedDistanceDecay(tiny_model_config(num_heads=2), causal=True, rngs=nnx.Rngs(0))
    scheme.weight[...] = jnp.asarray([0.5, -1.0])
    q, k = np.array([[0, 3]]), np.array([[1, 2, 7]])  # [B, Tq], [B, Tk]
    got = np.asarray(scheme.bias(jnp.asarray(q), jnp.asarray(k)))  # [B, H, Tq, Tk]
    for h, w in enumerate([0.5, -1.0]):
        for i in range(2):
            for j in range(3):
                want = -np.log1p(np.exp(w)) * abs(q[0, i] - k[0, j])
                np.testing.assert_allclose(got[0, h, i, j], want, rtol=1e-6)


def test_cached_decoding_equals_the_full_pass():
    cfg = tiny_model_config(vocab_size=30, num_decoder_layers=2, position=NAME)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    for scheme in (model.encoder_positions, model.decoder_positions):
        scheme.weight[...] = jnp.asarray([0.3, -0.2, 1.0, 0.0])
    src = jnp.array([[5, 6, 7, 8, 9, 3, 0, 0], [10, 11, 3, 0, 0, 0, 0, 0]], jnp.int32)
    tgt_in = jnp.array([[2, 12, 13, 14, 15, 16], [2, 17, 18, 19, 20, 21]], jnp.int32)
    want = model(src, tgt_in)
    np.testing.assert_allclose(cached_logits(model, src, tgt_in), want, atol=2e-5, rtol=1e-5)


def brute_force_greedy(model, source: list[int], max_out: int) -> list[int]:
    """Greedy decoding by full forward passes over the growing prefix (no cache)."""
    out = []
    for _ in range(max_out):
        token = int(jnp.argmax(next_token_logits(model, source, out, pad_to=max_out + 1)))
        if token == EOS_ID:
            break
        out.append(token)
    return out


@pytest.mark.slow
def test_the_scheme_trains_checkpoints_and_translates(tmp_path):
    workdir = str(tmp_path / "run")
    config = tiny_config(
        model__position=NAME,
        train__num_steps=60,
        train__log_every=10,
        train__checkpoint_every=60,
        train__eval_every=60,
    )
    train_and_evaluate(config, workdir)
    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    assert losses[-1] < losses[0] - 1.0, losses
    restored = restore_run(workdir)
    model = nnx.merge(restored.graphdef, restored.params)
    weights = np.asarray(model.decoder_positions.weight[...])
    assert np.abs(weights).max() > 1e-3, "the scheme's parameters never trained"
    rng = np.random.default_rng(0)
    sources = [[*rng.integers(4, 200, size=n).tolist(), EOS_ID] for n in (3, 6, 9)]
    translator = restored.translator
    greedy = with_settings(translator, strategy="greedy")
    tokens, _ = greedy.translate_ids(restored.params, sources)
    a, b = greedy.settings.max_len_a, greedy.settings.max_len_b
    for source, got in zip(sources, tokens, strict=True):
        # decode.max_len_a/b bound each output, its EOS included
        limit = min(math.floor(a * len(source) + b), greedy.max_output_len(16))
        assert got[0] == brute_force_greedy(model, source, limit - 1)
    # Beam search and sampling with one candidate are greedy search.
    for settings in (dict(strategy="beam", beam_size=1), dict(strategy="sample", top_k=1)):
        other, _ = with_settings(translator, **settings).translate_ids(restored.params, sources)
        assert other == tokens, settings


def with_settings(translator: Translator, **settings) -> Translator:
    """The translator with some decode settings changed."""
    new = dataclasses.replace(translator.settings, **settings)
    t = translator
    return Translator(t.graphdef, t.model_cfg, new, t.src_tok, t.tgt_tok)

"""Prefix-forced decoding (search.Prefix through Translator.translate_ids): every output starts
with its prefix, the prefix scores what teacher forcing gives it, greedy continues as a naive
argmax loop over the full forward pass does, and an empty prefix changes nothing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, next_token_logits, tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID
from transformer.inference.translator import DecodeSettings, Translator

SOURCES = [[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID], [11, 12, 13, 14, 15, 16, EOS_ID]]
PREFIXES = [[20, 21, 22], [], [23, 24, 25, 26, 27, 28, 29, 20, 21]]  # 9: over one 8-wide block
STRATEGIES = ("greedy", "sample", "beam")


@pytest.fixture(scope="module")
def model():
    return Transformer(
        tiny_model_config(vocab_size=30, max_len=32, position="rope"), rngs=nnx.Rngs(5)
    )


def _translator(model, strategy, **settings):
    graphdef, params = nnx.split(model)
    values = dict(strategy=strategy, beam_size=3, top_k=6, batch_size=2, max_len_b=6)
    return Translator(
        graphdef, model.cfg, DecodeSettings(**{**values, **settings}), None, None
    ), params


def _teacher_forced_logp(model, src, target) -> np.ndarray:
    """log P(target[t] | src, target[:t]) per token, from the full forward pass."""
    src = jnp.asarray([src], jnp.int32)
    tgt_in = jnp.asarray([[BOS_ID, *target[:-1]]], jnp.int32)
    logp = jax.nn.log_softmax(model(src, tgt_in)[0], axis=-1)
    return np.asarray(logp[jnp.arange(len(target)), jnp.asarray(target)])


def _naive_greedy(model, src, prefix, limit) -> list[int]:
    """The prefix, then argmax of the full forward pass one token at a time; EOS forced at
    the limit (the searches' length rule)."""
    out = list(prefix)
    while len(out) < limit and (not out or out[-1] != EOS_ID):
        if len(out) == limit - 1:
            out.append(EOS_ID)
            break
        out.append(int(jnp.argmax(next_token_logits(model, src, out, pad_to=limit))))
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_output_starts_with_its_prefix(model, strategy):
    translator, params = _translator(model, strategy, num_samples=2, n_best=2)
    tokens, _ = translator.translate_ids(params, SOURCES, prefix_lists=PREFIXES)
    for outputs, prefix in zip(tokens, PREFIXES, strict=True):
        assert len(outputs) == (1 if strategy == "greedy" else 2)
        for out in outputs:
            assert out[: len(prefix)] == prefix


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_reference_as_prefix_returns_it_scored_as_teacher_forcing(model, strategy):
    """max_len_b=1: room for the prefix and the EOS only, so the output is the reference."""
    translator, params = _translator(model, strategy, max_len_a=0.0, max_len_b=1, length_penalty=0)
    references = [p for p in PREFIXES if p]
    sources = [s for s, p in zip(SOURCES, PREFIXES, strict=True) if p]
    tokens, scores = translator.translate_ids(params, sources, prefix_lists=references)
    for src, ref, out, score in zip(sources, references, tokens, scores, strict=True):
        assert out[0] == ref
        logp = _teacher_forced_logp(model, src, [*ref, EOS_ID])
        # Greedy and beam score the forced EOS by the model; sampling's forced EOS adds 0.
        expected = logp.sum() if strategy != "sample" else logp[:-1].sum()
        np.testing.assert_allclose(score[0], expected, rtol=1e-5, atol=1e-5)


def test_greedy_continues_a_prefix_as_a_naive_argmax_loop(model):
    translator, params = _translator(model, "greedy", max_len_a=0.0, max_len_b=5)
    tokens, _ = translator.translate_ids(params, SOURCES, prefix_lists=PREFIXES)
    for src, prefix, out in zip(SOURCES, PREFIXES, tokens, strict=True):
        limit = len(prefix) + 5 if prefix else 5
        expected = _naive_greedy(model, src, prefix, limit)
        assert out[0] == [t for t in expected if t != EOS_ID]


@pytest.mark.parametrize("strategy", fast_subset(STRATEGIES, ["beam"]))
def test_empty_prefixes_decode_as_no_prefix(model, strategy):
    translator, params = _translator(model, strategy)
    plain = translator.translate_ids(params, SOURCES)
    empty = translator.translate_ids(params, SOURCES, prefix_lists=[[] for _ in SOURCES])
    assert empty[0] == plain[0]
    np.testing.assert_allclose(empty[1], plain[1], rtol=0, atol=1e-6)


def test_bad_prefixes_are_one_line_errors(model):
    translator, params = _translator(model, "greedy")
    with pytest.raises(UserError, match="input line 2: 32 target prefix tokens leave no room"):
        translator.translate_ids(params, SOURCES, prefix_lists=[[], [20] * 32, []])
    with pytest.raises(UserError, match="2 target prefix lists for 3 inputs"):
        translator.translate_ids(params, SOURCES, prefix_lists=[[], []])

"""Grid beam search (transformer/inference/constrained.py) on the Markov test logits of
tests/test_decoding.py: with no constraints it is beam search, token for token; with a beam
wide enough to keep every hypothesis it finds the brute-force best hypothesis among those
holding every phrase (as disjoint contiguous spans); every output holds every phrase."""

from __future__ import annotations

import functools
import itertools

import jax
import numpy as np
import pytest

from tests.helpers import fast_subset
from tests.test_decoding import (
    EOS,
    REAL,
    beam,
    init_cache,
    markov_fn,
    np_step_logp,
    penalty,
    random_tables,
)
from transformer.inference import search
from transformer.inference.constrained import Constraints, grid_beam_search
from transformer.inference.filters import FilterChain, MinLength


@functools.cache
def _grid(batch_size, beam_size, max_len, n_best, banks, shape):
    @jax.jit
    def run(table, bonus, rows, tokens, lengths, max_lens, min_len, alpha):
        cache = search.expand_to_beams(init_cache(rows), banks * beam_size)
        return grid_beam_search(
            markov_fn(table, bonus),
            cache,
            constraints=Constraints(tokens, lengths),
            beam_size=beam_size,
            max_len=max_len,
            max_lens=max_lens,
            filters=FilterChain(MinLength(min_len)),
            alpha=alpha,
            n_best=n_best,
            banks=banks,
        )

    return run


def grid(table, bonus, rows, phrases, *, beam_size, max_len, n_best=1, min_len=0, alpha=0.0):
    """phrases[i]: element i's list of token lists."""
    c = max(1, max(len(p) for p in phrases))
    width = max(1, max((len(x) for p in phrases for x in p), default=1))
    tokens = np.zeros((len(rows), c, width), np.int32)
    lengths = np.zeros((len(rows), c), np.int32)
    for i, element in enumerate(phrases):
        for j, phrase in enumerate(element):
            tokens[i, j, : len(phrase)] = phrase
            lengths[i, j] = len(phrase)
    banks = 1 + int(lengths.sum(axis=1).max())
    run = _grid(len(rows), beam_size, max_len, n_best, banks, tokens.shape)
    max_lens = np.full(len(rows), max_len, np.int32)
    traced = (max_lens, np.int32(min_len), np.float32(alpha))
    out = run(table, bonus, np.asarray(rows, np.int32), tokens, lengths, *traced)
    return jax.tree.map(np.asarray, out)


def holds_disjointly(seq, phrases) -> bool:
    """Every phrase occurs in seq, the occurrences pairwise disjoint."""
    spans = []
    for phrase in phrases:
        n = len(phrase)
        spans.append(
            [(i, i + n) for i in range(len(seq) - n + 1) if list(seq[i : i + n]) == phrase]
        )
    for choice in itertools.product(*spans):
        ordered = sorted(choice)
        if all(a[1] <= b[0] for a, b in itertools.pairwise(ordered)):
            return True
    return False


def np_constrained_best(table, bonus, row, limit, alpha, phrases, min_len=0):
    """Every hypothesis (real tokens then EOS, EOS forced at the limit) holding every phrase,
    best first by length-penalised log-probability."""
    hyps = []

    def rec(seq, lp):
        t = len(seq)
        logp = np_step_logp(table, bonus, row, seq)
        if (t >= min_len or t + 1 >= limit) and holds_disjointly(seq, phrases):
            hyps.append(((lp + logp[EOS]) / penalty(t + 1, alpha), [*seq, EOS]))
        if t + 1 < limit:
            for tok in REAL:
                rec([*seq, tok], lp + logp[tok])

    rec([], 0.0)
    return sorted(hyps, key=lambda h: -h[0])


@pytest.mark.parametrize("seed", fast_subset(range(4), [0]))
@pytest.mark.parametrize("beam_size,n_best,alpha,min_len", [(1, 1, 0.0, 0), (3, 2, 0.6, 2)])
def test_without_constraints_it_is_beam_search(seed, beam_size, n_best, alpha, min_len):
    table, bonus = random_tables(seed, eos_bias=0.5)
    rows = [0, 1, 2]
    kw = dict(beam_size=beam_size, max_len=6, n_best=n_best, min_len=min_len, alpha=alpha)
    ours = grid(table, bonus, rows, [[], [], []], **kw)
    plain, _ = beam(table, bonus, rows, **kw)
    np.testing.assert_array_equal(ours.tokens, plain.tokens)
    np.testing.assert_array_equal(ours.lengths, plain.lengths)
    np.testing.assert_allclose(ours.scores, plain.scores, rtol=1e-6)


PHRASES = [[[4]], [[5, 1]], [[1], [4, 4]], [[5], [5]]]


@pytest.mark.parametrize("seed", fast_subset(range(6), [0, 1]))
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_a_wide_grid_finds_the_brute_force_best_constrained_hypothesis(seed, alpha):
    table, bonus = random_tables(seed, eos_bias=1.0)
    rows, limit = [0, 1, 2, 3], 5
    out = grid(table, bonus, rows, PHRASES, beam_size=81, max_len=limit, n_best=2, alpha=alpha)
    for i, (row, phrases) in enumerate(zip(rows, PHRASES, strict=True)):
        expected = np_constrained_best(table, bonus, row, limit, alpha, phrases)
        for n in range(2):
            score, seq = expected[n]
            np.testing.assert_allclose(out.scores[i, n], score, rtol=1e-5)
            assert list(out.tokens[i, n, : out.lengths[i, n]]) == seq


@pytest.mark.parametrize("seed", range(3))
def test_every_output_holds_every_phrase_with_a_narrow_beam(seed):
    table, bonus = random_tables(seed, eos_bias=2.0)  # EOS early unless held back
    rows = [0, 1, 2, 3]
    out = grid(table, bonus, rows, PHRASES, beam_size=2, max_len=6, n_best=2)
    for i, phrases in enumerate(PHRASES):
        for n in range(2):
            seq = list(out.tokens[i, n, : out.lengths[i, n]])
            assert np.isfinite(out.scores[i, n]) and seq[-1] == EOS
            assert holds_disjointly(seq[:-1], phrases), (seq, phrases)


# ------------------------------------------------------------- through the translator


def _translator(strategy="beam", **settings):
    from flax import nnx

    from tests.helpers import tiny_model_config
    from transformer import Transformer
    from transformer.inference.translator import DecodeSettings, Translator

    model = Transformer(tiny_model_config(vocab_size=30, max_len=24), rngs=nnx.Rngs(7))
    graphdef, params = nnx.split(model)
    values = dict(strategy=strategy, beam_size=3, n_best=2, batch_size=2, max_len_b=4)
    settings = DecodeSettings(**{**values, **settings})
    return Translator(graphdef, model.cfg, settings, None, None), params


SOURCES = [[5, 6, 7, EOS], [8, 9, EOS], [10, 11, 12, 13, EOS]]
MODEL_PHRASES = [[[20, 21], [22]], [], [[23, 24, 25, 26, 27, 28, 29, 20, 21]]]


def test_every_translation_holds_its_phrases():
    translator, params = _translator()
    tokens, scores = translator.translate_ids(params, SOURCES, constraint_lists=MODEL_PHRASES)
    for outputs, out_scores, phrases in zip(tokens, scores, MODEL_PHRASES, strict=True):
        assert len(outputs) == 2 and all(np.isfinite(out_scores))
        for out in outputs:
            assert holds_disjointly(out, phrases), (out, phrases)


def test_empty_constraints_translate_as_plain_beam_search():
    translator, params = _translator()
    plain = translator.translate_ids(params, SOURCES)
    empty = translator.translate_ids(params, SOURCES, constraint_lists=[[] for _ in SOURCES])
    assert empty[0] == plain[0]
    np.testing.assert_allclose(empty[1], plain[1], rtol=1e-6)


def test_bad_constraints_are_one_line_errors():
    from transformer.common.errors import UserError

    translator, params = _translator()
    with pytest.raises(UserError, match="input line 3: 24 constraint tokens leave no room"):
        translator.translate_ids(params, SOURCES, constraint_lists=[[], [], [[20] * 12] * 2])
    greedy, params = _translator("greedy")
    with pytest.raises(UserError, match="lexical constraints need beam search"):
        greedy.translate_ids(params, SOURCES, constraint_lists=MODEL_PHRASES)

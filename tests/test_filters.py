"""Tests of transformer/inference/filters.py: the filter chain against a brute-force NumPy
reference, its candidate path against its full-vocabulary path for every combination and
order of filters, and two filters written here, outside the package, that work in sampling,
greedy and beam search with no edit to it (adding a filter is one class).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.common.errors import UserError
from transformer.inference import search
from transformer.inference.beam import beam_search
from transformer.inference.filters import (
    Filter,
    FilterChain,
    MinLength,
    Temperature,
    TopK,
    TopP,
    decode_filters,
    filters_from_settings,
)
from transformer.inference.translator import DecodeSettings

EOS = 3


class BanToken(Filter):
    """Test-only: one token is never chosen, by any search."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, logits, ids, step):
        return jnp.where(ids == self.token, -jnp.inf, logits)


class Bonus(Filter):
    """Test-only: adds a per-token bonus, a reweighting that reorders tokens."""

    def __init__(self, bonus):
        self.bonus = jnp.asarray(bonus, jnp.float32)  # [V]

    def __call__(self, logits, ids, step):
        return logits + self.bonus[ids]


def scatter(values, ids, v):
    """Candidates back onto a row of -inf: [..., k], [..., k] -> [..., V]."""
    out = np.full(values.shape[:-1] + (v,), -np.inf, np.float32)
    np.put_along_axis(out, np.asarray(ids), np.asarray(values), axis=-1)
    return out


# --------------------------------------------------------------------------------------
# Against a brute-force reference: every subset of a small vocabulary
# --------------------------------------------------------------------------------------

V_SMALL = 8
SUBSETS = np.array(list(itertools.product([False, True], repeat=V_SMALL)))[1:]  # [255, V]


def brute_force(logits, t, k, p):
    """The kept set of temperature -> top-k -> top-p by search over all subsets (float64).

    Top-k: the k-subset with the largest logit sum; top-p: among the subsets of what top-k
    kept, the smallest reaching mass p, the most probable of those. Also returns the margin
    by which the chosen size's best mass and the next smaller size's best mass clear p.
    """
    x = np.asarray(logits, np.float64) / t
    allowed = np.ones(V_SMALL, bool)
    if k:
        size_k = SUBSETS[SUBSETS.sum(1) == min(k, V_SMALL)]
        allowed = size_k[np.argmax(np.where(size_k, x, 0.0).sum(1))]
    if p >= 1:  # off: everything top-k kept
        return allowed, x, np.inf
    q = np.where(allowed, np.exp(x - x.max()), 0.0)
    q /= q.sum()
    inside = SUBSETS[~(SUBSETS & ~allowed).any(1)]
    mass = np.where(inside, q, 0.0).sum(1)  # [subsets]
    sizes = inside.sum(1)
    best = {m: mass[sizes == m].max() for m in np.unique(sizes)}
    m = min([m for m, b in best.items() if b >= p], default=1)
    chosen = inside[sizes == m][np.argmax(mass[sizes == m])]
    margin = min(abs(best[m] - p), abs(best[m - 1] - p) if m > 1 else np.inf)
    return chosen, x, margin


@pytest.mark.parametrize("t", [0.5, 1.0, 1.7])
@pytest.mark.parametrize("k", [0, 1, 3, 20])
def test_chain_matches_brute_force_on_random_logits(t, k):
    rng = np.random.default_rng(int(10 * t) + k)
    logits = rng.normal(size=(40, V_SMALL)).astype(np.float32) * 2.0
    checked = 0
    for p in (0.2, 0.5, 0.8, 0.95, 1.0):
        chain = decode_filters(temperature=t, top_k=k, top_p=p)
        full = np.asarray(chain(logits, 0))
        if k:
            np.testing.assert_array_equal(scatter(*chain.candidates(logits, 0), V_SMALL), full)
        for row, out in zip(logits, full, strict=True):
            chosen, scaled, margin = brute_force(row, t, k, p)
            if margin < 1e-5:  # float32 and float64 may round to either side of p
                continue
            np.testing.assert_array_equal(np.isfinite(out), chosen)
            np.testing.assert_allclose(out[chosen], scaled[chosen], rtol=1e-6)
            checked += 1
    assert checked >= 190  # of 200: only boundary cases are skipped


def test_temperature_zero_keeps_the_best_token_with_ties_to_the_lower_id():
    x = np.array([[0.5, 2.0, 2.0, 1.0], [-1.0, -3.0, -1.0, -2.0]], np.float32)
    for t in (0.0, jnp.float32(0.0)):
        out = np.asarray(FilterChain(Temperature(t))(x, 0))
        np.testing.assert_array_equal(np.isfinite(out), [[0, 1, 0, 0], [1, 0, 0, 0]])
        np.testing.assert_array_equal(out[np.isfinite(out)], [2.0, -1.0])  # unscaled


# --------------------------------------------------------------------------------------
# The candidate path is the full path restricted to the candidates
# --------------------------------------------------------------------------------------

V = 12


def quarter_logits(seed, rows=16):
    """Logits on a 0.25 grid: ties are common, so the tie rule is exercised."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-12, 12, size=(rows, V)) / 4.0).astype(np.float32)


def assert_paths_agree(chain, logits, step):
    values, ids = chain.candidates(logits, step)
    assert values.shape == ids.shape == (logits.shape[0], min(chain.width, V))
    assert all(len(set(r)) == len(r) for r in np.asarray(ids).tolist())
    np.testing.assert_array_equal(scatter(values, ids, V), np.asarray(chain(logits, step)))


TEMPERATURES = [None, 0.5, 0.0, "traced 0.7", "traced 0"]


def temperature(spec):
    if isinstance(spec, str):
        return Temperature(jnp.float32(float(spec.split()[1])))
    return Temperature(spec)


@pytest.mark.parametrize("ban", ["none", "before", "after"])
def test_candidate_path_equals_full_path_for_every_combination(ban):
    logits = quarter_logits(1)
    for min_len, t, k, p in itertools.product(
        (0, 3), TEMPERATURES, (1, 4, 20), (None, 0.6, jnp.float32(0.9))
    ):
        filters = [MinLength(min_len, EOS)]
        filters += [] if t is None else [temperature(t)]
        filters += [TopK(k)] + ([] if p is None else [TopP(p)])
        if ban != "none":
            filters.insert(0 if ban == "before" else len(filters), BanToken(5))
        assert_paths_agree(FilterChain(*filters), logits, step=1)


def test_candidate_path_equals_full_path_in_every_order():
    logits = quarter_logits(2)
    bonus = quarter_logits(3, rows=1)[0]
    pool = [MinLength(4, EOS), Temperature(0.7), TopK(5), TopP(0.8), Bonus(bonus), TopK(3)]
    for order in itertools.permutations(pool, 4):  # every relative order of any four
        if any(f.keeps_at_most for f in order):
            assert_paths_agree(FilterChain(*order), logits, step=2)


def test_zero_ranks_above_negative_zero_as_lax_top_k_selects():
    # Probabilities .475 (id 0) and .175 for each zero: p = .6 keeps id 0 and one zero, the
    # one lax.top_k ranks first (0.0, id 2) although -0.0 == 0.0 and id 1 is lower.
    x = np.array([[1.0, -0.0, 0.0, -0.0, -9.0]], np.float32)
    assert jax.lax.top_k(x, 3)[1].tolist() == [[0, 2, 1]]
    wide = np.pad(x, ((0, 0), (0, V - 5)), constant_values=-9.0)  # [1, V]
    for chain in (decode_filters(top_k=3, top_p=0.6), FilterChain(TopK(3), TopP(0.6))):
        np.testing.assert_array_equal(np.isfinite(chain(x, 0)), [[1, 0, 1, 0, 0]])
        assert_paths_agree(chain, wide, 0)
    np.testing.assert_array_equal(np.isfinite(FilterChain(TopK(2))(x, 0)), [[1, 0, 1, 0, 0]])
    y = np.array([[-1.0, -0.0, 0.0, -0.0, -9.0]], np.float32)  # three zeros are the best
    np.testing.assert_array_equal(np.isfinite(FilterChain(Temperature(0))(y, 0)), [[0, 0, 1, 0, 0]])


def test_candidates_need_a_bounded_filter():
    with pytest.raises(ValueError, match="top_k >= 1"):
        FilterChain(Temperature(0.5), TopP(0.9)).candidates(quarter_logits(0), 0)
    with pytest.raises(TypeError, match="static Python int"):
        TopK(jnp.int32(2))
    with pytest.raises(ValueError, match="leave the filter out"):
        TopK(0)


# --------------------------------------------------------------------------------------
# Filters written outside the package work in every search
# --------------------------------------------------------------------------------------

FAVOURITE = 4  # the most likely token at every step, EOS next


def favourite_fn(tokens, step, cache):
    """Fixed logits: token 4, then EOS, then the rest; PAD and BOS never."""
    row = jnp.array([-jnp.inf, 0.0, -jnp.inf, 1.0, 3.0, 0.5, 0.2, 0.1])
    return jnp.broadcast_to(row, (tokens.shape[0], row.shape[0])), cache


def run_searches(filters, n=64):
    cache = {"row": jnp.arange(n)}
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(n))
    sampled = search.sample(favourite_fn, cache, rngs=keys, max_len=4, filters=filters)
    greedy = search.greedy(favourite_fn, cache, max_len=4, filters=filters)
    beam_cache = search.expand_to_beams(cache, 2)
    beams = beam_search(
        favourite_fn, beam_cache, batch_size=n, beam_size=2, max_len=4, filters=filters, n_best=2
    )
    return [np.asarray(o.tokens) for o in (sampled, greedy, beams)]


def test_a_test_only_filter_works_in_sampling_greedy_and_beam_search():
    settings_chain = decode_filters(temperature=1.5, top_k=5, top_p=0.95)
    assert all((t == FAVOURITE).any() for t in run_searches(settings_chain))  # guard
    banned = FilterChain(BanToken(FAVOURITE), *settings_chain.filters)
    sampled, greedy, beams = run_searches(banned)
    for tokens in (sampled, greedy, beams):
        assert not (tokens == FAVOURITE).any()
    assert len(np.unique(sampled[:, 0])) > 2  # still sampling among the rest
    assert (greedy[:, 0] == EOS).all()  # the argmax once token 4 is gone
    # The same chain's full and candidate paths agree with the test filter inside.
    assert_paths_agree(banned, quarter_logits(4), step=0)


def test_greedy_and_beam_skip_the_sampling_only_filters():
    sharp = decode_filters(min_len=2, temperature=0.3, top_k=2, top_p=0.5)
    plain = FilterChain(MinLength(2))
    for a, b in zip(run_searches(sharp)[1:], run_searches(plain)[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    assert [f.sampling_only for f in sharp.filters] == [False, True, True, True]


# --------------------------------------------------------------------------------------
# The chain of the decode settings
# --------------------------------------------------------------------------------------


def test_settings_build_the_chain_in_its_order():
    chain = filters_from_settings(
        DecodeSettings(strategy="sample", min_len=2, temperature=0.7, top_k=5, top_p=0.9)
    )
    assert [type(f) for f in chain.filters] == [MinLength, Temperature, TopK, TopP]
    assert chain.width == 5 and not chain.greedy
    assert filters_from_settings(DecodeSettings(top_k=0)).width is None
    assert filters_from_settings(DecodeSettings(top_k=1)).greedy
    assert filters_from_settings(DecodeSettings(temperature=0.0)).greedy


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("temperature", -1.0, "decode.temperature must be >= 0, got -1.0"),
        ("top_k", -2, r"decode.top_k must be >= 0 \(0 = off\), got -2"),
        ("top_p", 1.5, r"decode.top_p must be in \(0, 1\], got 1.5"),
        ("top_p", 0.0, r"decode.top_p must be in \(0, 1\], got 0.0"),
        ("min_len", -1, "decode.min_len must be >= 0, got -1"),
    ],
)
def test_bad_sampling_settings_are_one_line_user_errors(field, value, message):
    with pytest.raises(UserError, match=message) as error:
        DecodeSettings(strategy="sample", **{field: value})
    assert "\n" not in str(error.value)

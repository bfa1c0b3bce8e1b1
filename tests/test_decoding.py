"""Tests of transformer/inference/search.py and beam.py on hand-written logits functions
(no model).

Vocabulary: PAD=0, 1, BOS=2, EOS=3, 4, 5. PAD and BOS are never generated (-inf logits).
The Markov test function has logits depending on the row's table, the step, the current
token and the previous token (kept in the cache), so cache passing and beam reordering
matter. Every jitted configuration is built once (functools.cache) and shared.
"""

from __future__ import annotations

import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from transformer.inference import search
from transformer.inference.beam import BeamState, beam_search, beam_step
from transformer.inference.filters import FilterChain, MinLength, decode_filters

PAD, BOS, EOS = 0, 2, 3
V = 6
REAL = (1, 4, 5)
T_MAX = 8  # steps covered by the tables; also the largest max_len used
N_TABLES = 4

# --------------------------------------------------------------------------------------
# Test logits functions and NumPy references
# --------------------------------------------------------------------------------------


def random_tables(seed, eos_bias=0.0, scale=1.5):
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(N_TABLES, T_MAX, V, V)) * scale
    table[..., EOS] += eos_bias
    table[..., PAD] = -np.inf
    table[..., BOS] = -np.inf
    bonus = rng.normal(size=(V, V))
    return table.astype(np.float32), bonus.astype(np.float32)


def markov_fn(table, bonus):
    """logits[r] = table[row_r, step, token_r] + bonus[previous token_r]."""

    table, bonus = jnp.asarray(table), jnp.asarray(bonus)

    def fn(tokens, step, cache):
        logits = table[cache["row"], step, tokens] + bonus[cache["prev"]]
        return logits, {"row": cache["row"], "prev": tokens, "count": cache["count"] + 1}

    return fn


def init_cache(rows):
    rows = jnp.asarray(rows, jnp.int32)
    return {"row": rows, "prev": jnp.full_like(rows, PAD), "count": jnp.zeros_like(rows)}


def np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = np.max(x)
    return x - m - np.log(np.sum(np.exp(x - m)))


def np_step_logp(table, bonus, row, seq):
    """Model log-probs of the next output token after output prefix ``seq``."""
    full = [BOS, *seq]
    cur, prev = full[-1], (full[-2] if len(full) >= 2 else PAD)
    logits = table[row, len(seq), cur].astype(np.float64) + bonus[prev]
    return np_log_softmax(logits)


def np_greedy(table, bonus, row, limit, min_len=0):
    seq, score = [], 0.0
    for t in range(limit):
        lp = np_step_logp(table, bonus, row, seq)
        masked = lp.copy()
        if t < min_len:
            masked[EOS] = -np.inf
        tok = EOS if t + 1 >= limit else int(np.argmax(masked))
        seq.append(tok)
        score += lp[tok]
        if tok == EOS:
            break
    return seq, score


def penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def np_brute_force(table, bonus, row, limit, alpha, min_len=0):
    """All hypotheses (real tokens then EOS, EOS forced at ``limit``), best first."""
    hyps = []

    def rec(seq, lp):
        t = len(seq)
        logp = np_step_logp(table, bonus, row, seq)
        if t >= min_len or t + 1 >= limit:
            hyps.append(((lp + logp[EOS]) / penalty(t + 1, alpha), [*seq, EOS]))
        if t + 1 < limit:
            for tok in REAL:
                rec([*seq, tok], lp + logp[tok])

    rec([], 0.0)
    return sorted(hyps, key=lambda h: -h[0])


def np_beam(table, bonus, row, beam, limit, alpha, n_best, min_len=0):
    """Reference beam search (top 2*beam candidates, live/finished), NO early stopping."""
    live, finished = [([], 0.0)], []
    for t in range(limit):
        cands = []
        for seq, lp in live:
            logp = np_step_logp(table, bonus, row, seq)
            for tok in range(V):
                if t + 1 >= limit and tok != EOS:
                    continue
                if t < min_len and t + 1 < limit and tok == EOS:
                    continue
                if np.isfinite(logp[tok]):
                    cands.append((lp + logp[tok], [*seq, tok]))
        cands.sort(key=lambda c: -c[0])
        top = cands[: 2 * beam]
        finished += [(lp / penalty(t + 1, alpha), s) for lp, s in top if s[-1] == EOS]
        live = [(s, lp) for lp, s in top if s[-1] != EOS][:beam]
    return sorted(finished, key=lambda h: -h[0])[:n_best]


def unpad(tokens, length):
    return [int(x) for x in tokens[:length]]


# NumPy filter stages, to compose in any order.
def np_softmax(x):
    return np.exp(np_log_softmax(x))


def stage_t(x, t):
    return np.asarray(x, np.float64) / t


def stage_k(x, k):
    x = np.array(x, np.float64)
    order = np.argsort(-x, kind="stable")
    x[order[k:]] = -np.inf
    return x


def stage_p(x, p):
    x = np.array(x, np.float64)
    order = np.argsort(-x, kind="stable")
    probs = np_softmax(x)[order]
    before = np.cumsum(probs) - probs
    drop = order[1:][before[1:] >= p]
    x[drop] = -np.inf
    return x


def np_filter(x, t, k, p):
    x = stage_t(x, t)
    if k:
        x = stage_k(x, k)
    return stage_p(x, p) if p < 1 else x


# --------------------------------------------------------------------------------------
# Jitted decoders, one compile per configuration
# --------------------------------------------------------------------------------------


@functools.cache
def _decoder(kind, max_len, **static):
    @jax.jit
    def run(table, bonus, rows, rngs, max_lens, min_len, temperature):
        fn, cache = markov_fn(table, bonus), init_cache(rows)
        kw = dict(max_len=max_len, max_lens=max_lens, return_cache=True)
        if kind == "greedy":
            out, c = search.greedy(fn, cache, filters=FilterChain(MinLength(min_len)), **kw)
        else:
            filters = decode_filters(min_len=min_len, temperature=temperature, **static)
            out, c = search.sample(fn, cache, rngs=rngs, filters=filters, **kw)
        return out, c["count"][0]

    return run


def decode(
    kind,
    table,
    bonus,
    rows,
    *,
    max_len,
    rngs=None,
    max_lens=None,
    min_len=0,
    temperature=1.0,
    **static,
):
    """Runs greedy/sample; max_lens, min_len and temperature are traced (shared compiles)."""
    run = _decoder(kind, max_len, **static)
    rows = np.asarray(rows, np.int32)
    max_lens = np.full(len(rows), max_len, np.int32) if max_lens is None else max_lens
    max_lens = np.asarray(max_lens, np.int32)
    temperature = np.float32(temperature)
    out, count = run(table, bonus, rows, rngs, max_lens, np.int32(min_len), temperature)
    return jax.tree.map(np.asarray, out), int(count)


@functools.cache
def _beam(batch_size, beam_size, max_len, n_best):
    @jax.jit
    def run(table, bonus, rows, max_lens, min_len, alpha):
        cache = search.expand_to_beams(init_cache(rows), beam_size)
        out, c = beam_search(
            markov_fn(table, bonus),
            cache,
            batch_size=batch_size,
            beam_size=beam_size,
            max_len=max_len,
            max_lens=max_lens,
            filters=FilterChain(MinLength(min_len)),
            alpha=alpha,
            n_best=n_best,
            return_cache=True,
        )
        return out, c["count"][0]

    return run


def beam(table, bonus, rows, *, beam_size, max_len, n_best=1, max_lens=None, min_len=0, alpha=0.0):
    run = _beam(len(rows), beam_size, max_len, n_best)
    rows = np.asarray(rows, np.int32)
    max_lens = np.full(len(rows), max_len, np.int32) if max_lens is None else max_lens
    max_lens = np.asarray(max_lens, np.int32)
    out, count = run(table, bonus, rows, max_lens, np.int32(min_len), np.float32(alpha))
    return jax.tree.map(np.asarray, out), int(count)


def row_keys(seed, n):
    base = jax.random.key(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n))


# Table where the greedy path is confident and EOS is unlikely except at a row-specific
# step, so greedy, beam_size=1 and low-temperature sampling must agree.
def confident_tables():
    table, bonus = random_tables(7, scale=3.0)
    table[..., EOS] = -6.0
    for r in range(N_TABLES):
        table[r, 2 + r, :, EOS] = 8.0
    return table, bonus


# --------------------------------------------------------------------------------------
# The decode settings' filter chain, full-vocabulary and candidate paths
# --------------------------------------------------------------------------------------


def filter_logits(logits, temperature=1.0, top_k=0, top_p=1.0):
    """The full-vocabulary path of the settings' chain (temperature -> top-k -> top-p)."""
    return decode_filters(temperature=temperature, top_k=top_k, top_p=top_p)(logits, 0)


def top_candidates(logits, temperature=1.0, top_k=1, top_p=1.0):
    """The same chain's candidate path: (values [..., k], ids [..., k]), best first."""
    return decode_filters(temperature=temperature, top_k=top_k, top_p=top_p).candidates(logits, 0)


_filter = jax.jit(filter_logits, static_argnames="top_k")
LOGITS = np.log(np.array([0.4, 0.3, 0.2, 0.1], np.float32))


def kept(x):
    return set(np.flatnonzero(np.isfinite(np.asarray(x))).tolist())


def test_top_k_keeps_exactly_k_with_index_tie_break():
    x = np.array([[1.0, 3.0, 3.0, 3.0, 0.0, 2.0]], np.float32)
    assert kept(filter_logits(x, top_k=2)[0]) == {1, 2}
    assert kept(filter_logits(x, top_k=4)[0]) == {1, 2, 3, 5}
    assert kept(filter_logits(x, top_k=0)[0]) == set(range(6))
    out = np.asarray(filter_logits(x, top_k=2)[0])
    np.testing.assert_array_equal(out[[1, 2]], [3.0, 3.0])
    assert np.all(out[[0, 3, 4, 5]] == -np.inf)


def test_top_p_smallest_set_reaching_p_and_at_least_one():
    def top_p(p):  # traced p: one compile
        return kept(_filter(LOGITS, jnp.float32(1.0), 0, jnp.float32(p)))

    assert top_p(0.65) == {0, 1}  # 0.4 < .65 <= 0.7
    assert top_p(0.75) == {0, 1, 2}
    assert top_p(0.35) == {0}
    assert top_p(1e-9) == top_p(0.0) == {0}
    assert top_p(1.0) == {0, 1, 2, 3}
    assert kept(filter_logits(LOGITS, top_p=0.65)) == {0, 1}  # static p
    assert kept(filter_logits(LOGITS, top_p=1.0)) == {0, 1, 2, 3}


def test_filter_order_temperature_then_top_k_then_top_p():
    # probs .4 .3 .2 .1; T=0.5 sharpens to .533 .3 .133 .033; top-2 renormalises to
    # .64 .36; top-p 0.6 then keeps only token 0.
    t, k, p = 0.5, 2, 0.6
    expected = kept(np_filter(LOGITS, t, k, p))
    got = kept(filter_logits(LOGITS, temperature=t, top_k=k, top_p=p))
    assert got == expected == {0}
    # Every other order gives {0, 1}, so the order is really exercised.
    p_first = stage_t(stage_k(stage_p(LOGITS, p), k), t)  # top-p on unscaled probs
    p_before_k = stage_k(stage_p(stage_t(LOGITS, t), p), k)  # top-p not renormalised by k
    t_last = stage_t(stage_p(stage_k(LOGITS, k), p), t)  # temperature last
    assert kept(p_first) == kept(p_before_k) == kept(t_last) == {0, 1}
    # Kept values are the temperature-scaled logits.
    out = np.asarray(filter_logits(LOGITS, temperature=2.0, top_k=3))
    np.testing.assert_allclose(out[:3], LOGITS[:3] / 2.0, rtol=1e-6)
    assert out[3] == -np.inf


def test_filter_temperature_zero_keeps_argmax_static_and_traced():
    x = np.array([[0.5, 2.0, 1.0], [3.0, -1.0, 3.0]], np.float32)
    for temp in (0.0, jnp.float32(0.0)):
        out = np.asarray(filter_logits(x, temperature=temp))
        assert kept(out[0]) == {1} and kept(out[1]) == {0}
    with pytest.raises(ValueError, match="temperature"):
        filter_logits(x, temperature=-1.0)


_quarter_logits = st.lists(st.integers(-16, 16).map(lambda i: i / 4.0), min_size=V, max_size=V).map(
    lambda xs: np.array(xs, np.float32)
)


@settings(max_examples=40, deadline=None)
@given(
    logits=_quarter_logits,
    temperature=st.sampled_from([0.5, 1.0, 2.0]),
    top_k=st.sampled_from([0, 1, 2, 4, V + 1]),
    top_p=st.floats(0.0, 1.0),
)
def test_filter_properties(logits, temperature, top_k, top_p):
    out = np.asarray(_filter(logits[None], jnp.float32(temperature), top_k, jnp.float32(top_p)))[0]
    keep = np.isfinite(out)
    m = int(keep.sum())
    order = np.argsort(-logits, kind="stable")  # index tie-break
    assert m >= 1
    assert keep[order[:m]].all(), "kept tokens must be the highest (ties by index)"
    np.testing.assert_allclose(out[keep], logits[keep] / temperature, rtol=1e-6)
    n_k = min(top_k, V) if top_k else V
    assert m <= n_k
    # Probabilities after temperature and top-k; the kept set reaches p and is minimal.
    q = np_softmax(stage_k(logits / temperature, n_k))
    kept_mass = q[keep].sum()
    assert kept_mass >= min(top_p, 1.0) - 1e-5
    if m > 1:
        assert kept_mass - q[order[m - 1]] < top_p + 1e-5
    if top_p >= 1.0:
        assert m == n_k


@settings(max_examples=30, deadline=None)
@given(logits=_quarter_logits, top_k=st.sampled_from([1, 2, 4]))
def test_top_k_property_exact_count(logits, top_k):
    out = np.asarray(_filter(logits[None], jnp.float32(1.0), top_k, jnp.float32(1.0)))[0]
    keep = np.isfinite(out)
    assert keep.sum() == top_k
    assert keep[np.argsort(-logits, kind="stable")[:top_k]].all()


_candidates = jax.jit(top_candidates, static_argnames="top_k")


def scatter_candidates(values, ids, v):
    out = np.full(values.shape[:-1] + (v,), -np.inf, np.float32)
    np.put_along_axis(out, ids, values, axis=-1)
    return out


@settings(max_examples=40, deadline=None)
@given(
    logits=_quarter_logits,
    temperature=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    top_k=st.sampled_from([1, 2, 4, V + 1]),
    top_p=st.floats(0.0, 1.0),
)
def test_top_candidates_are_what_filter_logits_keeps(logits, temperature, top_k, top_p):
    # Quarter-step logits tie often: lax.top_k must order ties by index like the filter.
    args = (logits[None], jnp.float32(temperature), top_k, jnp.float32(top_p))
    values, ids = jax.tree.map(np.asarray, _candidates(*args))
    assert values.shape == ids.shape == (1, min(top_k, V))
    assert len(set(ids[0].tolist())) == ids.shape[1]
    assert np.all(np.diff(values[0][np.isfinite(values[0])]) <= 0), "best first"
    np.testing.assert_array_equal(scatter_candidates(values, ids, V), np.asarray(_filter(*args)))


def test_top_candidates_static_arguments_and_checks():
    x = np.array([[1.0, 3.0, 3.0, 0.0, 2.0, -1.0]], np.float32)
    values, ids = top_candidates(x, temperature=0.5, top_k=3, top_p=0.9)
    np.testing.assert_array_equal(
        scatter_candidates(np.asarray(values), np.asarray(ids), V),
        np.asarray(filter_logits(x, temperature=0.5, top_k=3, top_p=0.9)),
    )
    assert np.asarray(ids).tolist() == [[1, 2, 4]]
    values, ids = top_candidates(x, temperature=0.0, top_k=3)  # greedy: one left
    assert np.asarray(ids).tolist() == [[1]] and np.asarray(values).tolist() == [[3.0]]
    with pytest.raises(ValueError, match="top_k >= 1"):
        top_candidates(x, top_k=0)
    with pytest.raises(TypeError, match="static Python int"):
        top_candidates(x, top_k=jnp.int32(2))


# --------------------------------------------------------------------------------------
# Greedy and its equivalents
# --------------------------------------------------------------------------------------

ROWS4 = [0, 1, 2, 3]


def test_greedy_matches_reference_and_counts_steps():
    table, bonus = random_tables(0, eos_bias=0.5)
    out, count = decode("greedy", table, bonus, ROWS4, max_len=6)
    for r in ROWS4:
        seq, score = np_greedy(table, bonus, r, 6)
        assert unpad(out.tokens[r], out.lengths[r]) == seq
        assert np.all(out.tokens[r, len(seq) :] == PAD)
        np.testing.assert_allclose(out.scores[r], score, rtol=1e-5, atol=1e-5)
    assert count == out.lengths.max()  # the loop ran exactly as long as the longest row


def test_temperature_to_zero_top_k_1_and_beam_1_equal_greedy():
    table, bonus = confident_tables()
    ref, _ = decode("greedy", table, bonus, ROWS4, max_len=6)
    for r in ROWS4:
        assert unpad(ref.tokens[r], ref.lengths[r]) == np_greedy(table, bonus, r, 6)[0]
    keys = row_keys(0, 4)
    variants = [
        decode("sample", table, bonus, ROWS4, max_len=6, rngs=keys, temperature=1e-6)[0],
        decode("sample", table, bonus, ROWS4, max_len=6, rngs=keys, temperature=0.0)[0],
        decode("sample", table, bonus, ROWS4, max_len=6, rngs=keys, top_k=1)[0],
    ]
    for out in variants:
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        np.testing.assert_array_equal(out.lengths, ref.lengths)
    b1, _ = beam(table, bonus, ROWS4, beam_size=1, max_len=6)
    np.testing.assert_array_equal(b1.tokens[:, 0], ref.tokens)
    np.testing.assert_array_equal(b1.lengths[:, 0], ref.lengths)
    np.testing.assert_allclose(b1.scores[:, 0], ref.scores, rtol=1e-5)  # alpha = 0


def test_static_greedy_path_needs_no_rngs_and_runs_unjitted():
    table, bonus = confident_tables()
    ref, _ = decode("greedy", table, bonus, ROWS4, max_len=6)
    fn, cache = markov_fn(table, bonus), init_cache(ROWS4)
    greedy_chain = decode_filters(temperature=0)
    out = search.sample(fn, cache, rngs=None, max_len=6, filters=greedy_chain)  # max_lens=None
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    np.testing.assert_allclose(out.scores, ref.scores, rtol=1e-6)
    with pytest.raises(ValueError, match="rngs"):
        search.sample(fn, cache, rngs=None, max_len=6)


# --------------------------------------------------------------------------------------
# Length limits and early stop of the loop
# --------------------------------------------------------------------------------------


def test_max_lens_forces_eos_at_limit():
    table, bonus = random_tables(1, eos_bias=-30.0)  # EOS practically never chosen
    limits = [1, 2, 5, 6]
    out, count = decode("greedy", table, bonus, ROWS4, max_len=6, max_lens=limits)
    s, _ = decode("sample", table, bonus, ROWS4, max_len=6, max_lens=limits, rngs=row_keys(3, 4))
    for o in (out, s):
        np.testing.assert_array_equal(o.lengths, limits)
        for r, lim in enumerate(limits):
            assert o.tokens[r, lim - 1] == EOS
            assert EOS not in o.tokens[r, : lim - 1]
            assert np.all(o.tokens[r, lim:] == PAD)
    assert count == 6
    # Beam search scores the forced EOS with its model log-prob, so here short hypotheses
    # may win; every hypothesis still respects its row's limit and ends with EOS.
    b, _ = beam(table, bonus, ROWS4, beam_size=2, max_len=6, n_best=2, max_lens=limits)
    for r, lim in enumerate(limits):
        valid = np.isfinite(b.scores[r])  # limit 1 has a single hypothesis: [EOS]
        assert valid.sum() == (1 if lim == 1 else 2)
        for i in np.flatnonzero(valid):
            n = b.lengths[r, i]
            assert 1 <= n <= lim and b.tokens[r, i, n - 1] == EOS
            assert EOS not in b.tokens[r, i, : n - 1] and np.all(b.tokens[r, i, n:] == PAD)


def test_min_len_forbids_early_eos():
    table, bonus = random_tables(2, eos_bias=30.0)  # EOS practically always chosen
    out, count = decode("greedy", table, bonus, ROWS4, max_len=6, min_len=0)
    assert np.all(out.lengths == 1) and count == 1  # all rows done after one step
    out, count = decode("greedy", table, bonus, ROWS4, max_len=6, min_len=3)
    np.testing.assert_array_equal(out.lengths, [4, 4, 4, 4])
    assert count == 4
    assert np.all(out.tokens[:, 3] == EOS) and not np.any(out.tokens[:, :3] == EOS)
    s, _ = decode("sample", table, bonus, ROWS4, max_len=6, min_len=3, rngs=row_keys(4, 4))
    np.testing.assert_array_equal(s.lengths, [4, 4, 4, 4])
    # The length limit wins over min_len.
    out, _ = decode("greedy", table, bonus, ROWS4, max_len=6, min_len=3, max_lens=[2, 6, 6, 6])
    np.testing.assert_array_equal(out.lengths, [2, 4, 4, 4])
    b, _ = beam(table, bonus, ROWS4, beam_size=2, max_len=6, n_best=2, min_len=3)
    assert np.all(b.lengths >= 4)


def test_beam_loop_stops_early_when_all_finished():
    table, bonus = random_tables(2, eos_bias=30.0)
    b, count = beam(table, bonus, ROWS4, beam_size=2, max_len=6, n_best=1)
    assert count == 1  # [EOS] cannot be beaten by any live beam after the first step
    assert np.all(b.lengths[:, 0] == 1)


# --------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------


def test_sampling_reproducible_and_seed_dependent():
    table, bonus = random_tables(3, scale=0.5)
    rows = ROWS4
    a, _ = decode("sample", table, bonus, rows, max_len=6, rngs=row_keys(0, 4))
    b, _ = decode("sample", table, bonus, rows, max_len=6, rngs=row_keys(0, 4))
    c, _ = decode("sample", table, bonus, rows, max_len=6, rngs=row_keys(1, 4))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert not np.array_equal(a.tokens, c.tokens)
    # Scores: log-probs under the sampled-from (here unfiltered) distribution.
    for r in range(4):
        seq = unpad(a.tokens[r], a.lengths[r])
        lp = sum(
            np_step_logp(table, bonus, rows[r], seq[:i])[tok] if i + 1 < 6 else 0.0
            for i, tok in enumerate(seq)
        )
        np.testing.assert_allclose(a.scores[r], lp, rtol=1e-4, atol=1e-4)


FIXED = np.log(np.array([0.02, 0.3, 0.03, 0.1, 0.35, 0.2], np.float32))


@functools.cache
def _fixed_sampler(**static):
    def fn(tokens, step, cache):
        return jnp.broadcast_to(jnp.asarray(FIXED), (tokens.shape[0], V)), cache

    @jax.jit
    def run(rngs):
        cache = {"dummy": jnp.zeros((rngs.shape[0],))}
        return search.sample(fn, cache, rngs=rngs, max_len=2, filters=decode_filters(**static))

    return run


@pytest.mark.parametrize(
    "static",
    [dict(), dict(temperature=0.7, top_k=4, top_p=0.8)],
    ids=["plain", "filtered"],
)
def test_sampling_frequencies_match_filtered_distribution(static):
    n = 4000
    keys = row_keys(11, n)
    if not static:
        keys = jax.random.key_data(keys)  # raw uint32 [N, 2] keys work too
    out = jax.tree.map(np.asarray, _fixed_sampler(**static)(keys))
    filtered = np_filter(
        FIXED, static.get("temperature", 1.0), static.get("top_k", 0), static.get("top_p", 1.0)
    )
    q = np_softmax(filtered)
    counts = np.bincount(out.tokens[:, 0], minlength=V)
    assert np.all(counts[q == 0] == 0), "filtered-out tokens must never be sampled"
    expected = n * q[q > 0]
    chi2 = np.sum((counts[q > 0] - expected) ** 2 / expected)
    assert chi2 < 25.0, (counts, expected)  # df <= 5; p-value of 25 is ~1e-4
    # Score = log q(first token), the forced EOS at the limit adds log 1 = 0.
    np.testing.assert_allclose(out.scores, np.log(q[out.tokens[:, 0]]), rtol=1e-4, atol=1e-5)
    if static:
        assert (q > 0).sum() < 4  # the filters really cut something


# --------------------------------------------------------------------------------------
# Row independence
# --------------------------------------------------------------------------------------


def test_rows_independent_of_batch():
    table, bonus = random_tables(5, eos_bias=-0.5, scale=1.0)
    limits = [6, 2, 4, 3]
    keys = row_keys(9, 4)
    g4, _ = decode("greedy", table, bonus, ROWS4, max_len=6, max_lens=limits)
    s4, _ = decode("sample", table, bonus, ROWS4, max_len=6, max_lens=limits, rngs=keys)
    b4, _ = beam(table, bonus, ROWS4, beam_size=2, max_len=6, n_best=2, max_lens=limits)
    for r in (0, 2):
        g1, _ = decode("greedy", table, bonus, [r], max_len=6, max_lens=[limits[r]])
        s1, _ = decode(
            "sample", table, bonus, [r], max_len=6, max_lens=[limits[r]], rngs=keys[r : r + 1]
        )
        b1, _ = beam(table, bonus, [r], beam_size=2, max_len=6, n_best=2, max_lens=[limits[r]])
        for one, many in ((g1, g4), (s1, s4), (b1, b4)):
            np.testing.assert_array_equal(one.tokens[0], many.tokens[r])
            np.testing.assert_array_equal(one.lengths[0], many.lengths[r])
            np.testing.assert_allclose(one.scores[0], many.scores[r], rtol=1e-6)


# --------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------


def test_beam_finds_known_best_where_greedy_fails():
    # Hand-made garden path: greedy takes token 1 (p=.5) but [4, EOS] has p=.4*.9=.36,
    # more than any continuation of 1 (<= .5 * .35 * .9 = .1575, the runner-up).
    table = np.full((N_TABLES, T_MAX, V, V), -np.inf, np.float32)
    bonus = np.zeros((V, V), np.float32)
    p = {
        BOS: [0, 0.5, 0, 0.1, 0.4, 0],
        1: [0, 0.35, 0, 0.3, 0.35, 0],
        4: [0, 0.05, 0, 0.9, 0.05, 0],
        5: [0, 0.3, 0, 0.4, 0.3, 0],
        PAD: [0, 0.3, 0, 0.4, 0.3, 0],
    }
    with np.errstate(divide="ignore"):
        for cur, probs in p.items():
            table[:, :, cur, :] = np.log(np.array(probs, np.float32))
    g, _ = decode("greedy", table, bonus, ROWS4, max_len=6)
    assert g.tokens[0, 0] == 1
    b, _ = beam(table, bonus, ROWS4, beam_size=2, max_len=6, n_best=2)
    assert unpad(b.tokens[0, 0], b.lengths[0, 0]) == [4, EOS]
    np.testing.assert_allclose(b.scores[0, 0], np.log(0.36), rtol=1e-5)
    assert unpad(b.tokens[0, 1], b.lengths[0, 1]) == [1, 4, EOS]  # .5 * .35 * .9 = .1575
    np.testing.assert_allclose(b.scores[0, 1], np.log(0.1575), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 1.5])
def test_exhaustive_beam_equals_brute_force(alpha):
    # beam 27 >= 3**3 keeps every hypothesis for max_len 4 (3 real tokens + EOS), so beam
    # search (with early stopping) must return the brute-force n-best exactly.
    table, bonus = random_tables(23, eos_bias=-1.0)
    rows = [0, 1, 2]
    out, _ = beam(table, bonus, rows, beam_size=27, max_len=4, n_best=3, alpha=alpha)
    for r in rows:
        best = np_brute_force(table, bonus, r, 4, alpha)[:3]
        for i, (score, seq) in enumerate(best):
            assert unpad(out.tokens[r, i], out.lengths[r, i]) == seq
            np.testing.assert_allclose(out.scores[r, i], score, rtol=1e-5)
    assert np.all(np.diff(out.scores, axis=1) <= 0)  # n-best sorted


def test_brute_force_winners_depend_on_alpha_and_beat_greedy():
    # Guards that the exhaustive test above covers the interesting cases.
    table, bonus = random_tables(23, eos_bias=-1.0)
    best0 = [np_brute_force(table, bonus, r, 4, 0.0)[0][1] for r in range(3)]
    best15 = [np_brute_force(table, bonus, r, 4, 1.5)[0][1] for r in range(3)]
    greedy = [np_greedy(table, bonus, r, 4)[0] for r in range(3)]
    assert best0 != best15, "length penalty must change some winner"
    assert best0 != greedy, "greedy must be sub-optimal for some row"


@pytest.mark.parametrize("beam_size,n_best", [(2, 1), (3, 3)])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_early_stopping_matches_reference_without_early_stop(beam_size, n_best, alpha):
    table, bonus = random_tables(20 + beam_size, eos_bias=0.5)
    limits = [6, 3, 5, 2]
    for min_len in (0, 2):
        out, _ = beam(
            table,
            bonus,
            ROWS4,
            beam_size=beam_size,
            max_len=6,
            n_best=n_best,
            max_lens=limits,
            min_len=min_len,
            alpha=alpha,
        )
        for r in ROWS4:
            ref = np_beam(table, bonus, r, beam_size, limits[r], alpha, n_best, min_len)
            for i, (score, seq) in enumerate(ref):
                assert unpad(out.tokens[r, i], out.lengths[r, i]) == seq
                np.testing.assert_allclose(out.scores[r, i], score, rtol=1e-5, atol=1e-6)


def test_beam_argument_checks():
    table, bonus = random_tables(0)
    fn, cache = markov_fn(table, bonus), init_cache([0, 1])
    with pytest.raises(ValueError, match="n_best"):
        beam_search(fn, cache, batch_size=1, beam_size=2, max_len=3, n_best=3)
    with pytest.raises(ValueError, match="rows"):
        beam_search(fn, cache, batch_size=2, beam_size=2, max_len=3)


def test_expand_to_beams_layout():
    tree = {"a": jnp.arange(3), "b": jnp.arange(6).reshape(3, 2)}
    out = search.expand_to_beams(tree, 2)
    np.testing.assert_array_equal(out["a"], [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(out["b"][2:4], [[2, 3], [2, 3]])


# --------------------------------------------------------------------------------------
# One beam step from a known state
# --------------------------------------------------------------------------------------

# Next-token probabilities given the current token (PAD, 1, BOS, EOS, 4, 5).
STEP_PROBS = np.array(
    [
        [0, 0.25, 0, 0.25, 0.25, 0.25],
        [0, 0.06, 0, 0.6, 0.2, 0.14],
        [0, 0.25, 0, 0.25, 0.25, 0.25],
        [0, 0.25, 0, 0.25, 0.25, 0.25],
        [0, 0.7, 0, 0.1, 0.1, 0.1],
        [0, 0.45, 0, 0.05, 0.4, 0.1],
    ],
    np.float32,
)
with np.errstate(divide="ignore"):
    STEP_LOGP = np.log(STEP_PROBS)
STEP_ALPHA, STEP_LIMITS, STEP_T = 0.6, np.array([4, 4], np.int32), 4


def table_fn(tokens, step, cache):
    """Fixed log-prob table; the new cache records each row's id and its input token."""
    return jnp.asarray(STEP_LOGP)[tokens], {"row": cache["row"], "prev": tokens}


def known_state(done=(False, False)):
    """B=2 elements, K=2 beams, after one step (step 1); element 1 has finished [EOS]."""
    live_seqs = np.full((2, 2, STEP_T), PAD, np.int32)
    live_seqs[:, :, 0] = [[1, 4], [5, 1]]
    fin_seqs = np.full((2, 2, STEP_T), PAD, np.int32)
    fin_seqs[1, 0, 0] = EOS
    return BeamState(
        step=jnp.int32(1),
        cache={"row": jnp.arange(4, dtype=jnp.int32), "prev": jnp.full((4,), BOS, jnp.int32)},
        live_tok=jnp.asarray(live_seqs[:, :, 0]),
        live_logp=jnp.log(jnp.array([[0.5, 0.3], [0.6, 0.2]], jnp.float32)),
        live_seqs=jnp.asarray(live_seqs),
        fin_scores=jnp.array([[-np.inf, -np.inf], [-3.0, -np.inf]], jnp.float32),
        fin_seqs=jnp.asarray(fin_seqs),
        fin_lens=jnp.array([[0, 0], [1, 0]], jnp.int32),
        live_len=jnp.array([1, 1], jnp.int32),
        done=jnp.array(done),
    )


def np_beam_step(s):
    """NumPy reference of one step for each element: top 2K, live K, merged finished K."""
    s = jax.tree.map(np.asarray, s)
    step, (b, k) = int(s.step), s.live_tok.shape
    live, fin = [], []
    for e in range(b):
        cand = (s.live_logp[e][:, None] + STEP_LOGP[s.live_tok[e]].astype(np.float64)).ravel()
        top = np.argsort(-cand, kind="stable")[: 2 * k]
        ext = [(cand[i], i // V, i % V) for i in top]  # (logp, parent, token)
        alive = [x for x in ext if x[2] != EOS][:k]
        seqs = [[*s.live_seqs[e, p, :step], t] for _, p, t in alive]
        live.append(([x[0] for x in alive], [x[1] for x in alive], [x[2] for x in alive], seqs))
        old = [(s.fin_scores[e, j], list(s.fin_seqs[e, j, : s.fin_lens[e, j]])) for j in range(k)]
        new = [
            (lp / penalty(step + 1, STEP_ALPHA), [*s.live_seqs[e, p, :step], t])
            for lp, p, t in ext
            if t == EOS
        ]
        fin.append(sorted(old + new, key=lambda h: -h[0])[:k])  # stable: old first on ties
    return live, fin


def run_beam_step(state):
    new = beam_step(state, table_fn, limits=jnp.asarray(STEP_LIMITS), alpha=STEP_ALPHA)
    return jax.tree.map(np.asarray, new)


def test_beam_step_live_set_is_best_non_eos_expansions():
    state = known_state()
    new, (live, _) = run_beam_step(state), np_beam_step(state)
    for e in range(2):
        logp, _, tokens, seqs = live[e]
        np.testing.assert_allclose(new.live_logp[e], logp, rtol=1e-6)
        np.testing.assert_array_equal(new.live_tok[e], tokens)
        np.testing.assert_array_equal(new.live_seqs[e, :, :2], seqs)
        assert np.all(new.live_seqs[e, :, 2:] == PAD)
    # By hand: element 0 keeps [4, 1] (.3 * .7) over [1, 4] (.5 * .2); [1, EOS] (.5 * .6)
    # ranks first overall but is not live. Element 1 extends only its first beam.
    np.testing.assert_allclose(new.live_logp, np.log([[0.21, 0.10], [0.27, 0.24]]), rtol=1e-5)
    np.testing.assert_array_equal(new.live_seqs[:, :, :2], [[[4, 1], [1, 4]], [[5, 1], [5, 4]]])
    assert int(new.step) == 2 and new.live_len.tolist() == [2, 2]


def test_beam_step_moves_eos_hypotheses_to_finished_with_length_penalty():
    state = known_state()
    new, (_, fin) = run_beam_step(state), np_beam_step(state)
    for e in range(2):
        np.testing.assert_allclose(new.fin_scores[e], [h[0] for h in fin[e]], rtol=1e-5)
        for j, (_, seq) in enumerate(fin[e]):
            assert new.fin_lens[e, j] == len(seq)
            assert unpad(new.fin_seqs[e, j], new.fin_lens[e, j]) == seq
    # By hand: [1, EOS] of element 0 (p .5 * .6) and element 1 (p .2 * .6), length 2; in
    # element 1 it beats the finished [EOS] scored -3.
    pen2 = ((5 + 2) / 6) ** STEP_ALPHA
    np.testing.assert_allclose(new.fin_scores[:, 0], np.log([0.3, 0.12]) / pen2, rtol=1e-5)
    assert new.fin_scores[0, 1] == -np.inf and new.fin_scores[1, 1] == np.float32(-3.0)
    np.testing.assert_array_equal(new.fin_lens, [[2, 0], [2, 1]])
    # Early stop: element 0's best live beam, log(.21) / penalty(4), can no longer beat
    # log(.3) / penalty(2); element 1's log(.27) / penalty(4) still beats log(.12) / pen2.
    assert np.log(0.21) / penalty(4, STEP_ALPHA) < np.log(0.3) / pen2
    assert new.done.tolist() == [True, False]


def test_beam_step_gathers_cache_by_parent_beam():
    state = known_state()
    new, (live, _) = run_beam_step(state), np_beam_step(state)
    parents = np.array([live[e][1] for e in range(2)])  # [B, K]
    rows = (np.arange(2)[:, None] * 2 + parents).ravel()  # [B * K]
    np.testing.assert_array_equal(new.cache["row"], rows)
    np.testing.assert_array_equal(new.cache["prev"], np.asarray(state.live_tok).ravel()[rows])
    # By hand: element 0 swaps its beams, element 1 copies beam 0 into both.
    np.testing.assert_array_equal(new.cache["row"], [1, 0, 2, 2])
    np.testing.assert_array_equal(new.cache["prev"], [4, 1, 5, 5])


def test_beam_step_leaves_a_done_element_unchanged():
    state = known_state(done=(True, False))
    new, ref = run_beam_step(state), run_beam_step(known_state())
    old = jax.tree.map(np.asarray, state)
    for field in ("live_tok", "live_logp", "live_seqs", "fin_scores", "fin_seqs", "fin_lens"):
        np.testing.assert_array_equal(getattr(new, field)[0], getattr(old, field)[0])
        np.testing.assert_array_equal(getattr(new, field)[1], getattr(ref, field)[1])
    assert new.live_len.tolist() == [1, 2] and new.done.tolist() == [True, False]
    np.testing.assert_array_equal(new.cache["row"], [0, 1, 2, 2])  # element 0: own rows

"""A KV cache that grows with the output (search.CacheGrowth): the loops step through each
cache length in turn, and decoding with a growing cache gives the tokens and scores of
decoding with the whole cache from the first step, for every positional scheme, MHA, GQA and
MQA, and greedy, sampling and beam search."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID, EOS_ID
from transformer.inference import search
from transformer.inference.beam import beam_search
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.position_schemes import SCHEMES

V = 12


@pytest.mark.parametrize("max_len", [1, 5, 16, 19, 20, 21, 64, 100, 256])
@pytest.mark.parametrize("first", [0, 1, 4, 16, 300])
def test_doubling_lengths_bound_the_cache_a_step_reads(max_len, first):
    lengths = search.doubling_lengths(max_len, first)
    assert lengths[-1] == max_len and list(lengths) == sorted(set(lengths))
    for step in range(max_len):  # the cache a step runs with: the first length above it
        read = next(n for n in lengths if step < n)
        if first <= 0 or first >= 0.8 * max_len:  # no segment worth a compiled body
            assert read == max_len
        elif step < first:
            assert read == first
        elif read < max_len:  # a doubling: under twice the filled slots
            assert read < 2 * (step + 1)
        else:  # the last length: at most 2.5 times (shorter last segments are skipped)
            assert read <= 2.5 * (step + 1)


def _recording_fn(tokens, step, cache):
    """Writes each row's input token at slot `step` of cache['seen'] [N, L]: a step run with
    a cache too short for it clamps its write onto the last slot, so the final buffer shows
    whether every step ran with a long enough cache. Logits favour token (step + 3) % V."""
    seen = jax.lax.dynamic_update_slice(cache["seen"], tokens[:, None], (0, step))
    logits = jax.nn.one_hot((step + 3) % V, V) * 5.0 + jnp.zeros((tokens.shape[0], V))
    return logits.at[:, EOS_ID].set(-10.0), {"seen": seen}


def _pad_seen(cache, length):
    seen = cache["seen"]
    return {"seen": jnp.pad(seen, ((0, 0), (0, length - seen.shape[1])))}


@pytest.mark.parametrize("kind", ["greedy", "sample", "beam"])
def test_every_step_runs_with_a_cache_long_enough_for_it(kind):
    max_len, rows = 11, 2
    growth = search.CacheGrowth((2, 3, 6, max_len), _pad_seen)
    cache = {"seen": jnp.zeros((rows, 2), jnp.int32)}
    kw = dict(max_len=max_len, growth=growth, return_cache=True)
    if kind == "greedy":
        out, final = search.greedy(_recording_fn, cache, **kw)
        tokens = out.tokens
    elif kind == "sample":
        keys = jax.random.split(jax.random.key(0), rows)
        out, final = search.sample(_recording_fn, cache, rngs=keys, **kw)
        tokens = out.tokens
    else:
        out, final = beam_search(_recording_fn, cache, batch_size=1, beam_size=rows, **kw)
        tokens = out.tokens[:, 0]
    assert final["seen"].shape == (rows, max_len)
    inputs = np.concatenate([np.full((tokens.shape[0], 1), BOS_ID), tokens[:, :-1]], axis=1)
    np.testing.assert_array_equal(final["seen"][: tokens.shape[0]], inputs)


def test_cache_growth_lengths_are_checked():
    with pytest.raises(ValueError, match="must increase"):
        search.CacheGrowth((4, 4, 8), _pad_seen)
    growth = search.CacheGrowth((2, 8), _pad_seen)
    cache = {"seen": jnp.zeros((1, 2), jnp.int32)}
    with pytest.raises(ValueError, match="must end at max_len=6"):
        search.greedy(_recording_fn, cache, max_len=6, growth=growth)
    with pytest.raises(UserError, match="decode.cache_start must be >= 0"):
        DecodeSettings(cache_start=-1)


SOURCES = [[5, 6, 7, 8, 9, 10, 11, EOS_ID], [12, 13, EOS_ID], [14, 15, 16, 17, EOS_ID]]
STRATEGIES = ("greedy", "sample", "beam")
HEADS = {"mha": None, "gqa": 2, "mqa": 1}


def _translate(model, cache_start: int, strategy: str):
    """Every output forced to 20 tokens (min_len at the limit), so a cache that starts 2
    long grows through lengths 2, 4, 8 and 20."""
    graphdef, params = nnx.split(model)
    settings = DecodeSettings(
        strategy=strategy,
        beam_size=3,
        n_best=2,
        num_samples=2,
        top_k=8,
        max_len_a=0.0,
        max_len_b=20,
        min_len=20,
        batch_size=4,
        cache_start=cache_start,
    )
    translator = Translator(graphdef, model.cfg, settings, None, None)
    return translator.translate_ids(params, SOURCES)


def _every_pair_once(schemes, heads, strategies) -> list[tuple[str, str, str]]:
    """A Latin-square design: each scheme with each head grouping, the strategy cycling
    along both, so every pair of values from two factors decodes together (18 cases where
    the full product is 54; a fault in how two of them meet shows in some case)."""
    assert len(heads) == len(strategies)
    return [
        (scheme, head, strategies[(i + j) % len(strategies)])
        for i, scheme in enumerate(schemes)
        for j, head in enumerate(heads)
    ]


# The schemes registered when the module is collected (a test may register its own later).
FACTORS = (SCHEMES.names(), tuple(HEADS), STRATEGIES)
GROWTH_CASES = _every_pair_once(*FACTORS)


def test_the_growth_cases_hold_every_pair_of_factor_values():
    for a, b in itertools.combinations(range(3), 2):
        wanted = set(itertools.product(FACTORS[a], FACTORS[b]))
        assert {(case[a], case[b]) for case in GROWTH_CASES} == wanted, (a, b)


@pytest.mark.parametrize(
    "position,heads,strategy",
    fast_subset(
        GROWTH_CASES,
        [("rope", "gqa", "greedy"), ("relative", "mha", "sample"), ("alibi", "mqa", "beam")],
    ),
)
def test_a_growing_cache_decodes_as_the_whole_cache_does(position, heads, strategy):
    cfg = tiny_model_config(
        vocab_size=30,
        max_len=32,
        num_decoder_layers=2,
        position=position,
        num_kv_heads=HEADS[heads],
    )
    model = Transformer(cfg, rngs=nnx.Rngs(4))
    assert search.doubling_lengths(20, 2) == (2, 4, 8, 20)
    whole_tokens, whole_scores = _translate(model, 0, strategy)
    grown_tokens, grown_scores = _translate(model, 2, strategy)
    # Forced to the limit (the text stops early only where a pad id was drawn).
    assert max(len(t) for row in whole_tokens for t in row) == 19  # 20 with the EOS
    assert grown_tokens == whole_tokens
    np.testing.assert_allclose(grown_scores, whole_scores, atol=1e-5, rtol=0)

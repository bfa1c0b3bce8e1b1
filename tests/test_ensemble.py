"""Ensemble decoding (model.ensemble.Ensemble through the Translator): K copies of one model
decode as that model does, greedy follows the argmax of the members' mean teacher-forced
log-probabilities, and members of different architectures share one compiled loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import fast_subset, next_token_logits, tiny_model_config
from transformer import Transformer
from transformer.common.special_ids import EOS_ID
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.ensemble import Ensemble

SOURCES = [[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID], [11, 12, 13, 14, 15, 16, EOS_ID]]
STRATEGIES = ("greedy", "sample", "beam")


def _model(seed: int, **overrides) -> Transformer:
    cfg = tiny_model_config(vocab_size=30, max_len=32, **overrides)
    return Transformer(cfg, rngs=nnx.Rngs(seed))


def _translate(network, strategy: str, cfg=None, **settings):
    graphdef, params = nnx.split(network)
    values = dict(strategy=strategy, beam_size=3, n_best=2, num_samples=2, top_k=8, max_len_b=6)
    settings = DecodeSettings(batch_size=2, **{**values, **settings})
    cfg = cfg or network.cfg
    return Translator(graphdef, cfg, settings, None, None).translate_ids(params, SOURCES)


@pytest.mark.parametrize("copies", fast_subset([2, 3], [3]))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_copies_of_one_model_decode_as_that_model(copies, strategy):
    model = _model(0, position="rope")
    single_tokens, single_scores = _translate(model, strategy)
    ensemble = Ensemble([nnx.clone(model) for _ in range(copies)])  # distinct, equal weights
    tokens, scores = _translate(ensemble, strategy, cfg=model.cfg)
    assert tokens == single_tokens
    np.testing.assert_allclose(scores, single_scores, rtol=0, atol=1e-5)


def _mean_logp(members, src, prefix) -> jax.Array:
    """The members' mean log-probabilities of the next token after prefix, by full forward
    passes (no cache)."""
    logps = [jax.nn.log_softmax(next_token_logits(m, src, prefix)) for m in members]
    return jnp.mean(jnp.stack(logps), axis=0)


def test_greedy_follows_the_argmax_of_the_mean_log_probabilities():
    members = [_model(1), _model(2, position="alibi", num_kv_heads=2), _model(3, d_model=24)]
    kw = dict(cfg=members[0].cfg, max_len_a=0.0, max_len_b=5)  # limit: 5 tokens, EOS included
    tokens, scores = _translate(Ensemble(members), "greedy", **kw)
    for src, out, score in zip(SOURCES, tokens, scores, strict=True):
        expected, total = [], 0.0
        while len(expected) < 5:
            logp = _mean_logp(members, src, expected)
            token = EOS_ID if len(expected) == 4 else int(jnp.argmax(logp))
            total += float(logp[token] - jax.nn.logsumexp(logp))  # renormalised
            expected.append(token)
            if token == EOS_ID:
                break
        assert out[0] == [t for t in expected if t != EOS_ID]
        np.testing.assert_allclose(score[0], total, rtol=1e-5, atol=1e-5)


def test_members_must_share_the_vocabulary():
    with pytest.raises(ValueError, match="disagree on the vocabulary size"):
        Ensemble([_model(0), Transformer(tiny_model_config(vocab_size=31), rngs=nnx.Rngs(0))])

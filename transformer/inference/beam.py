"""Beam search with the GNMT length penalty, separate live and finished sets and exact early
stopping, over the same ``tokens_to_logits`` callback and conventions as
:mod:`transformer.inference.search`: :func:`beam_search` runs the whole search in one
``lax.while_loop`` whose body is the pure :func:`beam_step` over a :class:`BeamState`.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID
from transformer.inference.filters import FilterChain
from transformer.inference.search import (
    CacheGrowth,
    Prefix,
    TokensToLogits,
    call_tokens_to_logits,
    check_max_len,
    check_prefix,
    growing_loop,
    num_rows,
    row_limits,
)


class BeamOutput(NamedTuple):
    """Result of :func:`beam_search`, best hypothesis first.

    tokens: int32[B, n_best, max_len]; lengths: int32[B, n_best] (EOS included);
    scores: float32[B, n_best], length-penalised log-probabilities. An entry scored -inf is
    not a hypothesis (fewer than n_best exist, e.g. with a length limit of 1).
    """

    tokens: jax.Array
    lengths: jax.Array
    scores: jax.Array


class BeamState(NamedTuple):
    """The loop state of B batch elements with K beams each."""

    step: jax.Array  # int32[], output position being decided
    cache: Any  # leaves [B * K, ...]; row b * K + j is beam j of element b
    live_tok: jax.Array  # int32[B, K], last token of each live beam (BOS at step 0)
    live_logp: jax.Array  # float32[B, K], summed log-prob of each live beam, best first
    live_seqs: jax.Array  # int32[B, K, max_len], live beams' output tokens, pad after
    fin_scores: jax.Array  # float32[B, K], length-penalised finished scores, best first
    fin_seqs: jax.Array  # int32[B, K, max_len], finished hypotheses, EOS included
    fin_lens: jax.Array  # int32[B, K], their output lengths, EOS included
    live_len: jax.Array  # int32[B], output tokens in each element's live beams
    done: jax.Array  # bool[B], element frozen (limit reached or early-stopped)


class _Expansions(NamedTuple):
    """The top 2K (beam, token) extensions of each element, best first."""

    logp: jax.Array  # float32[B, 2K], summed log-probs
    parent: jax.Array  # int32[B, 2K], beam each one extends
    token: jax.Array  # int32[B, 2K], token it appends
    seqs: jax.Array  # int32[B, 2K, max_len], parent sequence with the token written at step


def length_penalty(length, alpha) -> jax.Array:
    """GNMT length penalty ``((5 + length) / 6) ** alpha``; ``alpha = 0`` gives 1."""
    length = jnp.asarray(length, jnp.float32)
    return jnp.power((5.0 + length) / 6.0, jnp.asarray(alpha, jnp.float32))


def initial_beam_state(
    cache: Any, batch_size: int, beam_size: int, max_len: int, bos_id: int, pad_id: int
) -> BeamState:
    """Step 0: only beam 0 is live (all beams start identical), no finished hypotheses."""
    b, k = batch_size, beam_size
    neg_inf = jnp.array(-jnp.inf, jnp.float32)
    return BeamState(
        step=jnp.array(0, jnp.int32),
        cache=cache,
        live_tok=jnp.full((b, k), bos_id, jnp.int32),
        live_logp=jnp.where(jnp.arange(k) == 0, 0.0, neg_inf) * jnp.ones((b, 1)),
        live_seqs=jnp.full((b, k, max_len), pad_id, jnp.int32),
        fin_scores=jnp.full((b, k), neg_inf),
        fin_seqs=jnp.full((b, k, max_len), pad_id, jnp.int32),
        fin_lens=jnp.zeros((b, k), jnp.int32),
        live_len=jnp.zeros((b,), jnp.int32),
        done=jnp.zeros((b,), bool),
    )


def _constrained_logp(
    logits, step, limits, filters: FilterChain, prefix: Prefix | None, eos_id: int, b: int, k: int
):
    """log_softmax under the filters that can change the best token (min-length, ...), the
    prefix and the length limits, as -inf masks, not renormalised: [B * K, V] -> [B, K, V]."""
    v = logits.shape[-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    allowed = filters.constrain(logp, step).reshape(b, k, v)
    logp = logp.reshape(b, k, v)
    forced = step + 1 >= limits  # [B], last allowed position: EOS only
    if prefix is not None:  # inside an element's prefix: its prefix token only
        inside, token = prefix.at(step)  # [B], [B]
        only_token = jnp.where(jnp.arange(v) == token[:, None, None], logp, -jnp.inf)
        allowed = jnp.where(inside[:, None, None], only_token, allowed)
    only_eos = jnp.where(jnp.arange(v) == eos_id, logp, -jnp.inf)
    return jnp.where(forced[:, None, None], only_eos, allowed)


def _top_expansions(s: BeamState, logp: jax.Array) -> _Expansions:
    """The top 2K of all K * V extensions, so that at least K of them do not end in EOS."""
    b, k, v = logp.shape
    cand = (s.live_logp[:, :, None] + logp).reshape(b, k * v)
    top_logp, top_idx = lax.top_k(cand, min(2 * k, k * v))
    parent = top_idx // v
    token = (top_idx % v).astype(jnp.int32)
    seqs = jnp.take_along_axis(s.live_seqs, parent[:, :, None], axis=1)
    seqs = lax.dynamic_update_slice(seqs, token[:, :, None], (0, 0, s.step))
    return _Expansions(top_logp, parent, token, seqs)


def _best_live(e: _Expansions, k: int, eos_id: int):
    """The best K non-EOS expansions: (logp [B, K], token [B, K], parent [B, K], seqs)."""
    live_logp, pos = lax.top_k(jnp.where(e.token == eos_id, -jnp.inf, e.logp), k)
    live_tok = jnp.take_along_axis(e.token, pos, axis=1)
    live_parent = jnp.take_along_axis(e.parent, pos, axis=1)
    return live_logp, live_tok, live_parent, jnp.take_along_axis(e.seqs, pos[:, :, None], axis=1)


def _merge_finished(s: BeamState, e: _Expansions, alpha, eos_id: int):
    """The K best of the finished set and the EOS expansions (existing ones first on ties).

    An EOS expansion of length ``step + 1`` scores ``logp / length_penalty(step + 1)``.
    Returns (scores [B, K], seqs [B, K, max_len], lens [B, K]).
    """
    k = s.fin_scores.shape[1]
    new_scores = jnp.where(e.token == eos_id, e.logp / length_penalty(s.step + 1, alpha), -jnp.inf)
    all_scores = jnp.concatenate([s.fin_scores, new_scores], axis=1)
    all_seqs = jnp.concatenate([s.fin_seqs, e.seqs], axis=1)
    new_lens = jnp.full(new_scores.shape, s.step + 1, jnp.int32)
    all_lens = jnp.concatenate([s.fin_lens, new_lens], axis=1)
    fin_scores, pos = lax.top_k(all_scores, k)
    fin_seqs = jnp.take_along_axis(all_seqs, pos[:, :, None], axis=1)
    return fin_scores, fin_seqs, jnp.take_along_axis(all_lens, pos, axis=1)


def _gather_cache(cache: Any, parent: jax.Array, active: jax.Array) -> Any:
    """Every cache leaf gathered by the parent beam [B, K]; frozen elements keep their rows."""
    b, k = parent.shape
    parent = jnp.where(active[:, None], parent, jnp.arange(k)[None, :])
    flat_parent = (jnp.arange(b)[:, None] * k + parent).reshape(b * k)  # [B * K]
    return jax.tree.map(lambda x: jnp.take(x, flat_parent, axis=0), cache)


def now_done(done, step, best_live, fin_scores, limits, alpha, n_best: int) -> jax.Array:
    """Elements whose limit is reached or whose n-best list can no longer change: bool[B].

    Exact early stopping: a live beam with summed log-prob ``lp`` (<= 0, and only decreasing
    as tokens are added) that finishes at length ``L`` in ``[step + 2, limits[b]]`` scores
    at most ``lp / max(penalty(step + 2), penalty(limits[b]))`` (for ``alpha >= 0`` the
    penalty grows with length, so this is ``lp / penalty(limits[b])``). When this bound for
    the best live beam (``best_live`` [B]) is below the ``n_best``-th finished score, no
    future hypothesis can enter the returned list, so freezing the element gives the result
    of running on.
    """
    max_penalty = jnp.maximum(length_penalty(step + 2, alpha), length_penalty(limits, alpha))
    return done | (step + 1 >= limits) | (best_live / max_penalty < fin_scores[:, n_best - 1])


def beam_step(
    s: BeamState,
    tokens_to_logits: TokensToLogits,
    *,
    limits: jax.Array,
    filters: FilterChain | None = None,
    prefix: Prefix | None = None,
    alpha=0.6,
    n_best: int = 1,
    eos_id: int = EOS_ID,
) -> BeamState:
    """One beam-search step for every element (the ``while_loop`` body of beam_search).

    Every live beam is extended by every token (log-probs are ``log_softmax`` of the logits
    under the filters that can change the best token, e.g. min-length, as -inf masks, and EOS
    forced at step ``limits[b] - 1``); the top 2K candidates by summed log-prob are taken, so at
    least K non-EOS ones are among them. Those ending in EOS enter the finished set (the K
    best scores, ``logp / length_penalty(step + 1, alpha)``); the best K non-EOS ones become
    the live beams, and the cache returned by the callback is gathered by their parents.
    Elements already done are left unchanged.

    Args:
      limits: int32[B], per-element output-token limits (see search.row_limits).
      prefix: per element (search.Prefix, [B, P] and [B]): inside it, every beam extends by
        the prefix token only, scored by its model log-probability.
    """
    b, k = s.live_tok.shape
    filters = FilterChain() if filters is None else filters
    logits, cache = call_tokens_to_logits(
        tokens_to_logits, s.live_tok.reshape(b * k), s.step, s.cache, b * k
    )
    logp = _constrained_logp(logits, s.step, limits, filters, prefix, eos_id, b, k)
    e = _top_expansions(s, logp)
    live_logp, live_tok, live_parent, live_seqs = _best_live(e, k, eos_id)
    fin_scores, fin_seqs, fin_lens = _merge_finished(s, e, alpha, eos_id)
    active = ~s.done
    a2, a3 = active[:, None], active[:, None, None]  # [B, 1], [B, 1, 1]
    live_logp = jnp.where(a2, live_logp, s.live_logp)
    fin_scores = jnp.where(a2, fin_scores, s.fin_scores)
    return BeamState(
        step=s.step + 1,
        cache=_gather_cache(cache, live_parent, active),
        live_tok=jnp.where(a2, live_tok, s.live_tok),
        live_logp=live_logp,
        live_seqs=jnp.where(a3, live_seqs, s.live_seqs),
        fin_scores=fin_scores,
        fin_seqs=jnp.where(a3, fin_seqs, s.fin_seqs),
        fin_lens=jnp.where(a2, fin_lens, s.fin_lens),
        live_len=s.live_len + active.astype(jnp.int32),
        done=now_done(s.done, s.step, live_logp[:, 0], fin_scores, limits, alpha, n_best),
    )


def _check_beam_args(cache, batch_size, beam_size, max_len, n_best) -> None:
    check_max_len(max_len)
    b, k = batch_size, beam_size
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"beam_size must be a positive integer, got {k!r}")
    if not isinstance(b, int) or b < 1:
        raise ValueError(f"batch_size must be a positive integer, got {b!r}")
    if not isinstance(n_best, int) or not 1 <= n_best <= k:
        raise ValueError(f"n_best must be an integer in [1, beam_size={k}], got {n_best!r}")
    n_cache = num_rows(cache, jnp.zeros((b * k,)))
    if n_cache != b * k:
        raise ValueError(
            f"cache has {n_cache} rows, expected batch_size * beam_size = {b * k}; "
            "lay it out with expand_to_beams"
        )


def _element_limits(max_lens, b: int, k: int, max_len: int) -> jax.Array:
    """int32[B] limits from max_lens given per element [B] or per row [B * K]."""
    if max_lens is not None:
        max_lens = jnp.asarray(max_lens, jnp.int32)
        if max_lens.shape == (b * k,) and k > 1:
            max_lens = max_lens.reshape(b, k)[:, 0]
    return row_limits(max_lens, b, max_len)


def _best_hypotheses(s: BeamState, alpha, n_best: int) -> BeamOutput:
    """The n-best finished hypotheses, or the live beams where none finished."""
    b, k = s.live_tok.shape
    has_finished = jnp.isfinite(s.fin_scores[:, 0])  # [B]
    live_scores = s.live_logp / length_penalty(s.live_len, alpha)[:, None]
    live_lens = jnp.broadcast_to(s.live_len[:, None], (b, k))
    tokens = jnp.where(has_finished[:, None, None], s.fin_seqs, s.live_seqs)
    lengths = jnp.where(has_finished[:, None], s.fin_lens, live_lens)
    scores = jnp.where(has_finished[:, None], s.fin_scores, live_scores)
    return BeamOutput(tokens[:, :n_best], lengths[:, :n_best], scores[:, :n_best])


def _running(s: BeamState) -> jax.Array:
    return (s.step < s.live_seqs.shape[2]) & ~jnp.all(s.done)


def beam_search(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    batch_size: int,
    beam_size: int,
    max_len: int,
    max_lens: jax.Array | None = None,
    filters: FilterChain | None = None,
    alpha=0.6,
    n_best: int = 1,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: Prefix | None = None,
    growth: CacheGrowth | None = None,
    return_cache: bool = False,
) -> BeamOutput | tuple[BeamOutput, Any]:
    """Beam search with GNMT length penalty, separate live/finished sets and early stopping.

    ``cache`` (and whatever the callback closes over) is laid out with
    ``N = batch_size * beam_size`` rows, row ``b * beam_size + j`` = beam j of element b
    (see search.expand_to_beams). Each step (:func:`beam_step`) gathers all cache leaves
    along axis 0 by the parent beam of each surviving hypothesis. An element stops early
    once no live beam can enter its n-best list; the result equals running to ``max_len``.
    The loop ends when all elements are frozen or have reached their limit.

    Because EOS is forced at each element's length limit, every element normally ends with
    finished hypotheses; an element with no finite-scored finished hypothesis falls back
    to its live beams (scored ``logprob / penalty(current length)``, no EOS).
    ``beam_size = 1`` follows the greedy path, except that an EOS candidate ranked second
    is kept as a finished hypothesis and can win if the greedy continuation ends up worse.

    Args:
      max_lens: int32[batch_size] (or int32[batch_size * beam_size] with equal values per
        element), per-element output-token limit; None = max_len.
      filters: a FilterChain (e.g. the decode settings'); beam search applies the filters
        that can change the best token (``FilterChain.constrain``: min-length) to the
        log-probs and skips the sampling-only ones (temperature, top-k, top-p).
      alpha: length-penalty exponent (Python float or traced scalar); 0 = plain log-prob.
      n_best: number of hypotheses returned per element (1 <= n_best <= beam_size).
      prefix: the output tokens each element starts with (search.Prefix, per element
        [batch_size, P] and [batch_size]), scored by their model log-probabilities.
      growth: the cache starts ``growth.lengths[0]`` long and grows (search.CacheGrowth), so
        each step reorders and reads about the filled part of it; None: used as given.
    Returns:
      BeamOutput sorted best first; with ``return_cache=True`` ``(output, final_cache)``.
    """
    _check_beam_args(cache, batch_size, beam_size, max_len, n_best)
    limits = _element_limits(max_lens, batch_size, beam_size, max_len)  # [B]
    check_prefix(prefix, batch_size)
    step = functools.partial(
        beam_step,
        tokens_to_logits=tokens_to_logits,
        limits=limits,
        filters=filters,
        prefix=prefix,
        alpha=alpha,
        n_best=n_best,
        eos_id=eos_id,
    )
    init = initial_beam_state(cache, batch_size, beam_size, max_len, bos_id, pad_id)
    final = growing_loop(_running, step, init, growth, max_len)
    result = _best_hypotheses(final, alpha, n_best)
    return (result, final.cache) if return_cache else result

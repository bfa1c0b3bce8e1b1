"""Lexically constrained beam search: grid beam search (Hokamp & Liu, 2017) over the
``tokens_to_logits`` callback and conventions of :mod:`transformer.inference.search`.

Each element gives C phrases (token sequences) that must all appear in its output. The
hypotheses of an element are kept in G = 1 + (the most constraint tokens any element has)
banks of K beams: bank g holds hypotheses that have produced g constraint tokens. At every
step each live beam extends in two ways:

* freely, by any vocabulary token, staying in its bank (a constraint token produced freely
  does not count), unless it is inside a phrase, which must be continued;
* by a constraint token, moving to bank g + 1: the next token of the phrase it is inside, or
  the first token of any phrase it has not produced yet.

Each bank keeps its K best extensions by summed log-probability. EOS is allowed only in the
bank that has produced every constraint token (outside a phrase), so every finished
hypothesis contains every phrase, contiguously; those are ranked as in beam search (GNMT
length penalty, exact early stopping over every bank's live beams). With no constraints
there is one bank, and the search is :func:`transformer.inference.beam.beam_search`'s.

The cost is G times a plain beam search's rows. Constraints that do not fit before the
length limit (their tokens + EOS > the element's limit) have no finished hypothesis: the
caller must leave room (the translator raises a one-line error).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID
from transformer.inference.beam import BeamOutput, length_penalty, now_done
from transformer.inference.filters import FilterChain
from transformer.inference.search import (
    CacheGrowth,
    TokensToLogits,
    call_tokens_to_logits,
    check_max_len,
    growing_loop,
    row_limits,
)

NEG_INF = -jnp.inf


class Constraints(NamedTuple):
    """Phrases per element: ``tokens`` int32[B, C, L] (phrase c in its first ``lengths[b, c]``
    entries), ``lengths`` int32[B, C] (0: no phrase)."""

    tokens: jax.Array
    lengths: jax.Array

    def total(self) -> jax.Array:
        """Constraint tokens per element: int32[B]."""
        return jnp.sum(self.lengths, axis=1)


class GridState(NamedTuple):
    """The loop state of B elements with G banks of K beams; rows b * G * K + g * K + j."""

    step: jax.Array  # int32[]
    cache: Any  # leaves [B * G * K, ...]
    live_tok: jax.Array  # int32[B, G, K], last token (BOS at step 0)
    live_logp: jax.Array  # float32[B, G, K], summed log-prob; -inf: no hypothesis
    live_seqs: jax.Array  # int32[B, G, K, max_len]
    met: jax.Array  # bool[B, G, K, C], phrases produced in full
    phrase: jax.Array  # int32[B, G, K], phrase being produced, -1 none
    inside: jax.Array  # int32[B, G, K], its tokens produced so far
    fin_scores: jax.Array  # float32[B, K], best first
    fin_seqs: jax.Array  # int32[B, K, max_len]
    fin_lens: jax.Array  # int32[B, K]
    done: jax.Array  # bool[B]


class _Moves(NamedTuple):
    """Candidate extensions into each bank, [B, G, M] each (M candidates per bank)."""

    logp: jax.Array  # float32, summed log-prob (-inf: none)
    source: jax.Array  # int32, parent beam within the element: bank * K + j
    token: jax.Array  # int32
    met: jax.Array  # bool[B, G, M, C]
    phrase: jax.Array  # int32
    inside: jax.Array  # int32


def initial_grid_state(cache, b: int, g: int, k: int, c: int, max_len: int, bos_id, pad_id):
    """Step 0: one live hypothesis (bank 0, beam 0), nothing finished."""
    first = (jnp.arange(g)[:, None] == 0) & (jnp.arange(k)[None, :] == 0)  # [G, K]
    return GridState(
        step=jnp.array(0, jnp.int32),
        cache=cache,
        live_tok=jnp.full((b, g, k), bos_id, jnp.int32),
        live_logp=jnp.broadcast_to(jnp.where(first, 0.0, NEG_INF), (b, g, k)),
        live_seqs=jnp.full((b, g, k, max_len), pad_id, jnp.int32),
        met=jnp.zeros((b, g, k, c), bool),
        phrase=jnp.full((b, g, k), -1, jnp.int32),
        inside=jnp.zeros((b, g, k), jnp.int32),
        fin_scores=jnp.full((b, k), NEG_INF),
        fin_seqs=jnp.full((b, k, max_len), pad_id, jnp.int32),
        fin_lens=jnp.zeros((b, k), jnp.int32),
        done=jnp.zeros((b,), bool),
    )


def _free_moves(s: GridState, logp, final, forced, eos_id: int) -> _Moves:
    """Each bank's 2K best free extensions (M = 2K), as beam search takes them: by any token,
    EOS only in the element's final bank (``final`` bool[B, G]), none from a beam inside a
    phrase, and only EOS at the length limit. At least K of them are not EOS."""
    b, g, k, v = logp.shape
    is_eos = jnp.arange(v) == eos_id
    allowed = jnp.where(is_eos, final[:, :, None, None], ~forced[:, None, None, None])
    allowed = allowed & (s.phrase < 0)[..., None]  # [B, G, K, V]
    cand = jnp.where(allowed, s.live_logp[..., None] + logp, NEG_INF).reshape(b, g, k * v)
    top_logp, top = lax.top_k(cand, min(2 * k, k * v))  # [B, G, 2K]
    parent = top // v
    return _Moves(
        logp=top_logp,
        source=jnp.arange(g)[None, :, None] * k + parent,
        token=(top % v).astype(jnp.int32),
        met=jnp.take_along_axis(s.met, parent[..., None], axis=2),
        phrase=jnp.take_along_axis(s.phrase, parent, axis=2),
        inside=jnp.take_along_axis(s.inside, parent, axis=2),
    )


def _constraint_moves(s: GridState, logp, forced, constraints: Constraints) -> _Moves:
    """Every beam's extension by each phrase's next token (continuing the phrase it is inside,
    or starting one it has not produced), landing in the next bank: M = K * C per bank."""
    b, g, k, _ = logp.shape
    c, width = constraints.lengths.shape[1], constraints.tokens.shape[2]
    ids = jnp.arange(c)
    position = jnp.where(s.phrase[..., None] == ids, s.inside[..., None], 0)  # [B, G, K, C]
    tokens = constraints.tokens[:, None, None]  # [B, 1, 1, C, L]
    token = jnp.take_along_axis(tokens, jnp.minimum(position, width - 1)[..., None], axis=-1)
    token = token[..., 0]  # [B, G, K, C]
    lengths = constraints.lengths[:, None, None]  # [B, 1, 1, C]
    continuing = s.phrase[..., None] == ids
    starting = (s.phrase[..., None] < 0) & ~s.met & (lengths > 0) & _in_turn(s.met, constraints)
    allowed = (continuing | starting) & ~forced[:, None, None, None]
    token_logp = jnp.take_along_axis(logp, token, axis=-1)  # [B, G, K, C]
    move_logp = jnp.where(allowed, s.live_logp[..., None] + token_logp, NEG_INF)
    produced = position + 1
    complete = produced >= lengths
    met = s.met[..., None, :] | (complete[..., None] & (ids[:, None] == ids))  # [B,G,K,C,C]
    # Bank g's moves land in bank g + 1: shift every field one bank up, bank 0 gets none.
    source = jnp.arange(g)[None, :, None, None] * k + jnp.arange(k)[None, None, :, None]
    moves = _Moves(
        logp=move_logp,
        source=jnp.broadcast_to(source, move_logp.shape),
        token=token,
        met=met,
        phrase=jnp.where(complete, -1, jnp.broadcast_to(ids, move_logp.shape)),
        inside=jnp.where(complete, 0, produced),
    )
    return jax.tree.map(lambda x: _up_one_bank(x.reshape(b, g, k * c, *x.shape[4:])), moves)


def _in_turn(met: jax.Array, constraints: Constraints) -> jax.Array:
    """bool[B, G, K, C]: phrase c may start, every identical phrase before it being met (two
    equal phrases produced in either order would otherwise be two copies of one hypothesis)."""
    c = constraints.lengths.shape[1]
    same = jnp.all(constraints.tokens[:, :, None] == constraints.tokens[:, None], axis=-1)
    same &= constraints.lengths[:, :, None] == constraints.lengths[:, None]  # [B, C, C]
    earlier = same & (jnp.arange(c)[None, :] < jnp.arange(c)[:, None])  # c' < c, identical
    waiting = earlier[:, None, None] & ~met[..., None, :]  # [B, G, K, C, C']
    return ~jnp.any(waiting, axis=-1)


def _first_occurrences(keys: jax.Array, valid: jax.Array) -> jax.Array:
    """bool[..., M]: valid and no valid candidate before it has equal keys [..., M, D]."""
    m = keys.shape[-2]
    equal = jnp.all(keys[..., :, None, :] == keys[..., None, :, :], axis=-1)  # [..., M, M]
    before = jnp.arange(m)[None, :] < jnp.arange(m)[:, None]
    return valid & ~jnp.any(equal & before & valid[..., None, :], axis=-1)


def _up_one_bank(x: jax.Array) -> jax.Array:
    """[B, G, ...] -> the same with bank g holding what bank g - 1 held (bank 0: empty)."""
    empty = jnp.full_like(x[:, :1], NEG_INF if x.dtype == jnp.float32 else 0)
    return jnp.concatenate([empty, x[:, :-1]], axis=1)


def _best_per_bank(s: GridState, free: _Moves, constrained: _Moves, eos_id: int) -> _Moves:
    """Each bank's K best non-EOS moves among its free and constraint moves, each hypothesis
    (sequence and constraint state) once: a constraint token produced freely and then as a
    constraint, or the other way round, reaches one hypothesis by two paths."""
    k = s.live_tok.shape[2]
    free = free._replace(logp=jnp.where(free.token == eos_id, NEG_INF, free.logp))
    moves = jax.tree.map(lambda a, c: jnp.concatenate([a, c], axis=2), free, constrained)
    keys = jnp.concatenate(
        [
            _move_seqs(s, moves),
            moves.met.astype(jnp.int32),
            moves.phrase[..., None],
            moves.inside[..., None],
        ],
        axis=-1,
    )  # [B, G, M, max_len + C + 2]
    first = _first_occurrences(keys, jnp.isfinite(moves.logp))
    _, pos = lax.top_k(jnp.where(first, moves.logp, NEG_INF), k)  # [B, G, K]

    def pick(x):
        index = pos.reshape(*pos.shape, *([1] * (x.ndim - 3)))
        return jnp.take_along_axis(x, index, axis=2)

    return jax.tree.map(pick, moves)


def _move_seqs(s: GridState, moves: _Moves) -> jax.Array:
    """The sequences the moves [B, G, M] make: the parent's with the token at `step`."""
    b, g, m = moves.token.shape
    seqs = s.live_seqs.reshape(b, -1, s.live_seqs.shape[-1])
    seqs = jnp.take_along_axis(seqs, moves.source.reshape(b, g * m, 1), axis=1)
    seqs = lax.dynamic_update_slice(seqs, moves.token.reshape(b, g * m, 1), (0, 0, s.step))
    return seqs.reshape(b, g, m, -1)


def _merge_finished(s: GridState, free: _Moves, alpha, eos_id: int):
    """The K best of the finished set and the free EOS moves (existing ones first on ties),
    each scored logp / length_penalty(step + 1) and each sequence once."""
    b, g, m = free.token.shape
    is_eos = free.token == eos_id
    new_scores = jnp.where(is_eos, free.logp / length_penalty(s.step + 1, alpha), NEG_INF)
    seqs = _move_seqs(s, free).reshape(b, g * m, -1)
    all_scores = jnp.concatenate([s.fin_scores, new_scores.reshape(b, g * m)], axis=1)
    all_seqs = jnp.concatenate([s.fin_seqs, seqs], axis=1)
    all_scores = jnp.where(
        _first_occurrences(all_seqs, jnp.isfinite(all_scores)), all_scores, NEG_INF
    )
    new_lens = jnp.full((b, g * m), s.step + 1, jnp.int32)
    all_lens = jnp.concatenate([s.fin_lens, new_lens], axis=1)
    fin_scores, pos = lax.top_k(all_scores, s.fin_scores.shape[1])
    fin_seqs = jnp.take_along_axis(all_seqs, pos[:, :, None], axis=1)
    return fin_scores, fin_seqs, jnp.take_along_axis(all_lens, pos, axis=1)


def _gather_cache(cache, source: jax.Array, active: jax.Array):
    """Cache rows gathered by each new beam's parent ([B, G, K] within the element)."""
    b, g, k = source.shape
    own = jnp.arange(g * k).reshape(g, k)
    source = jnp.where(active[:, None, None], source, own)
    rows = (jnp.arange(b)[:, None, None] * (g * k) + source).reshape(-1)
    return jax.tree.map(lambda x: jnp.take(x, rows, axis=0), cache)


def grid_step(
    s: GridState,
    tokens_to_logits: TokensToLogits,
    *,
    constraints: Constraints,
    limits: jax.Array,
    filters: FilterChain,
    alpha,
    n_best: int,
    eos_id: int,
) -> GridState:
    """One step of grid beam search for every element (the while_loop body)."""
    b, g, k = s.live_tok.shape
    n = b * g * k
    logits, cache = call_tokens_to_logits(
        tokens_to_logits, s.live_tok.reshape(n), s.step, s.cache, n
    )
    logp = jax.nn.log_softmax(logits, axis=-1)
    logp = filters.constrain(logp, s.step).reshape(b, g, k, -1)
    forced = s.step + 1 >= limits  # [B]: EOS only
    final = jnp.arange(g)[None, :] == constraints.total()[:, None]  # [B, G]
    free = _free_moves(s, logp, final, forced, eos_id)
    fin_scores, fin_seqs, fin_lens = _merge_finished(s, free, alpha, eos_id)
    best = _best_per_bank(s, free, _constraint_moves(s, logp, forced, constraints), eos_id)
    active = ~s.done
    fin_scores = _where_active(active, fin_scores, s.fin_scores)
    return GridState(
        step=s.step + 1,
        cache=_gather_cache(cache, best.source, active),
        live_tok=_where_active(active, best.token, s.live_tok),
        live_logp=_where_active(active, best.logp, s.live_logp),
        live_seqs=_where_active(active, _move_seqs(s, best), s.live_seqs),
        met=_where_active(active, best.met, s.met),
        phrase=_where_active(active, best.phrase, s.phrase),
        inside=_where_active(active, best.inside, s.inside),
        fin_scores=fin_scores,
        fin_seqs=_where_active(active, fin_seqs, s.fin_seqs),
        fin_lens=_where_active(active, fin_lens, s.fin_lens),
        done=now_done(s.done, s.step, _best(best.logp), fin_scores, limits, alpha, n_best),
    )


def _where_active(active: jax.Array, new: jax.Array, old: jax.Array) -> jax.Array:
    """new for the elements still searching (active bool[B]), old for the frozen ones."""
    return jnp.where(active.reshape(-1, *([1] * (old.ndim - 1))), new, old)


def _best(live_logp: jax.Array) -> jax.Array:
    """The best live hypothesis of every bank: [B, G, K] -> [B] (early stopping's bound)."""
    return jnp.max(live_logp.reshape(live_logp.shape[0], -1), axis=1)


def _running(s: GridState) -> jax.Array:
    return (s.step < s.live_seqs.shape[3]) & ~jnp.all(s.done)


def grid_beam_search(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    constraints: Constraints,
    beam_size: int,
    max_len: int,
    max_lens: jax.Array | None = None,
    filters: FilterChain | None = None,
    alpha=0.6,
    n_best: int = 1,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    banks: int | None = None,
    growth: CacheGrowth | None = None,
) -> BeamOutput:
    """Grid beam search: every returned hypothesis holds every phrase of its element.

    ``cache`` (and what the callback closes over) has B * G * K rows, row b * G * K + g * K + j
    (lay it out with search.expand_to_beams(..., G * K)), G = ``banks``: 1 + the most
    constraint tokens of any element (static; default :func:`num_banks`, what the shapes
    allow). ``max_lens`` int32[B] per element (None: max_len); each must exceed its
    constraint tokens. Returns a BeamOutput like beam_search's (an entry scored -inf is not a
    hypothesis).
    """
    check_max_len(max_len)
    b, c, _ = constraints.tokens.shape
    g = num_banks(constraints) if banks is None else banks
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be in [1, beam_size={beam_size}], got {n_best}")
    step = functools.partial(
        grid_step,
        tokens_to_logits=tokens_to_logits,
        constraints=constraints,
        limits=row_limits(max_lens, b, max_len),
        filters=FilterChain() if filters is None else filters,
        alpha=alpha,
        n_best=n_best,
        eos_id=eos_id,
    )
    init = initial_grid_state(cache, b, g, beam_size, c, max_len, bos_id, pad_id)
    final = growing_loop(_running, step, init, growth, max_len)
    return BeamOutput(
        final.fin_seqs[:, :n_best], final.fin_lens[:, :n_best], final.fin_scores[:, :n_best]
    )


def num_banks(constraints: Constraints) -> int:
    """Banks of the grid: 1 + the most constraint tokens the static shapes allow."""
    _, c, width = constraints.tokens.shape
    return 1 + c * width

"""Model-independent autoregressive decoding: sampling and greedy search, and the pieces
beam search (:mod:`transformer.inference.beam`) shares with them; the filters that shape
each step's distribution live in :mod:`transformer.inference.filters`. Every algorithm is
driven by a callback and runs its whole token loop inside one ``lax.while_loop``, so each is
jit-compatible (wrap it in ``jax.jit`` with the callback closed over and the static
arguments bound):

    tokens_to_logits(tokens: int32[N], step: int32[], cache: PyTree) -> (float32[N, V], cache)

``tokens`` holds the token at decoder position ``step`` for each of the N rows (step 0 gets
BOS) and the returned logits predict the token at position ``step + 1``, i.e. output token
number ``step`` (0-based). Every leaf of ``cache`` has leading dimension N. Anything that
does not change during decoding (encoder output, cross-attention keys and values) is
closed over by the callback; for beam search the caller lays it out per beam once with
:func:`expand_to_beams` (row ``b * beam_size + j`` is beam j of batch element b).

Conventions shared by all decoders:

* Outputs exclude the leading BOS; the EOS is included; positions after EOS hold ``pad_id``.
  ``lengths`` counts output tokens up to and including EOS.
* Length limits: a row may emit at most ``max_lens[r]`` tokens (clipped to
  ``[1, max_len]``; ``max_lens=None`` means ``max_len`` for every row). At the last allowed
  position EOS is *forced*, so every row ends with EOS.
* Filters: each search takes a ``FilterChain``; greedy and beam search apply the filters
  that can change the best token (``MinLength``: EOS forbidden at output positions
  ``< min_len``), sampling all of them. When a filter conflicts with the length limit, the
  limit wins.
* The loop stops as soon as every row has finished (EOS emitted, limit reached or, for beam
  search, early-stopped); rows that finished early are frozen, so a row's output never
  depends on the other rows in the batch.
* A :class:`Prefix` forces each row's first output tokens: at a position inside its prefix
  a row takes the prefix token, scored by the model's log-probability (``log_softmax`` of
  the logits, as reference scoring scores it) in every search; the length limit still wins.
* A cache may grow as the output does (:class:`CacheGrowth`): the loop starts with a short
  cache and lengthens it between segments of steps, so each step reads (and beam search
  reorders) about the filled part of the cache instead of all ``max_len`` positions.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID
from transformer.inference.filters import FilterChain

TokensToLogits = Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]


class SearchOutput(NamedTuple):
    """Result of :func:`sample` / :func:`greedy`.

    tokens: int32[N, max_len], output tokens without the leading BOS, EOS included, pad after.
    lengths: int32[N], number of output tokens up to and including EOS.
    scores: float32[N], summed log-probabilities of the emitted tokens (EOS included) under
      the distribution each was drawn from, i.e. the filtered one (a forced EOS adds 0). On
      the static greedy path that is a point mass, so there the score is the model's
      log-probability instead (plain ``log_softmax`` of the logits, temperature 1, no
      renormalisation after the filters), equal to the beam-search score at ``alpha = 0``.
    """

    tokens: jax.Array
    lengths: jax.Array
    scores: jax.Array


@dataclasses.dataclass(frozen=True)
class CacheGrowth:
    """A cache that grows with the output: the loop decides steps while ``step <
    lengths[0]`` with the cache it is given (``lengths[0]`` positions long), then calls
    ``grow(cache, length)`` for each next length in turn and decides the steps below it.

    A step at decoder position ``t`` writes slot ``t`` and attends to slots ``<= t``, so a
    cache of length L serves steps ``0..L-1``; the slots added by ``grow`` are empty, and an
    attention that masks empty slots gives the same outputs at every length. Each length
    traces the loop body once more (compile time grows with ``len(lengths)``).
    ``lengths``: static, increasing, the last one ``max_len`` (:func:`doubling_lengths`).
    """

    lengths: tuple[int, ...]
    grow: Callable[[Any, int], Any]

    def __post_init__(self):
        lengths = self.lengths
        if not lengths or lengths[0] < 1 or list(lengths) != sorted(set(lengths)):
            raise ValueError(f"CacheGrowth.lengths must increase from >= 1, got {lengths}")


def doubling_lengths(max_len: int, first: int) -> tuple[int, ...]:
    """Cache lengths ``first, 2 first, 4 first, ...`` then ``max_len``: the cache read at a
    step is at most twice the filled part (or ``first``). A length within a fifth of
    ``max_len`` is skipped (a short last segment would cost a compiled body for few steps);
    ``first <= 0`` or ``>= max_len`` gives the whole cache from the start."""
    lengths = []
    n = first
    while 0 < n and n * 5 < max_len * 4:  # n < 0.8 max_len
        lengths.append(n)
        n *= 2
    return (*lengths, max_len)


def growing_loop(cond, body, state, growth: CacheGrowth | None, max_len: int):
    """``lax.while_loop(cond, body, state)`` over a state with ``step`` and ``cache`` fields,
    in one segment per cache length of ``growth`` (one segment when None)."""
    if growth is None:
        return lax.while_loop(cond, body, state)
    if growth.lengths[-1] != max_len:
        raise ValueError(f"CacheGrowth.lengths must end at max_len={max_len}, got {growth.lengths}")
    for i, length in enumerate(growth.lengths):
        if i:
            state = state._replace(cache=growth.grow(state.cache, length))
        state = lax.while_loop(lambda s, n=length: cond(s) & (s.step < n), body, state)
    return state


class Prefix(NamedTuple):
    """Output tokens every row must start with: ``tokens`` int32[N, P] (row r's prefix in
    its first ``lengths[r]`` entries, anything after), ``lengths`` int32[N] (0: no prefix).
    Beam search takes them per element ([B, P], [B]), shared by its beams."""

    tokens: jax.Array
    lengths: jax.Array

    def at(self, step) -> tuple[jax.Array, jax.Array]:
        """(inside bool[N]: output position ``step`` is inside the row's prefix, the prefix
        token there int32[N]; meaningless where not inside)."""
        width = self.tokens.shape[1]
        token = lax.dynamic_index_in_dim(self.tokens, jnp.minimum(step, width - 1), 1, False)
        return step < self.lengths, token.astype(jnp.int32)


def model_logp(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """log_softmax(logits)[r, tokens[r]]: [N, V], [N] -> [N]."""
    return _pick(logits, tokens) - jax.nn.logsumexp(logits, axis=-1)


def _forced_by_prefix(logits, step, tok, tok_logp, prefix: Prefix | None, limited):
    """The chosen (tok, tok_logp) [N], with rows inside their prefix (and not at their length
    limit, which wins) taking the prefix token at its model log-probability."""
    if prefix is None:
        return tok, tok_logp
    inside, forced_tok = prefix.at(step)
    inside = inside & ~limited
    tok = jnp.where(inside, forced_tok, tok)
    return tok, jnp.where(inside, model_logp(logits, forced_tok), tok_logp)


class _SampleState(NamedTuple):
    """The :func:`sample` loop state of N rows."""

    step: jax.Array  # int32[], output position being decided
    cur: jax.Array  # int32[N], token at decoder position `step` (BOS at step 0)
    cache: Any  # leaves [N, ...]
    out: jax.Array  # int32[N, max_len], output tokens so far, pad after
    finished: jax.Array  # bool[N], EOS emitted
    lengths: jax.Array  # int32[N], output tokens up to and including EOS
    scores: jax.Array  # float32[N], summed log-probabilities (see SearchOutput)


def expand_to_beams(pytree: Any, beam_size: int) -> Any:
    """Repeats each row of every leaf ``beam_size`` times along axis 0.

    Row ``b`` becomes rows ``b * beam_size + j`` for ``j < beam_size``. Call it once on the
    encoder output / cross-attention state and the initial cache before beam search.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), pytree)


def num_rows(cache: Any, *others: Any) -> int:
    """N from the cache leaves (checking they agree), else from the first non-None other."""
    sizes = set()
    for leaf in jax.tree.leaves(cache):
        if jnp.ndim(leaf) == 0:
            raise ValueError(
                "every cache leaf needs a leading row dimension N; found a scalar leaf "
                "(store per-row values, e.g. a step counter of shape [N])"
            )
        sizes.add(jnp.shape(leaf)[0])
    if len(sizes) > 1:
        raise ValueError(f"cache leaves disagree on the row dimension: {sorted(sizes)}")
    if sizes:
        return sizes.pop()
    for other in others:
        if other is not None:
            return jnp.shape(other)[0]
    raise ValueError("cannot infer the number of rows: give a non-empty cache or max_lens")


def _pick(x: jax.Array, index: jax.Array) -> jax.Array:
    """x[r, index[r]] for each row: [N, V], [N] -> [N]."""
    return jnp.take_along_axis(x, index[:, None], axis=-1)[:, 0]


def row_limits(max_lens, n: int, max_len: int) -> jax.Array:
    """Per-row output-token limits int32[n]: ``max_lens`` clipped to [1, max_len]."""
    if max_lens is None:
        return jnp.full((n,), max_len, jnp.int32)
    max_lens = jnp.asarray(max_lens, jnp.int32)
    if max_lens.shape != (n,):
        raise ValueError(f"max_lens must have shape ({n},), got {max_lens.shape}")
    return jnp.clip(max_lens, 1, max_len)


def check_prefix(prefix: Prefix | None, n: int) -> None:
    if prefix is None:
        return
    if prefix.tokens.ndim != 2 or prefix.tokens.shape[0] != n or prefix.lengths.shape != (n,):
        raise ValueError(
            f"a prefix needs tokens [{n}, P] and lengths [{n}], got "
            f"{prefix.tokens.shape} and {prefix.lengths.shape}"
        )


def check_max_len(max_len) -> None:
    """max_len fixes the output shape, so it must be a static positive int."""
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise ValueError(f"max_len must be a positive Python int (static), got {max_len!r}")


def call_tokens_to_logits(tokens_to_logits, tokens, step, cache, n: int):
    """One callback step, checked: returns (float32[n, V] logits, new cache)."""
    logits, cache = tokens_to_logits(tokens, step, cache)
    logits = jnp.asarray(logits, jnp.float32)
    if logits.ndim != 2 or logits.shape[0] != n:
        raise ValueError(
            f"tokens_to_logits must return logits of shape [{n}, V], got {logits.shape}"
        )
    return logits, cache


def _check_rngs(rngs, n: int) -> jax.Array:
    """One key per row: typed keys [n] or raw uint32 [n, 2]."""
    if rngs is None:
        raise ValueError("sample needs rngs (one key per row) unless decoding greedily")
    rngs = jnp.asarray(rngs) if not isinstance(rngs, jax.Array) else rngs
    typed = jnp.issubdtype(rngs.dtype, jax.dtypes.prng_key)
    expected = (n,) if typed else (n, 2)
    if rngs.shape != expected:
        raise ValueError(f"rngs must hold one key per row: shape {expected}, got {rngs.shape}")
    return rngs


def _greedy_choice(logits, step, forced, *, filters: FilterChain, eos_id: int):
    """The argmax under the filters that can change it, scored by the model's log-probability.

    logits float32[N, V], forced bool[N] (rows at their length limit take EOS) -> [N], [N].
    """
    tok = jnp.argmax(filters.constrain(logits, step), axis=-1).astype(jnp.int32)
    tok = jnp.where(forced, eos_id, tok)
    return tok, model_logp(logits, tok)


def _sampled_choice(logits, step, forced, *, filters: FilterChain, rngs, eos_id: int):
    """A draw from the filtered distribution, scored under it; a forced EOS scores 0."""
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(rngs, step)
    if filters.width is not None:  # draw among the k candidates: no sort or noise over V
        values, ids = filters.candidates(logits, step)  # [N, k], [N, k]
        choice = jax.vmap(jax.random.categorical)(keys, values)
        tok = _pick(ids, choice)
    else:
        values = filters(logits, step)  # [N, V]
        tok = choice = jax.vmap(jax.random.categorical)(keys, values)
    tok_logp = _pick(values, choice) - jax.nn.logsumexp(values, axis=-1)
    # Forced rows override the draw, so a filter never has to know about the length limit.
    return jnp.where(forced, eos_id, tok).astype(jnp.int32), jnp.where(forced, 0.0, tok_logp)


def _sample_step(
    s: _SampleState, *, tokens_to_logits, choose, limits, prefix, eos_id: int, pad_id: int
) -> _SampleState:
    """One token for every row; rows that already finished emit pad and stay unchanged."""
    n = s.cur.shape[0]
    logits, cache = call_tokens_to_logits(tokens_to_logits, s.cur, s.step, s.cache, n)
    forced = s.step + 1 >= limits  # [N], last allowed position: EOS only
    tok, tok_logp = choose(logits, s.step, forced)
    tok, tok_logp = _forced_by_prefix(logits, s.step, tok, tok_logp, prefix, forced)
    tok = jnp.where(s.finished, pad_id, tok)
    return _SampleState(
        step=s.step + 1,
        cur=tok,
        cache=cache,
        out=lax.dynamic_update_slice(s.out, tok[:, None], (0, s.step)),
        finished=s.finished | (tok == eos_id),
        lengths=s.lengths + (~s.finished).astype(jnp.int32),
        scores=s.scores + jnp.where(s.finished, 0.0, tok_logp),
    )


def _initial_sample_state(cache, n: int, max_len: int, bos_id: int, pad_id: int) -> _SampleState:
    return _SampleState(
        step=jnp.array(0, jnp.int32),
        cur=jnp.full((n,), bos_id, jnp.int32),
        cache=cache,
        out=jnp.full((n, max_len), pad_id, jnp.int32),
        finished=jnp.zeros((n,), bool),
        lengths=jnp.zeros((n,), jnp.int32),
        scores=jnp.zeros((n,), jnp.float32),
    )


def _running(s: _SampleState) -> jax.Array:
    return (s.step < s.out.shape[1]) & ~jnp.all(s.finished)


def _decode(
    tokens_to_logits, cache, choose, n: int, *, max_len, max_lens, ids, prefix, growth, return_cache
):
    """The token loop shared by :func:`sample` and :func:`greedy`; ids = (bos, eos, pad)."""
    bos_id, eos_id, pad_id = ids
    check_prefix(prefix, n)
    step = functools.partial(
        _sample_step,
        tokens_to_logits=tokens_to_logits,
        choose=choose,
        prefix=prefix,
        limits=row_limits(max_lens, n, max_len),
        eos_id=eos_id,
        pad_id=pad_id,
    )
    init = _initial_sample_state(cache, n, max_len, bos_id, pad_id)
    final = growing_loop(_running, step, init, growth, max_len)
    result = SearchOutput(final.out, final.lengths, final.scores)
    return (result, final.cache) if return_cache else result


def sample(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    rngs: jax.Array | None,
    max_len: int,
    max_lens: jax.Array | None = None,
    filters: FilterChain | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: Prefix | None = None,
    growth: CacheGrowth | None = None,
    return_cache: bool = False,
) -> SearchOutput | tuple[SearchOutput, Any]:
    """Ancestral sampling (or greedy decoding) of N independent rows.

    At each step ``filters`` (a :class:`~transformer.inference.filters.FilterChain`, e.g.
    min-length -> temperature -> top-k -> top-p; None = plain sampling) turn the logits into
    the distribution one token per row is drawn from; a row at its length limit takes EOS.
    A chain with a top-k bound draws among its k candidates (``FilterChain.candidates``).

    Randomness: ``rngs`` holds one key per row (typed keys of shape [N] or raw uint32
    [N, 2]); row r at step t draws with ``jax.random.fold_in(rngs[r], t)``, so a row's
    sample depends only on its own key, never on the other rows. Derive row keys from a
    seed and the sentence index (e.g. ``fold_in(seed_key, sentence_id)``) for results that
    do not depend on batching.

    Greedy: a chain that keeps one token (static temperature 0 or top-k 1) takes the argmax
    as :func:`greedy` does (``rngs`` may be None). A traced temperature of 0 also yields the
    argmax, through the sampler. Scores: see :class:`SearchOutput`.

    Static: ``max_len``, ids, and what the chain's filters hold as Python values (top-k's k
    always). Traced allowed: ``max_lens`` (int32[N]) and the other filter parameters.
    ``prefix``: each row's first output tokens (:class:`Prefix`), scored by the model's
    log-probability, not drawn. ``growth``: the cache starts ``growth.lengths[0]`` long and
    grows (:class:`CacheGrowth`); None: the cache is used as given for every step.

    Returns:
      SearchOutput(tokens int32[N, max_len], lengths int32[N], scores float32[N]); with
      ``return_cache=True`` the pair ``(output, final_cache)``.
    """
    check_max_len(max_len)
    filters = FilterChain() if filters is None else filters
    n = num_rows(cache, max_lens, rngs)
    if filters.greedy:
        choose = functools.partial(_greedy_choice, filters=filters, eos_id=eos_id)
    else:
        rngs = _check_rngs(rngs, n)
        choose = functools.partial(_sampled_choice, filters=filters, rngs=rngs, eos_id=eos_id)
    return _decode(
        tokens_to_logits,
        cache,
        choose,
        n,
        max_len=max_len,
        max_lens=max_lens,
        ids=(bos_id, eos_id, pad_id),
        prefix=prefix,
        growth=growth,
        return_cache=return_cache,
    )


def greedy(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    max_len: int,
    max_lens: jax.Array | None = None,
    filters: FilterChain | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: Prefix | None = None,
    growth: CacheGrowth | None = None,
    return_cache: bool = False,
) -> SearchOutput | tuple[SearchOutput, Any]:
    """Greedy (argmax) decoding with model log-prob scores (``prefix``, ``growth``: as in
    :func:`sample`).

    The argmax is taken under the filters that can change it (``FilterChain.constrain``:
    min-length, not temperature/top-k/top-p), so the decode settings' chain serves as is.
    """
    check_max_len(max_len)
    filters = FilterChain() if filters is None else filters
    choose = functools.partial(_greedy_choice, filters=filters, eos_id=eos_id)
    return _decode(
        tokens_to_logits,
        cache,
        choose,
        num_rows(cache, max_lens),
        max_len=max_len,
        max_lens=max_lens,
        ids=(bos_id, eos_id, pad_id),
        prefix=prefix,
        growth=growth,
        return_cache=return_cache,
    )

"""Model-independent autoregressive decoding: logit filtering, sampling and greedy search,
and the pieces beam search (:mod:`transformer.inference.beam`) shares with them. Every
algorithm is driven by a callback and runs its whole token loop inside one
``lax.while_loop``, so each is jit-compatible (wrap it in ``jax.jit`` with the callback
closed over and the static arguments bound):

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
* ``min_len``: EOS is forbidden at output positions ``< min_len``, i.e. at least ``min_len``
  tokens precede EOS. When this conflicts with the length limit, the limit wins.
* The loop stops as soon as every row has finished (EOS emitted, limit reached or, for beam
  search, early-stopped); rows that finished early are frozen, so a row's output never
  depends on the other rows in the batch.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID

TokensToLogits = Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]


class SearchOutput(NamedTuple):
    """Result of :func:`sample` / :func:`greedy`.

    tokens: int32[N, max_len], output tokens without the leading BOS, EOS included, pad after.
    lengths: int32[N], number of output tokens up to and including EOS.
    scores: float32[N], summed log-probabilities of the emitted tokens (EOS included) under
      the distribution each was drawn from, i.e. the constrained *and filtered* one (a forced
      EOS adds 0). On the static greedy path that is a point mass, so there the score is the
      model's log-probability instead (plain ``log_softmax`` of the logits, temperature 1, no
      renormalisation after the constraints), equal to the beam-search score at ``alpha = 0``.
    """

    tokens: jax.Array
    lengths: jax.Array
    scores: jax.Array


class _SampleState(NamedTuple):
    """The :func:`sample` loop state of N rows."""

    step: jax.Array  # int32[], output position being decided
    cur: jax.Array  # int32[N], token at decoder position `step` (BOS at step 0)
    cache: Any  # leaves [N, ...]
    out: jax.Array  # int32[N, max_len], output tokens so far, pad after
    finished: jax.Array  # bool[N], EOS emitted
    lengths: jax.Array  # int32[N], output tokens up to and including EOS
    scores: jax.Array  # float32[N], summed log-probabilities (see SearchOutput)


def _static_number(x) -> float | None:
    """The value of a Python/NumPy scalar (bools included), or None for a traced / array value."""
    if isinstance(x, numbers.Real):
        return float(x)
    return None


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


def _check_top_k(top_k) -> int:
    if not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool):
        raise TypeError(f"top_k must be a static Python int, got {type(top_k).__name__}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    return int(top_k)


def _apply_temperature(logits: jax.Array, temperature, top_k: int) -> tuple[jax.Array, int]:
    """Step 1 of :func:`filter_logits`; a static temperature of 0 becomes ``top_k = 1``."""
    t_static = _static_number(temperature)
    if t_static is not None:
        if t_static < 0:
            raise ValueError(f"temperature must be >= 0, got {t_static}")
        if t_static == 0:
            return logits, 1
        return (logits / t_static if t_static != 1.0 else logits), top_k
    t = jnp.asarray(temperature, jnp.float32)
    if t.ndim != 0:
        raise ValueError(f"temperature must be a scalar, got shape {t.shape}")
    v = logits.shape[-1]
    is_top = jnp.arange(v) == jnp.argmax(logits, axis=-1)[..., None]
    scaled = logits / jnp.where(t > 0, t, 1.0)
    return jnp.where(t > 0, scaled, jnp.where(is_top, logits, -jnp.inf)), top_k


def _nucleus_keep(sorted_logits: jax.Array, top_p) -> jax.Array:
    """Top-p keep mask over logits sorted best first (ties by index): float[..., n] -> bool.

    Keeps each entry whose preceding probability mass is below ``top_p``, i.e. the smallest
    prefix reaching ``top_p``, and always the first entry.
    """
    p = jnp.asarray(top_p, jnp.float32)
    cum = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
    mass_before = jnp.concatenate([jnp.zeros_like(cum[..., :1]), cum[..., :-1]], axis=-1)
    first = jnp.arange(sorted_logits.shape[-1]) == 0
    return (mass_before < p) | (p >= 1.0) | first


def _top_p_active(top_p) -> bool:
    p_static = _static_number(top_p)
    return p_static is None or p_static < 1.0


def filter_logits(logits: jax.Array, temperature=1.0, top_k: int = 0, top_p=1.0) -> jax.Array:
    """Temperature scaling, then top-k, then top-p (nucleus) filtering, in that order.

    1. Temperature: ``logits / temperature``. ``temperature == 0`` keeps only the argmax
       (greedy; the kept logit is left unscaled).
    2. Top-k (``top_k > 0``): keeps exactly ``min(top_k, V)`` entries, the largest logits;
       ties are broken by index (lower index kept first).
    3. Top-p (``top_p < 1``): on the distribution left after steps 1-2 (renormalised), keeps
       the smallest set of highest-probability tokens (ties by index) whose cumulative
       probability reaches ``top_p``; the most probable token is always kept, even for
       ``top_p <= 0``.

    Dropped entries are set to ``-inf``; at least one finite entry per row remains when the
    input row has one. ``top_k = 0`` and ``top_p = 1.0`` mean "off".

    Static vs traced: ``top_k`` must be a Python int (it fixes a shape). ``temperature``
    and ``top_p`` may be Python scalars (checked and specialised at trace time, e.g. the
    ``top_p >= 1`` pass is skipped) or traced float scalars (any value works, including a
    traced ``temperature == 0`` and a traced ``top_p >= 1``, which keeps everything).
    This is the full-vocabulary reference; :func:`sample` draws from the same distribution
    through :func:`top_candidates` whenever ``top_k`` is set, without sorting V entries.

    Args:
      logits: float[..., V].
    Returns:
      float32[..., V], filtered logits.
    """
    logits = jnp.asarray(logits, jnp.float32)
    v = logits.shape[-1]
    neg_inf = jnp.array(-jnp.inf, jnp.float32)
    logits, top_k = _apply_temperature(logits, temperature, _check_top_k(top_k))

    # 2. Top-k: keep entries above the k-th value plus the lowest-index ties equal to it.
    if 0 < top_k < v:
        kth = lax.top_k(logits, top_k)[0][..., -1:]
        greater = logits > kth
        equal = logits == kth
        n_greater = jnp.sum(greater, axis=-1, keepdims=True)
        keep = greater | (equal & (jnp.cumsum(equal, axis=-1) <= top_k - n_greater))
        logits = jnp.where(keep, logits, neg_inf)

    # 3. Top-p on the renormalised distribution left by steps 1-2.
    if _top_p_active(top_p):
        order = jnp.argsort(-logits, axis=-1, stable=True)
        keep_sorted = _nucleus_keep(jnp.take_along_axis(logits, order, axis=-1), top_p)
        keep = jnp.put_along_axis(
            jnp.zeros_like(keep_sorted), order, keep_sorted, axis=-1, inplace=False
        )
        logits = jnp.where(keep, logits, neg_inf)
    return logits


def top_candidates(
    logits: jax.Array, temperature=1.0, top_k: int = 1, top_p=1.0
) -> tuple[jax.Array, jax.Array]:
    """What :func:`filter_logits` keeps, as its ``min(top_k, V)`` best entries.

    Returns ``(values float32[..., k], ids int32[..., k])`` sorted best first (ties by
    index, as ``lax.top_k`` orders them), with entries that top-p drops set to ``-inf``:
    ``filter_logits(logits, ...)`` is ``values`` scattered to ``ids`` over a row of ``-inf``.
    One ``lax.top_k`` pass over V and a softmax over k entries replace filter_logits' sort,
    softmax and scatter over V; a sampler then draws Gumbel noise for k values, not V.
    """
    top_k = _check_top_k(top_k)
    if top_k == 0:
        raise ValueError("top_candidates needs top_k >= 1; use filter_logits for top_k = 0")
    logits = jnp.asarray(logits, jnp.float32)
    logits, top_k = _apply_temperature(logits, temperature, top_k)
    values, ids = lax.top_k(logits, min(top_k, logits.shape[-1]))
    if _top_p_active(top_p):
        values = jnp.where(_nucleus_keep(values, top_p), values, -jnp.inf)
    return values, ids.astype(jnp.int32)


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


def _greedy_choice(logits, constrained, step):
    """Argmax under the length constraints, scored by the model's log-probability."""
    tok = jnp.argmax(constrained, axis=-1).astype(jnp.int32)
    return tok, _pick(logits, tok) - jax.nn.logsumexp(logits, axis=-1)


def _sampled_choice(logits, constrained, step, *, rngs, temperature, top_k: int, top_p):
    """A draw from the constrained, filtered distribution, scored under that distribution."""
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(rngs, step)
    if top_k > 0:  # draw among the k candidates: no sort or noise over V
        values, ids = top_candidates(constrained, temperature, top_k, top_p)
        choice = jax.vmap(jax.random.categorical)(keys, values)
        tok = _pick(ids, choice)
    else:
        values = filter_logits(constrained, temperature, top_k, top_p)
        tok = choice = jax.vmap(jax.random.categorical)(keys, values)
    tok = tok.astype(jnp.int32)
    return tok, _pick(values, choice) - jax.nn.logsumexp(values, axis=-1)


def _sample_step(
    s: _SampleState, *, tokens_to_logits, choose, limits, min_len, eos_id: int, pad_id: int
) -> _SampleState:
    """One token for every row; rows that already finished emit pad and stay unchanged."""
    n = s.cur.shape[0]
    logits, cache = call_tokens_to_logits(tokens_to_logits, s.cur, s.step, s.cache, n)
    is_eos = jnp.arange(logits.shape[-1]) == eos_id  # [V]
    forced = (s.step + 1 >= limits)[:, None]  # [N, 1], last allowed position: EOS only
    forbid_eos = (s.step < min_len) & ~forced  # [N, 1]
    constrained = jnp.where(forbid_eos & is_eos, -jnp.inf, logits)  # [N, V]
    constrained = jnp.where(forced, jnp.where(is_eos, 0.0, -jnp.inf), constrained)
    tok, tok_logp = choose(logits, constrained, s.step)
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


def sample(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    rngs: jax.Array | None,
    max_len: int,
    max_lens: jax.Array | None = None,
    min_len=0,
    temperature=1.0,
    top_k: int = 0,
    top_p=1.0,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    return_cache: bool = False,
) -> SearchOutput | tuple[SearchOutput, Any]:
    """Ancestral sampling (or greedy decoding) of N independent rows.

    At each step the length constraints are applied to the logits (EOS set to -inf before
    ``min_len``; everything but EOS set to -inf at the row's last allowed position), then
    :func:`filter_logits` (temperature -> top-k -> top-p), then one token is drawn per row.

    Randomness: ``rngs`` holds one key per row (typed keys of shape [N] or raw uint32
    [N, 2]); row r at step t draws with ``jax.random.fold_in(rngs[r], t)``, so a row's
    sample depends only on its own key, never on the other rows. Derive row keys from a
    seed and the sentence index (e.g. ``fold_in(seed_key, sentence_id)``) for results that
    do not depend on batching.

    Greedy: a static ``temperature == 0`` or ``top_k == 1`` takes the argmax (``rngs`` may
    be None). A traced temperature of 0 also yields the argmax, through the sampler.
    Scores: see :class:`SearchOutput`.

    Static: ``max_len``, ``top_k``, ids, and which of temperature/top_p are Python scalars.
    Traced allowed: ``max_lens`` (int32[N]), ``min_len``, ``temperature``, ``top_p``.

    Returns:
      SearchOutput(tokens int32[N, max_len], lengths int32[N], scores float32[N]); with
      ``return_cache=True`` the pair ``(output, final_cache)``.
    """
    check_max_len(max_len)
    n = num_rows(cache, max_lens, rngs)
    limits = row_limits(max_lens, n, max_len)
    t_static = _static_number(temperature)
    if (t_static is not None and t_static == 0) or top_k == 1:
        choose = _greedy_choice
    else:
        choose = functools.partial(
            _sampled_choice, rngs=_check_rngs(rngs, n), temperature=temperature,
            top_k=top_k, top_p=top_p,
        )  # fmt: skip
    step = functools.partial(
        _sample_step, tokens_to_logits=tokens_to_logits, choose=choose, limits=limits,
        min_len=min_len, eos_id=eos_id, pad_id=pad_id,
    )  # fmt: skip
    init = _initial_sample_state(cache, n, max_len, bos_id, pad_id)
    final = lax.while_loop(lambda s: (s.step < max_len) & ~jnp.all(s.finished), step, init)
    result = SearchOutput(final.out, final.lengths, final.scores)
    return (result, final.cache) if return_cache else result


def greedy(
    tokens_to_logits: TokensToLogits, cache: Any, *, max_len: int,
    max_lens: jax.Array | None = None, min_len=0, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
    pad_id: int = PAD_ID, return_cache: bool = False,
) -> SearchOutput | tuple[SearchOutput, Any]:  # fmt: skip
    """Greedy (argmax) decoding: :func:`sample` with ``temperature=0``, model log-prob scores."""
    return sample(
        tokens_to_logits, cache, rngs=None, max_len=max_len, max_lens=max_lens, min_len=min_len,
        temperature=0.0, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, return_cache=return_cache,
    )  # fmt: skip

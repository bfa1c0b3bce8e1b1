"""Model-independent autoregressive decoding: filtering, sampling, greedy and beam search.

Every algorithm is driven by a callback and runs its whole token loop inside one
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

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID

TokensToLogits = Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]


class DecodeOutput(NamedTuple):
    """Result of :func:`sample` / :func:`greedy`.

    tokens: int32[N, max_len], output tokens without the leading BOS, EOS included, pad after.
    lengths: int32[N], number of output tokens up to and including EOS.
    scores: float32[N], summed log-probabilities of the chosen tokens (see :func:`sample`).
    """

    tokens: jax.Array
    lengths: jax.Array
    scores: jax.Array


class BeamOutput(NamedTuple):
    """Result of :func:`beam_search`, best hypothesis first.

    tokens: int32[B, n_best, max_len]; lengths: int32[B, n_best] (EOS included);
    scores: float32[B, n_best], length-penalised log-probabilities. An entry scored -inf is
    not a hypothesis (fewer than n_best exist, e.g. with a length limit of 1).
    """

    tokens: jax.Array
    lengths: jax.Array
    scores: jax.Array


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _static_number(x) -> float | None:
    """The value of a Python/NumPy scalar, or None for a traced / array value."""
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return None


def expand_to_beams(pytree: Any, beam_size: int) -> Any:
    """Repeats each row of every leaf ``beam_size`` times along axis 0.

    Row ``b`` becomes rows ``b * beam_size + j`` for ``j < beam_size``. Call it once on the
    encoder output / cross-attention state and the initial cache before :func:`beam_search`.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), pytree)


def _num_rows(cache: Any, *others: Any) -> int:
    """N from the cache leaves (checking they agree), else from the first non-None other."""
    leaves = jax.tree.leaves(cache)
    sizes = set()
    for leaf in leaves:
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


def _row_limits(max_lens, n: int, max_len: int) -> jax.Array:
    if max_lens is None:
        return jnp.full((n,), max_len, jnp.int32)
    max_lens = jnp.asarray(max_lens, jnp.int32)
    if max_lens.shape != (n,):
        raise ValueError(f"max_lens must have shape ({n},), got {max_lens.shape}")
    return jnp.clip(max_lens, 1, max_len)


def _check_max_len(max_len) -> None:
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise ValueError(f"max_len must be a positive Python int (static), got {max_len!r}")


def _call(tokens_to_logits, tokens, step, cache, n: int):
    logits, cache = tokens_to_logits(tokens, step, cache)
    logits = jnp.asarray(logits, jnp.float32)
    if logits.ndim != 2 or logits.shape[0] != n:
        raise ValueError(
            f"tokens_to_logits must return logits of shape [{n}, V], got {logits.shape}"
        )
    return logits, cache


# --------------------------------------------------------------------------------------
# Logit filtering
# --------------------------------------------------------------------------------------


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
    softmax and scatter over V, and a sampler then draws its Gumbel noise for k values,
    not V.
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


# --------------------------------------------------------------------------------------
# Sampling / greedy
# --------------------------------------------------------------------------------------


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
) -> DecodeOutput | tuple[DecodeOutput, Any]:
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

    Scores: the sum over the emitted tokens (EOS included) of the log-probability of the
    chosen token under the distribution it was drawn from, i.e. the constrained *and
    filtered* distribution (a forced EOS contributes 0). On the static greedy path that
    distribution is a point mass, so there the score is instead the model's log-probability
    (plain ``log_softmax`` of the logits, temperature 1, no renormalisation after the
    constraints), which equals the beam-search score with ``alpha = 0``.

    Static: ``max_len``, ``top_k``, ids, and which of temperature/top_p are Python scalars.
    Traced allowed: ``max_lens`` (int32[N]), ``min_len``, ``temperature``, ``top_p``.

    Returns:
      DecodeOutput(tokens int32[N, max_len], lengths int32[N], scores float32[N]); with
      ``return_cache=True`` the pair ``(output, final_cache)``.
    """
    _check_max_len(max_len)
    n = _num_rows(cache, max_lens, rngs)
    limits = _row_limits(max_lens, n, max_len)
    t_static = _static_number(temperature)
    greedy_path = (t_static is not None and t_static == 0) or top_k == 1
    if not greedy_path:
        if rngs is None:
            raise ValueError("sample needs rngs (one key per row) unless decoding greedily")
        rngs = jnp.asarray(rngs) if not isinstance(rngs, jax.Array) else rngs
        typed = jnp.issubdtype(rngs.dtype, jax.dtypes.prng_key)
        expected = (n,) if typed else (n, 2)
        if rngs.shape != expected:
            raise ValueError(f"rngs must hold one key per row: shape {expected}, got {rngs.shape}")

    def cond(state):
        step, _, _, _, finished, _, _ = state
        return (step < max_len) & ~jnp.all(finished)

    def body(state):
        step, cur, cache, out, finished, lengths, scores = state
        logits, cache = _call(tokens_to_logits, cur, step, cache, n)
        v = logits.shape[-1]
        is_eos = jnp.arange(v) == eos_id
        forced = (step + 1 >= limits)[:, None]
        forbid_eos = (step < min_len) & ~forced
        if greedy_path:
            masked = jnp.where(forbid_eos & is_eos, -jnp.inf, logits)
            tok = jnp.argmax(masked, axis=-1).astype(jnp.int32)
            tok = jnp.where(forced[:, 0], eos_id, tok)
            tok_logp = _pick(logits, tok) - jax.nn.logsumexp(logits, axis=-1)
        else:
            constrained = jnp.where(forbid_eos & is_eos, -jnp.inf, logits)
            constrained = jnp.where(forced, jnp.where(is_eos, 0.0, -jnp.inf), constrained)
            keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(rngs, step)
            if top_k > 0:  # draw among the k candidates: no sort or noise over V
                values, ids = top_candidates(constrained, temperature, top_k, top_p)
                choice = jax.vmap(jax.random.categorical)(keys, values)
                tok = _pick(ids, choice)
            else:
                values = filter_logits(constrained, temperature, top_k, top_p)
                tok = choice = jax.vmap(jax.random.categorical)(keys, values)
            tok = tok.astype(jnp.int32)
            tok_logp = _pick(values, choice) - jax.nn.logsumexp(values, axis=-1)
        tok = jnp.where(finished, pad_id, tok)
        scores = scores + jnp.where(finished, 0.0, tok_logp)
        lengths = lengths + (~finished).astype(jnp.int32)
        out = lax.dynamic_update_slice(out, tok[:, None], (0, step))
        finished = finished | (tok == eos_id)
        return step + 1, tok, cache, out, finished, lengths, scores

    init = (
        jnp.array(0, jnp.int32),
        jnp.full((n,), bos_id, jnp.int32),
        cache,
        jnp.full((n, max_len), pad_id, jnp.int32),
        jnp.zeros((n,), bool),
        jnp.zeros((n,), jnp.int32),
        jnp.zeros((n,), jnp.float32),
    )
    _, _, cache, out, _, lengths, scores = lax.while_loop(cond, body, init)
    result = DecodeOutput(out, lengths, scores)
    return (result, cache) if return_cache else result


def greedy(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    max_len: int,
    max_lens: jax.Array | None = None,
    min_len=0,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    return_cache: bool = False,
) -> DecodeOutput | tuple[DecodeOutput, Any]:
    """Greedy (argmax) decoding: :func:`sample` with ``temperature=0``.

    Scores are model log-probabilities (see :func:`sample`).
    """
    return sample(
        tokens_to_logits,
        cache,
        rngs=None,
        max_len=max_len,
        max_lens=max_lens,
        min_len=min_len,
        temperature=0.0,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        return_cache=return_cache,
    )


# --------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------


def length_penalty(length, alpha) -> jax.Array:
    """GNMT length penalty ``((5 + length) / 6) ** alpha``; ``alpha = 0`` gives 1."""
    length = jnp.asarray(length, jnp.float32)
    return jnp.power((5.0 + length) / 6.0, jnp.asarray(alpha, jnp.float32))


def beam_search(
    tokens_to_logits: TokensToLogits,
    cache: Any,
    *,
    batch_size: int,
    beam_size: int,
    max_len: int,
    max_lens: jax.Array | None = None,
    min_len=0,
    alpha=0.6,
    n_best: int = 1,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    return_cache: bool = False,
) -> BeamOutput | tuple[BeamOutput, Any]:
    """Beam search with GNMT length penalty, separate live/finished sets and early stopping.

    ``cache`` (and whatever the callback closes over) is laid out with
    ``N = batch_size * beam_size`` rows, row ``b * beam_size + j`` = beam j of element b
    (see :func:`expand_to_beams`). Each step all cache leaves are gathered along axis 0 by
    the parent beam of each surviving hypothesis.

    Per step and batch element: every live beam is extended by every token (log-probs are
    ``log_softmax`` of the logits with the length constraints applied as -inf masks, no
    renormalisation); the top ``2 * beam_size`` candidates by summed log-prob are taken, so
    that at least ``beam_size`` non-EOS ones are among them. Those ending in EOS enter the
    finished set with score ``logprob / ((5 + len) / 6) ** alpha`` (``len`` = output tokens
    including EOS); the finished set keeps the ``beam_size`` best scores. The best
    ``beam_size`` non-EOS candidates become the live beams.

    Early stopping (per batch element, exact): a live beam with summed log-prob ``lp`` (<= 0,
    and only decreasing as tokens are added) that finishes at length ``L`` in
    ``[t + 2, max_lens[b]]`` scores at most ``lp / penalty(L)``, hence at most
    ``lp / max(penalty(t + 2), penalty(max_lens[b]))`` -- for ``alpha >= 0`` the penalty
    grows with length, so the bound is ``lp / penalty(max_lens[b])``. When this bound for
    the best live beam is below the ``n_best``-th best finished score, no future hypothesis
    can enter the returned n-best list, so the element is frozen; the result equals running
    to ``max_len`` without early stopping. The loop ends when all elements are frozen or
    have reached their limit.

    Because EOS is forced at each element's length limit, every element normally ends with
    finished hypotheses; an element with no finite-scored finished hypothesis falls back
    to its live beams (scored ``logprob / penalty(current length)``, no EOS).

    ``beam_size = 1`` follows the greedy path, except that an EOS candidate ranked second
    is kept as a finished hypothesis and can win if the greedy continuation ends up worse.

    Args:
      max_lens: int32[batch_size] (or int32[batch_size * beam_size] with equal values per
        element), per-element output-token limit; None = max_len.
      alpha: length-penalty exponent (Python float or traced scalar); 0 = plain log-prob.
      n_best: number of hypotheses returned per element (1 <= n_best <= beam_size).
    Returns:
      BeamOutput(tokens int32[B, n_best, max_len], lengths int32[B, n_best],
      scores float32[B, n_best]) sorted best first; with ``return_cache=True`` the pair
      ``(output, final_cache)``.
    """
    _check_max_len(max_len)
    b, k = batch_size, beam_size
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"beam_size must be a positive integer, got {k!r}")
    if not isinstance(b, int) or b < 1:
        raise ValueError(f"batch_size must be a positive integer, got {b!r}")
    if not isinstance(n_best, int) or not 1 <= n_best <= k:
        raise ValueError(f"n_best must be an integer in [1, beam_size={k}], got {n_best!r}")
    n = b * k
    n_cache = _num_rows(cache, jnp.zeros((n,)))
    if n_cache != n:
        raise ValueError(
            f"cache has {n_cache} rows, expected batch_size * beam_size = {n}; "
            "lay it out with expand_to_beams"
        )
    if max_lens is not None:
        max_lens = jnp.asarray(max_lens, jnp.int32)
        if max_lens.shape == (n,) and k > 1:
            max_lens = max_lens.reshape(b, k)[:, 0]
    limits = _row_limits(max_lens, b, max_len)  # [B]
    neg_inf = jnp.array(-jnp.inf, jnp.float32)
    batch_idx = jnp.arange(b)[:, None]

    def cond(state):
        return (state["step"] < max_len) & ~jnp.all(state["done"])

    def body(s):
        step = s["step"]
        logits, new_cache = _call(tokens_to_logits, s["live_tok"].reshape(n), step, s["cache"], n)
        v = logits.shape[-1]
        logp = jax.nn.log_softmax(logits, axis=-1).reshape(b, k, v)
        is_eos = jnp.arange(v) == eos_id
        forced = (step + 1 >= limits)[:, None, None]
        logp = jnp.where(forced & ~is_eos, neg_inf, logp)
        logp = jnp.where((step < min_len) & ~forced & is_eos, neg_inf, logp)

        # Top 2k candidates over all (beam, token) extensions.
        cand = (s["live_logp"][:, :, None] + logp).reshape(b, k * v)
        top_logp, top_idx = lax.top_k(cand, min(2 * k, k * v))
        parent = top_idx // v
        token = (top_idx % v).astype(jnp.int32)
        seqs = jnp.take_along_axis(s["live_seqs"], parent[:, :, None], axis=1)
        seqs = lax.dynamic_update_slice(seqs, token[:, :, None], (0, 0, step))
        cand_eos = token == eos_id

        # Live: best k non-EOS candidates.
        live_logp, pos = lax.top_k(jnp.where(cand_eos, neg_inf, top_logp), k)
        live_seqs = jnp.take_along_axis(seqs, pos[:, :, None], axis=1)
        live_tok = jnp.take_along_axis(token, pos, axis=1)
        live_parent = jnp.take_along_axis(parent, pos, axis=1)

        # Finished: merge EOS candidates into the k best (existing ones first on ties).
        fin_cand = jnp.where(cand_eos, top_logp / length_penalty(step + 1, alpha), neg_inf)
        all_scores = jnp.concatenate([s["fin_scores"], fin_cand], axis=1)
        all_seqs = jnp.concatenate([s["fin_seqs"], seqs], axis=1)
        all_lens = jnp.concatenate(
            [s["fin_lens"], jnp.full(fin_cand.shape, step + 1, jnp.int32)], axis=1
        )
        fin_scores, pos = lax.top_k(all_scores, k)
        fin_seqs = jnp.take_along_axis(all_seqs, pos[:, :, None], axis=1)
        fin_lens = jnp.take_along_axis(all_lens, pos, axis=1)

        # Freeze elements that are already done.
        active = ~s["done"]
        a2, a3 = active[:, None], active[:, None, None]
        live_parent = jnp.where(a2, live_parent, jnp.arange(k)[None, :])
        flat_parent = (batch_idx * k + live_parent).reshape(n)
        new = {
            "step": step + 1,
            "cache": jax.tree.map(lambda x: jnp.take(x, flat_parent, axis=0), new_cache),
            "live_tok": jnp.where(a2, live_tok, s["live_tok"]),
            "live_logp": jnp.where(a2, live_logp, s["live_logp"]),
            "live_seqs": jnp.where(a3, live_seqs, s["live_seqs"]),
            "fin_scores": jnp.where(a2, fin_scores, s["fin_scores"]),
            "fin_seqs": jnp.where(a3, fin_seqs, s["fin_seqs"]),
            "fin_lens": jnp.where(a2, fin_lens, s["fin_lens"]),
            "live_len": s["live_len"] + active.astype(jnp.int32),
        }

        # Early stopping: best reachable score of any live beam vs the n_best-th finished.
        max_penalty = jnp.maximum(length_penalty(step + 2, alpha), length_penalty(limits, alpha))
        bound = new["live_logp"][:, 0] / max_penalty
        worst = new["fin_scores"][:, n_best - 1]
        new["done"] = s["done"] | (step + 1 >= limits) | (bound < worst)
        return new

    init = {
        "step": jnp.array(0, jnp.int32),
        "cache": cache,
        "live_tok": jnp.full((b, k), bos_id, jnp.int32),
        # Only beam 0 is live at the start (all beams are identical).
        "live_logp": jnp.where(jnp.arange(k) == 0, 0.0, neg_inf) * jnp.ones((b, 1)),
        "live_seqs": jnp.full((b, k, max_len), pad_id, jnp.int32),
        "fin_scores": jnp.full((b, k), neg_inf),
        "fin_seqs": jnp.full((b, k, max_len), pad_id, jnp.int32),
        "fin_lens": jnp.zeros((b, k), jnp.int32),
        "live_len": jnp.zeros((b,), jnp.int32),
        "done": jnp.zeros((b,), bool),
    }
    s = lax.while_loop(cond, body, init)

    has_finished = jnp.isfinite(s["fin_scores"][:, 0])
    live_scores = s["live_logp"] / length_penalty(s["live_len"], alpha)[:, None]
    live_lens = jnp.broadcast_to(s["live_len"][:, None], (b, k))
    tokens = jnp.where(has_finished[:, None, None], s["fin_seqs"], s["live_seqs"])
    lengths = jnp.where(has_finished[:, None], s["fin_lens"], live_lens)
    scores = jnp.where(has_finished[:, None], s["fin_scores"], live_scores)
    result = BeamOutput(tokens[:, :n_best], lengths[:, :n_best], scores[:, :n_best])
    return (result, s["cache"]) if return_cache else result

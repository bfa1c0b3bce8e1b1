"""Sampling filters: the stages that turn a step's next-token logits into the distribution
greedy search, sampling and beam search choose from, one class each, composed by
:class:`FilterChain`.

A filter maps ``(logits, ids, step) -> logits``: ``logits`` float32[..., C] are C entries of
the vocabulary (-inf = dropped), ``ids`` are their token ids (int32[..., C] per row, or one
increasing row int32[C] for all rows), ``step`` is the output position being decided. The
same call serves both paths of a chain:

* the full path (:meth:`FilterChain.__call__`): C = V, ``ids`` = ``arange(V)``;
* the candidate path (:meth:`FilterChain.candidates`): the filters before the first one that
  keeps at most k tokens (``keeps_at_most``, e.g. :class:`TopK`) run over V, then
  ``lax.top_k`` takes the k best entries and the remaining filters run on those k only, so a
  sampler never sorts V entries nor draws noise for them.

The two paths keep the same tokens with the same values when every filter keeps the
contract: a dropped entry stays -inf, a kept entry's new value depends on the entries still
finite only, and a rule over ranks uses :func:`best_first_mask`'s order (the one
``lax.top_k`` selects in).

Adding a filter is adding one class, decorated with ``@FILTERS.register("name")``, in the
package or in a user's module named in ``plugins.modules`` (docs/extending.md); the decode
setting ``decode.filters="name"`` (or ``"name=number"`` for a filter built from one number)
then puts it in the chain :func:`filters_from_settings` builds.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from transformer.common.registry import Registry
from transformer.common.special_ids import EOS_ID

NEG_INF = -jnp.inf
FILTERS = Registry("decode filter")  # decode.filters names -> their Filter classes


def static_number(x) -> float | None:
    """The value of a Python/NumPy scalar (bools included), or None for a traced/array value."""
    if isinstance(x, numbers.Real):
        return float(x)
    return None


class Filter:
    """One stage of a :class:`FilterChain`; subclasses define ``__call__``.

    ``keeps_at_most``: a static bound k on how many tokens the filter keeps per row, all
    among the k best of its input in :func:`best_first_mask`'s order, or None; the first such
    filter of a chain sets how many candidates the candidate path draws from, and a bound of
    1 makes the chain greedy.
    ``sampling_only``: the filter never changes which token is the most likely one, so
    greedy and beam search skip it (temperature, top-k, top-p); a filter that forbids or
    reweights tokens leaves it False and applies to every search.
    """

    keeps_at_most: int | None = None
    sampling_only: bool = False

    def __call__(self, logits: jax.Array, ids: jax.Array, step) -> jax.Array:
        raise NotImplementedError


def descending_key(logits: jax.Array) -> jax.Array:
    """int32 keys that sort ascending as the logits descend, -0.0 after 0.0 (lax.top_k's order).

    The float's bits as an int order non-negative floats; flipping all but the sign bit of
    negative ones orders those too, and ``~`` reverses the order without overflow.
    """
    bits = lax.bitcast_convert_type(logits, jnp.int32)
    return ~jnp.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def best_first_mask(logits: jax.Array, ids: jax.Array, keep_sorted: Callable) -> jax.Array:
    """Drops entries by a rule over the row ranked best first, the order ``lax.top_k`` gives.

    Larger logits first, 0.0 above -0.0, then the lower token id. ``keep_sorted`` maps the
    ranked logits float32[..., C] to a keep mask bool[..., C] in that order; the mask goes back
    to the entries' own positions and dropped ones get -inf. Ranking by token id rather than
    position makes the rule the same on V entries and on the candidates.
    """
    position = lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    if ids.ndim == 1:  # one increasing id row for all rows: a stable sort ties by id
        order = lax.sort((descending_key(logits), position), num_keys=1)[-1]
    else:  # candidates: ids decide ties (sorting k entries, so the extra key is cheap)
        keys = (descending_key(logits), jnp.broadcast_to(ids, logits.shape), position)
        order = lax.sort(keys, num_keys=2)[-1]
    ranked = jnp.take_along_axis(logits, order, axis=-1)
    keep = jnp.broadcast_to(keep_sorted(ranked), logits.shape)  # in ranked order
    keep = jnp.put_along_axis(jnp.zeros_like(keep), order, keep, axis=-1, inplace=False)
    return jnp.where(keep, logits, NEG_INF)


def keep_best(logits: jax.Array, ids: jax.Array) -> jax.Array:
    """Only each row's best entry (in :func:`best_first_mask`'s order) stays; the rest -inf."""
    return best_first_mask(logits, ids, lambda ranked: jnp.arange(ranked.shape[-1]) == 0)


@FILTERS.register("min_len")
class MinLength(Filter):
    """EOS is forbidden at output positions ``< min_len``: at least min_len tokens precede it.

    ``min_len`` may be traced. The length limit still wins: the searches force EOS at a row's
    last allowed position whatever the filters say.
    """

    def __init__(self, min_len, eos_id: int = EOS_ID):
        self.min_len = min_len
        self.eos_id = eos_id

    def __call__(self, logits, ids, step):
        if static_number(self.min_len) == 0:
            return logits
        return jnp.where((step < self.min_len) & (ids == self.eos_id), NEG_INF, logits)


@FILTERS.register("temperature")
class Temperature(Filter):
    """``logits / t``: t < 1 sharpens the distribution, t > 1 flattens it.

    ``t == 0`` keeps only the best token, unscaled (greedy). A Python ``t`` is checked and
    specialised now (0 makes the chain greedy, 1 is skipped); a traced scalar takes any
    value, 0 included.
    """

    sampling_only = True

    def __init__(self, t):
        value = static_number(t)
        if value is None:
            t = jnp.asarray(t, jnp.float32)
            if t.ndim != 0:
                raise ValueError(f"temperature must be a scalar, got shape {t.shape}")
        elif value < 0:
            raise ValueError(f"temperature must be >= 0, got {value}")
        self.t = t if value is None else value
        self.keeps_at_most = 1 if value == 0 else None

    def __call__(self, logits, ids, step):
        if isinstance(self.t, float):
            if self.t == 0:
                return keep_best(logits, ids)
            return logits if self.t == 1.0 else logits / self.t
        scaled = logits / jnp.where(self.t > 0, self.t, 1.0)
        return jnp.where(self.t > 0, scaled, keep_best(logits, ids))


def check_top_k(k) -> int:
    """top_k fixes the candidate count, a shape, so it is a static int; 0 means off."""
    if not isinstance(k, numbers.Integral) or isinstance(k, bool):
        raise TypeError(f"top_k must be a static Python int, got {type(k).__name__}")
    if k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {k}")
    return int(k)


@FILTERS.register("top_k")
class TopK(Filter):
    """Keeps exactly ``min(k, C)`` entries, the largest logits (ties by the lower token id)."""

    sampling_only = True

    def __init__(self, k: int):
        k = check_top_k(k)
        if k == 0:
            raise ValueError("TopK needs k >= 1; leave the filter out for top_k = 0 (off)")
        self.keeps_at_most = k

    def __call__(self, logits, ids, step):
        k = self.keeps_at_most
        if k >= logits.shape[-1]:  # the candidate path's own k, or a k of at least V
            return logits
        return best_first_mask(logits, ids, lambda ranked: jnp.arange(ranked.shape[-1]) < k)


@FILTERS.register("top_p")
class TopP(Filter):
    """Nucleus: keeps the smallest set of most likely tokens whose probability reaches ``p``.

    Probabilities are those of the row as it arrives (renormalised over what earlier
    filters kept). An entry stays when the mass ranked before it is below p; the best entry
    always stays, even for p <= 0. A Python p >= 1 is skipped; ``p`` may be traced.
    """

    sampling_only = True

    def __init__(self, p):
        self.p = p

    def __call__(self, logits, ids, step):
        value = static_number(self.p)
        if value is not None and value >= 1.0:
            return logits
        return best_first_mask(logits, ids, self._nucleus)

    def _nucleus(self, ranked: jax.Array) -> jax.Array:
        """Keep mask over logits ranked best first: float[..., C] -> bool[..., C]."""
        p = jnp.asarray(self.p, jnp.float32)
        cum = jnp.cumsum(jax.nn.softmax(ranked, axis=-1), axis=-1)
        mass_before = jnp.concatenate([jnp.zeros_like(cum[..., :1]), cum[..., :-1]], axis=-1)
        first = jnp.arange(ranked.shape[-1]) == 0
        return (mass_before < p) | (p >= 1.0) | first


class FilterChain:
    """Filters applied in the order given; softmax of the result is the distribution drawn from.

    Built once per decoding setup (:func:`filters_from_settings`) and passed to
    ``search.sample``, ``search.greedy`` and ``beam.beam_search``.
    """

    def __init__(self, *filters: Filter):
        self.filters = tuple(filters)

    def __repr__(self) -> str:
        return f"FilterChain{self.filters!r}"

    def _first_bounded(self) -> int | None:
        """Index of the first filter that keeps at most k tokens, or None."""
        bounded = [i for i, f in enumerate(self.filters) if f.keeps_at_most is not None]
        return bounded[0] if bounded else None

    @property
    def width(self) -> int | None:
        """How many candidates the candidate path keeps (None: the chain has no bound)."""
        i = self._first_bounded()
        return None if i is None else self.filters[i].keeps_at_most

    @property
    def greedy(self) -> bool:
        """The chain keeps one token: a draw from it is the argmax."""
        return any(f.keeps_at_most == 1 for f in self.filters)

    def __call__(self, logits: jax.Array, step) -> jax.Array:
        """The full path: float[..., V] -> float32[..., V], dropped entries -inf."""
        logits = jnp.asarray(logits, jnp.float32)
        return _apply(self.filters, logits, jnp.arange(logits.shape[-1]), step)

    def constrain(self, logits: jax.Array, step) -> jax.Array:
        """The filters greedy and beam search use (all but ``sampling_only``), over V."""
        searched = [f for f in self.filters if not f.sampling_only]
        return _apply(searched, logits, jnp.arange(logits.shape[-1]), step)

    def candidates(self, logits: jax.Array, step) -> tuple[jax.Array, jax.Array]:
        """The candidate path: ``(values float32[..., k], ids int32[..., k])``, best first.

        ``self(logits, step)`` is ``values`` scattered to ``ids`` over a row of -inf.
        """
        i = self._first_bounded()
        if i is None:
            raise ValueError(
                "candidates need a filter that keeps at most k tokens (top_k >= 1 or "
                "temperature 0); use the full path for a chain without one"
            )
        logits = jnp.asarray(logits, jnp.float32)
        v = logits.shape[-1]
        logits = _apply(self.filters[:i], logits, jnp.arange(v), step)
        values, ids = lax.top_k(logits, min(self.filters[i].keeps_at_most, v))
        ids = ids.astype(jnp.int32)
        return _apply(self.filters[i:], values, ids, step), ids


def _apply(filters, logits: jax.Array, ids: jax.Array, step) -> jax.Array:
    for f in filters:
        logits = f(logits, ids, step)
    return logits


def decode_filters(
    *,
    min_len=0,
    temperature=1.0,
    top_k: int = 0,
    top_p=1.0,
    eos_id: int = EOS_ID,
    extra: tuple[Filter, ...] = (),
) -> FilterChain:
    """The decode settings' chain: min-length, temperature, the `extra` filters in order,
    top-k, top-p.

    Each stage acts on the distribution left by the stages before it (renormalised).
    ``top_k = 0`` and ``top_p = 1`` are off; ``top_k`` is a static int, the others may be
    traced.
    """
    filters = [MinLength(min_len, eos_id), Temperature(temperature), *extra]
    if check_top_k(top_k):
        filters.append(TopK(top_k))
    return FilterChain(*filters, TopP(top_p))


def parse_filters(spec: str) -> tuple[Filter, ...]:
    """The filters ``decode.filters`` names: comma-separated ``name`` or ``name=number``
    items, each built by its registered class (from the number, when given). Raises
    ValueError naming the item for an unknown name or a value its class refuses."""
    return tuple(_build_filter(item.strip()) for item in spec.split(",") if item.strip())


def _build_filter(item: str) -> Filter:
    name, has_value, value = item.partition("=")
    cls = FILTERS[name.strip()]
    try:
        return cls(_number(value, item)) if has_value else cls()
    except TypeError as e:  # a missing or surplus number, or one of the wrong kind
        raise ValueError(f"filter {item!r}: {e}") from None


def _number(text: str, item: str) -> int | float:
    """'3' -> 3, '0.05' -> 0.05: a filter's one argument."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    raise ValueError(f"filter {item!r}: {text.strip()!r} is not a number")


def filters_from_settings(settings) -> FilterChain:
    """The chain of a validated ``DecodeSettings`` (its min_len, temperature, filters, top_k,
    top_p)."""
    return decode_filters(
        min_len=settings.min_len,
        temperature=settings.temperature,
        top_k=settings.top_k,
        top_p=settings.top_p,
        extra=parse_filters(settings.filters),
    )
